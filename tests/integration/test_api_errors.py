"""Every bad input gets an error naming the problem (TGI's shape, OpenAI's on /v1/*), never a 500; the API key guards the API."""

from __future__ import annotations

from typing import Any

import httpx
import huggingface_hub
import openai
import pytest
from huggingface_hub import InferenceClient
from huggingface_hub.errors import ValidationError as HubValidationError

from playground.types import ChatMessage, GenerateParameters
from playground.ui import snippets
from tests.snippet_run import post_like_curl, run_python
from tests.spec import validate
from tests.support import error_of

KEY = "test-key-123"


@pytest.fixture(autouse=True)
def hub_reaches_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite runs with HF_HUB_OFFLINE=1, which blocks every huggingface_hub request; ours go to 127.0.0.1."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def _params(**params: Any) -> dict[str, Any]:
    return {"inputs": "Hello", "parameters": {"max_new_tokens": 3, **params}}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_params(grammar={"type": "json", "value": {"type": "nonsense"}}), "not a valid JSON Schema at type"),
        (_params(grammar={"type": "json", "value": "{not json"}), "invalid JSON in JSON schema"),
        (_params(grammar={"type": "regex", "value": "(ab"}), "invalid regex at position 0"),
        (_params(grammar={"type": "grammar", "value": "start: undefined_rule"}), "undefined_rule"),
        (_params(best_of=2), "parameters.best_of: best_of > 1 needs sampling"),
        (_params(stop=["a", "b", "c", "d", "e"]), "parameters.stop: List should have at most 4 items"),
        (_params(max_tokens=3), "parameters.max_tokens: unknown field"),
        ({"inputs": "Hello", "options": {}}, "options: unknown field"),
        ({"inputs": "hi " * 9000}, "the prompt is too long: it has 9001 tokens, and this model takes at most"),
        (_params(logits_processors=[{"name": "no_such_processor"}]), "unknown logits processor 'no_such_processor'"),
        (_params(top_n_tokens=21), "parameters.top_n_tokens: must be <= 20"),
    ],
    ids=[
        "invalid-schema",
        "schema-not-json",
        "invalid-regex",
        "invalid-grammar",
        "best_of-greedy",
        "five-stops",
        "unknown-parameter",
        "unknown-field",
        "prompt-too-long",
        "unknown-processor",
        "top_n_tokens",
    ],
)
def test_generate_rejects_with_422(server_url: str, body: dict[str, Any], message: str) -> None:
    """Every refusal is TGI's 422 `validation` (what InferenceClient raises its ValidationError by); the message
    names the problem."""
    response = httpx.post(f"{server_url}/generate", json=body, timeout=120)
    assert response.status_code == 422, response.text
    validate(response.json(), "ErrorResponse")
    assert response.json()["error_type"] == "validation"
    assert message in response.json()["error"]


def test_unknown_model_is_named(server_url: str) -> None:
    response = httpx.post(f"{server_url}/generate?model=gpt-9", json=_params(), timeout=60)
    assert response.status_code == 404
    assert response.json()["error_type"] == "model"
    assert "no provider serves model 'gpt-9'" in response.json()["error"]


CHOICE = {"type": "choice", "value": ["yes", "no"]}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/generate", {"inputs": "x"}),
        ("/generate_stream", {"inputs": "x"}),
        ("/tokenize", {"inputs": "x"}),
        ("/chat_tokenize", {"messages": [{"role": "user", "content": "x"}]}),
        ("/next_token", {"inputs": "x"}),
        ("/check", {"grammar": CHOICE, "text": "yes"}),
        ("/reason", {"grammar": CHOICE, "tokens": [1]}),
        ("/inspect", {"grammar": CHOICE}),
        ("/score", {"inputs": "x", "parameters": {"grammar": CHOICE}}),
        ("/evaluate", {"prompts": ["x"], "parameters": {"grammar": CHOICE}}),
        ("/invocations", {"inputs": "x"}),
    ],
)
def test_every_route_that_takes_a_model_reads_the_query(server_url: str, path: str, body: dict) -> None:
    """`?model=` picks the model on every TGI-style route (the README's promise): /chat_tokenize answered with the
    default model whatever it named."""
    response = httpx.post(f"{server_url}{path}?model=gpt-9", json=body, timeout=60)
    assert response.status_code == 404, (path, response.text)
    assert "no provider serves model 'gpt-9'" in response.json()["error"]


def test_stream_errors_before_the_first_token_are_plain_422(server_url: str) -> None:
    body = _params(grammar={"type": "regex", "value": "(ab"})
    response = httpx.post(f"{server_url}/generate_stream", json=body, timeout=60)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/json"
    best_of = httpx.post(f"{server_url}/generate_stream", json=_params(best_of=2, do_sample=True), timeout=60)
    assert "best_of > 1 is not supported when streaming" in best_of.json()["error"]


