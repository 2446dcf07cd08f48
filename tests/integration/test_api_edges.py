"""Odd requests against the live app (UI mounted, embedded model): every one answers 2xx or a 4xx in our
error shape that names the problem; the cases here once answered 500 or Gradio's 404."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from playground.types.sizes import MAX_BODY_BYTES
from tests.support import error_of

CHAT = [{"role": "user", "content": "Hi"}]


def post(url: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=120, **kw)


def assert_error(response: httpx.Response, status: int, message: str) -> None:
    """The status and message, in the route's error shape (OpenAI's on /v1/*, where an invalid request is 400)."""
    path = response.request.url.path
    assert response.status_code == (400 if status == 422 and path.startswith("/v1/") else status), response.text
    assert message in error_of(path, response.json())[0]


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/chat/completions", "max_tokens"),
        ("/v1/chat/completions", "max_completion_tokens"),
        ("/v1/completions", "max_tokens"),
        ("/v1/responses", "max_output_tokens"),
    ],
)
def test_a_max_tokens_past_the_context_is_context_length_exceeded_naming_the_field_sent(
    server_url: str, path: str, field: str
) -> None:
    """A max_tokens at or past the context is what OpenAI and vLLM word as "maximum context length" with the code
    clients (LiteLLM, LangChain) fall back on; it was a `validation` error, unlike a long prompt's."""
    body = (
        {"prompt": "Hi"}
        if path == "/v1/completions"
        else {"input": "Hi"}
        if "responses" in path
        else {"messages": CHAT}
    )
    response = post(server_url, path, {**body, field: 10**9})
    message, code = error_of(path, response.json())
    assert (
        response.status_code == 400 and code == "context_length_exceeded" and response.json()["error"]["param"] == field
    )
    assert message.startswith("This model's maximum context length is ") and f"in {field}" in message
    assert "max_new_tokens" not in message and "prompt is too long" in message
    tgi = post(server_url, "/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 10**9}})
    assert tgi.status_code == 422 and tgi.json()["error_type"] == "validation"  # TGI's route keeps TGI's words


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/chat/completions", "max_tokens"),
        ("/v1/chat/completions", "max_completion_tokens"),
        ("/v1/completions", "max_tokens"),
    ],
)
def test_a_prompt_and_max_tokens_past_the_context_name_the_field_sent(server_url: str, path: str, field: str) -> None:
    info = httpx.get(f"{server_url}/info", timeout=60).json()
    long = "word " * 200
    body = {"messages": [{"role": "user", "content": long}]} if "chat" in path else {"prompt": long}
    response = post(server_url, path, {**body, field: info["max_total_tokens"] - 50})
    assert_error(response, 422, "must be <= ")
    assert response.json()["error"]["param"] == field


def test_registering_a_model_with_invalid_unicode_is_422(server_url: str) -> None:
    body = b'{"id": "\\ud800", "provider_id": "local"}'
    response = httpx.post(
        f"{server_url}/v1/models", content=body, headers={"content-type": "application/json"}, timeout=60
    )
    assert_error(response, 422, "id: contains invalid Unicode")


def test_next_token_with_an_empty_chat_is_422(server_url: str) -> None:
    assert_error(post(server_url, "/next_token", {"messages": []}), 422, "messages: List should have at least 1 item")


@pytest.mark.parametrize(("method", "path"), [("GET", "/generate"), ("PUT", "/v1/chat/completions"), ("POST", "/info")])
def test_a_wrong_method_is_405_although_the_ui_owns_slash(server_url: str, method: str, path: str) -> None:
    assert_error(httpx.request(method, f"{server_url}{path}", timeout=30), 405, f"{method} is not allowed on {path}")


def test_an_oversized_body_is_413(server_url: str) -> None:
    body = {"inputs": "a" * (MAX_BODY_BYTES + 1)}
    assert_error(post(server_url, "/generate", body), 413, f"this server takes at most {MAX_BODY_BYTES}")


ODD_REQUESTS = [
    ("/generate", {"inputs": "<script>alert(1)</script>", "parameters": {"max_new_tokens": 3, "stop": ["</"]}}, 200),
    ("/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 3, "stop": [""]}}, 422),
    ("/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 2, "do_sample": True, "temperature": 1e-300}}, 200),
    (
        "/generate",
        {
            "inputs": "Hi",
            "parameters": {"max_new_tokens": 3, "grammar": {"type": "choice", "value": ["<script>", "😀"]}},
        },
        200,
    ),
    (
        "/generate",
        {
            "inputs": "Hi",
            "parameters": {"max_new_tokens": 2, "grammar": {"type": "json", "value": {"$ref": "file:///etc/passwd"}}},
        },
        422,
    ),
    (
        "/generate",
        {"inputs": "Hi", "parameters": {"max_new_tokens": 2, "grammar": {"type": "grammar", "value": 'foo: "a"'}}},
        422,
    ),
    ("/generate", {"inputs": "Hi", "parameters": {"logits_processors": [{"name": "nope", "params": ["1"]}]}}, 422),
    ("/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 10**9}}, 422),
    ("/generate_stream", {"inputs": "Hi", "parameters": {"best_of": 2, "do_sample": True}}, 422),
    ("/v1/chat/completions", {"messages": CHAT, "n": 0}, 422),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "stop": ["", ""]}, 422),  # vLLM refuses it too
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 422),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "guided_regex": "(a)\\1"}, 422),
    ("/tokenize", {"inputs": "<script>😀\u0000"}, 200),
    ("/v1/models", {"id": "../../etc", "provider_id": "nope"}, 403),  # loading is off: the same 403 for all
]


@pytest.mark.parametrize(
    ("path", "body", "status"), ODD_REQUESTS, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(ODD_REQUESTS)]
)
def test_odd_requests_answer_without_a_500(server_url: str, path: str, body: dict[str, Any], status: int) -> None:
    response = post(server_url, path, body)
    assert response.status_code == (400 if status == 422 and path.startswith("/v1/") else status), response.text
    if status >= 400:
        assert error_of(path, response.json())[0]
    elif path == "/tokenize":
        assert [token["text"] for token in response.json()][:3] == ["<", "script", ">"]
    else:
        assert "generated_text" in response.text or "choices" in response.text


@pytest.mark.parametrize(
    ("path", "field", "stream"),
    [
        ("/v1/chat/completions", "max_tokens", False),
        ("/v1/chat/completions", "max_completion_tokens", True),
        ("/v1/completions", "max_tokens", False),
        ("/v1/completions", "max_tokens", True),
    ],
)
def test_a_verdict_names_the_token_budget_as_the_client_sent_it(
    server_url: str, path: str, field: str, stream: bool
) -> None:
    """A cut answer's verdict said `max_new_tokens ended it` on the OpenAI routes, TGI's name for what the client
    sent as max_tokens (Responses already said max_output_tokens)."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    body = {"prompt": "A person as JSON: "} if path == "/v1/completions" else {"messages": CHAT}
    body |= {field: 3, "guided_json": schema, "stream": stream}
    response = post(server_url, path, body)
    assert response.status_code == 200, response.text
    if stream:
        chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        choice = next(c["choices"][0] for c in chunks if c["choices"] and c["choices"][0].get("validation"))
    else:
        choice = response.json()["choices"][0]
    message = choice["validation"]["message"]
    assert f"({field} ended it before the constraint was complete)" in message and "max_new_tokens" not in message
