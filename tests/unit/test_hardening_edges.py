"""What a client can send at the HTTP edge without a model: wrong methods, huge or unreadable bodies,
invalid Unicode, empty chats. Each gets our error shape and a message naming the problem, never a 500."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app
from playground.server.guards import MAX_BODY_BYTES, invalid_unicode_field
from playground.types import GeneratedToken, GenerationResult, Sequence
from playground.ui import controls
from widgets.html import render_result

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module", params=[True, False], ids=["with-ui", "api-only"])
def client(request: pytest.FixtureRequest) -> TestClient:
    return TestClient(create_app(Registry([]), ui=request.param))


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/generate", "POST"),
        ("PUT", "/v1/chat/completions", "POST"),
        ("DELETE", "/v1/models", "GET, POST"),
        ("POST", "/health", "GET"),
        ("POST", "/info", "GET"),
        ("GET", "/next_token", "POST"),
        ("PATCH", "/tokenize", "POST"),
    ],
)
def test_a_wrong_method_is_405_in_our_shape(client: TestClient, method: str, path: str, allow: str) -> None:
    response = client.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    assert response.json() == {
        "error": f"{method} is not allowed on {path}; use {allow}",
        "error_type": "method_not_allowed",
    }


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
    assert response.json()["error_type"] == "request_too_large"


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
    assert response.status_code == 422
    assert response.json()["error"] == (
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


DEEP_SCHEMA = '{"type":"object","properties":{"a":' * 200 + '{"type":"string"}' + "}}" * 200


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        ("json_schema", DEEP_SCHEMA, "the JSON schema is nested too deeply"),
        ("json_schema", "[" * 100000, "is nested too deeply"),
        ("regex", "a\ud800", "invalid Unicode at position 1"),
        ("grammar", 'start: "\ud800"', "invalid Unicode at position 8"),
    ],
    ids=["deep-schema", "deep-json", "surrogate-regex", "surrogate-grammar"],
)
def test_the_live_constraint_check_shows_problems_instead_of_raising(kind: str, text: str, expected: str) -> None:
    status = controls.constraint_status(kind, text)
    assert status.startswith('<div class="pg-box pg-bad pg-constraint-bad">✗ ')
    assert expected in status


def test_the_live_constraint_check_takes_a_missing_text() -> None:
    assert "the regex is empty" in controls.constraint_status("regex", None)


def test_the_static_widget_html_escapes_the_colour_mode() -> None:
    token = GeneratedToken(id=1, text="<script>", logprob=-0.1, raw_logprob=-0.2)
    result = GenerationResult(
        model_id="m<b>",
        prompt="p",
        input_length=1,
        best=Sequence(generated_text="<script>", finish_reason="length", generated_tokens=1, tokens=[token]),
    )
    page = render_result(result, colour_by="<img src=x onerror=alert(1)>")  # type: ignore[arg-type]
    assert "<img" not in page
    assert "<script>" not in page
    assert "model <b>m&lt;b&gt;</b>" in page
    assert "colour: &lt;img src=x onerror=alert(1)&gt; probability" in page