def test_inference_client_sees_the_message(server_url: str) -> None:
    client = InferenceClient(base_url=server_url, timeout=60)
    with pytest.raises(HubValidationError, match="best_of > 1 needs sampling"):
        client.text_generation("Hi", max_new_tokens=3, best_of=2)
    with pytest.raises(HubValidationError, match="invalid regex"):  # TGI's `validation`, not our `constraint`
        client.text_generation("Hi", max_new_tokens=3, grammar={"type": "regex", "value": "(ab"})


def test_openai_sdk_gets_400_and_str_names_the_problem(server_url: str) -> None:
    """OpenAI's error shape on /v1/*: the SDK raises BadRequestError and its str() carries our message."""
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=60, max_retries=0)
    bad_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="embedded", messages=[{"role": "user", "content": "x"}], response_format=bad_schema, max_tokens=3
        )
    assert caught.value.status_code == 400
    assert "not a valid JSON Schema" in str(caught.value)
    assert caught.value.code == "constraint" and caught.value.type == "invalid_request_error"
    assert caught.value.param == "response_format"  # where the constraint came in
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="embedded", prompt="x", max_tokens=3, extra_body={"guided_regex": "(ab"})
    assert caught.value.param == "guided_regex" and "invalid regex" in str(caught.value)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="embedded", messages=[{"role": "user", "content": "x"}], max_tokens=8190)
    assert caught.value.param == "max_tokens" and "prompt tokens + max_tokens must be <=" in str(caught.value)
    # OpenAI's code and vLLM's words for it, which clients read to fall back to a longer context
    assert caught.value.code == "context_length_exceeded"
    assert "This model's maximum context length is 8192 tokens. However, you requested" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:  # a budget by name, on a model that writes no reasoning
        client.chat.completions.create(
            model="embedded", messages=[{"role": "user", "content": "x"}], reasoning_effort="low"
        )
    assert caught.value.param == "reasoning_effort"
    assert "reasoning_effort: this model writes no reasoning" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="embedded", messages=[{"role": "user", "content": "x"}], logprobs=True, top_logprobs=30
        )
    assert "top_logprobs: Input should be less than or equal to 20" in str(caught.value)
    assert caught.value.param == "top_logprobs"
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    assert "no provider serves model 'gpt-9'" in str(caught.value)
    assert caught.value.code == "model_not_found"  # OpenAI's code, which clients test for (it was "model")


def test_openai_sdk_stream_error_names_the_problem(server_url: str) -> None:
    """An error before the first chunk is a 400 the SDK raises as BadRequestError, like any other."""
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=60, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="embedded",
            messages=[{"role": "user", "content": "x"}],
            stream=True,
            extra_body={"guided_regex": "(ab"},
        )
    assert "guided_regex" in str(caught.value) or "regex" in str(caught.value)


def test_api_key_guards_every_api_route(start_server: Any) -> None:
    url = start_server("--no-ui", "--api-key", KEY)
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    for method, path in [
        ("GET", "/info"),
        ("POST", "/generate"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/models"),
    ]:
        response = httpx.request(method, f"{url}{path}", json=_params(), timeout=30)
        assert response.status_code == 401, path
        assert error_of(path, response.json())[1] == "authentication"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).models.list()
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, timeout=120, max_retries=0)
    answer = client.chat.completions.create(
        model="embedded", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert answer.choices[0].message.content
    tgi = InferenceClient(base_url=url, api_key=KEY, timeout=120)
    assert tgi.text_generation("Hi", max_new_tokens=2)
    docs = httpx.get(f"{url}/", timeout=30, follow_redirects=True, headers={"Authorization": f"Bearer {KEY}"})
    assert docs.status_code == 200 and "swagger" in docs.text.lower()  # --no-ui: / leads to /docs, behind the key
    # the Code tab's snippets for a keyed server read the key from the environment (they were 401s)
    messages = [ChatMessage(role="user", content="Hi")]
    code = snippets.snippets(url, "embedded", messages, "Hi", GenerateParameters(max_new_tokens=2), keyed=True)
    assert all(KEY not in text for text in code.values())
    env = {snippets.KEY_VARIABLE: KEY}
    assert post_like_curl(code["curl_generate"], env)["generated_text"]
    assert post_like_curl(code["curl_chat"], env)["choices"][0]["message"]["content"]
    assert run_python(code["openai"], env).strip() and run_python(code["huggingface_hub"], env).strip()


def test_a_loopback_server_answers_only_to_its_loopback_names(server_url: str) -> None:
    """DNS rebinding: a page on attacker.example whose name now points at 127.0.0.1 sends that Host; refused."""
    port = server_url.rsplit(":", 1)[1]
    for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.nip.io"):
        response = httpx.get(f"{server_url}/info", headers={"Host": host}, timeout=30)
        assert response.status_code == 400, host
        assert response.json()["error_type"] == "forbidden_host" and "--allowed-hosts" in response.json()["error"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert httpx.get(f"{server_url}/info", headers={"Host": host}, timeout=30).status_code == 200, host
    # on /v1/* in OpenAI's shape: the SDK showed a bare "Error code: 400" for TGI's
    refused = httpx.post(f"{server_url}/v1/chat/completions", json={}, headers={"Host": "attacker.example"}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "forbidden_host"
    assert "--allowed-hosts" in refused.json()["error"]["message"]
