"""What a client can send at the HTTP edge without a model: wrong methods, huge or unreadable bodies,
invalid Unicode, empty chats. Each gets our error shape and a message naming the problem, never a 500."""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app
from playground.server.guards import invalid_unicode_field
from playground.types.sizes import MAX_BODY_BYTES
from tests.support import error_of, table_rows

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module", params=[True, False], ids=["with-ui", "api-only"])
def client(request: pytest.FixtureRequest) -> TestClient:
    return TestClient(create_app(Registry([]), ui=request.param))


# The methods a route allows, and calls to such routes with a method they do not.
WRONG_METHODS = {
    "POST": [("GET", "/generate"), ("PUT", "/v1/chat/completions"), ("GET", "/next_token"), ("PATCH", "/tokenize")],
    "GET, POST": [("DELETE", "/v1/models")],
    "GET": [("POST", "/health"), ("POST", "/info"), ("DELETE", "/v1/models/embedded")],  # the path as sent
}


@pytest.mark.parametrize(("allow", "method", "path"), table_rows(WRONG_METHODS))
def test_a_wrong_method_is_405_in_our_shape(client: TestClient, allow: str, method: str, path: str) -> None:
    response = client.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    message, error_type = error_of(path, response.json())
    assert (message, error_type) == (f"{method} is not allowed on {path}; use {allow}", "method_not_allowed")


def test_the_ui_still_owns_get_slash(client: TestClient) -> None:
    response = client.get("/", follow_redirects=False)
    assert response.status_code in (200, 307)
    assert "405" not in response.text[:200]


def test_a_declared_oversized_body_is_413_before_it_is_read(client: TestClient) -> None:
    body = b'{"inputs": "' + b"a" * MAX_BODY_BYTES + b'"}'
    response = client.post("/generate", content=body, headers=JSON)
    assert response.status_code == 413
    assert response.json() == {
        "error": f"request body is {len(body)} bytes; this server takes at most {MAX_BODY_BYTES}",
        "error_type": "request_too_large",
    }


def test_a_chunked_oversized_body_is_413_in_our_shape(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"inputs": "'
        for _ in range(5):
            yield b"a" * (1024 * 1024)
        yield b'"}'

    response = client.post("/generate", content=chunks(), headers=JSON)
    assert response.status_code == 413
    assert response.json() == {  # (it said "Content Too Large", naming no limit)
        "error": f"request body is over {MAX_BODY_BYTES} bytes; this server takes at most {MAX_BODY_BYTES}",
        "error_type": "request_too_large",
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"inputs": "\xe9"}'.encode("latin-1"), "request body could not be parsed: it is not valid UTF-8"),
        (
            b'{"inputs": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            "request body could not be parsed: it is nested too deeply",
        ),
        (
            b'{"inputs": "x", "parameters": {"seed": 1' + b"0" * 5000 + b"}}",
            "request body could not be parsed: Exceeds the limit (4300 digits) for integer string conversion: value has 5001 digits",
        ),
    ],
    ids=["latin-1", "deep", "huge-int"],
)
def test_an_unparseable_body_is_422_saying_why(client: TestClient, body: bytes, message: str) -> None:
    response = client.post("/generate", content=body, headers=JSON)
    assert response.status_code == 422
    assert response.json() == {"error": message, "error_type": "validation"}


def test_a_compressed_body_is_415_naming_its_encoding(client: TestClient) -> None:
    """A gzip body (`Content-Encoding: gzip`) was "not valid UTF-8", which sent its client looking at its text."""
    body = gzip.compress(b'{"inputs": "hi"}')
    response = client.post("/generate", content=body, headers={**JSON, "content-encoding": "gzip"})
    assert response.status_code == 415
    assert response.json() == {
        "error": "Content-Encoding 'gzip': this server reads request bodies uncompressed",
        "error_type": "unsupported_media_type",
    }


@pytest.mark.parametrize("path", ["/generate", "/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("sent", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_json_body_sent_under_another_content_type_is_415_naming_the_header(
    client: TestClient, path: str, sent: str | None
) -> None:
    """`curl -d '{...}'` without `-H` sends a form's type, and FastAPI then reads no JSON: the answer said the body was
    no object. TGI answers 415 naming the header; so do we (a browser's cross-site form post stays unread)."""
    body = b'{"inputs": "hi", "prompt": "hi", "messages": [{"role": "user", "content": "hi"}]}'
    response = client.post(path, content=body, headers={"content-type": sent} if sent else {})
    message, kind = error_of(path, response.json())
    assert response.status_code == 415 and kind == "unsupported_media_type"
    assert message.startswith("the request body must be sent with `Content-Type: application/json` (")
    assert (repr(sent) if sent else "none was sent") in message
    assert client.post(path, headers={"content-type": "text/plain"}).status_code in (400, 422)  # no body: as before


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/generate", '{"inputs": "hi \\ud800"}', "inputs"),
        (
            "/generate_stream",
            '{"inputs": "x", "parameters": {"grammar": {"type": "choice", "value": ["a", "\\uDFFF"]}}}',
            "parameters.grammar.value[1]",
        ),
        ("/tokenize", '{"inputs": "\\udc00"}', "inputs"),
        ("/next_token", '{"inputs": "x", "prefix": "\\ud800"}', "prefix"),
        ("/v1/models", '{"id": "\\ud800", "provider_id": "local"}', "id"),
        (
            "/v1/chat/completions",
            '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud800"}]}]}',
            "messages[0].content[0].text",
        ),
    ],
)
def test_lone_surrogates_are_422_naming_the_field(client: TestClient, path: str, body: str, field: str) -> None:
    response = client.post(path, content=body.encode(), headers=JSON)
    assert response.status_code == (400 if path.startswith("/v1/") else 422)
    assert error_of(path, response.json())[0] == (
        f"{field}: contains invalid Unicode (a lone surrogate escape such as \\ud800); send valid UTF-8 text"
    )


def test_surrogate_pairs_and_escaped_backslashes_are_valid_text() -> None:
    assert invalid_unicode_field({"inputs": "\U0001f600 <script>", "stop": ["\\ud800"]}) is None
    assert invalid_unicode_field({"a": [{"b": "ok"}, {"c": ["x", "\udc80"]}]}) == "a[1].c[1]"
    assert invalid_unicode_field({"\ud800": 1}) == "\\ud800"
    assert invalid_unicode_field("\ud800") == "request body"


def test_next_token_with_an_empty_chat_is_422(client: TestClient) -> None:
    response = client.post("/next_token", json={"messages": []})
    assert response.status_code == 422
    assert response.json()["error"] == "messages: List should have at least 1 item after validation, not 0"
