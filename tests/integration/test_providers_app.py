"""app.py --providers FILE: remote models beside the local one; broken providers fail alone, over HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.stub_server import StubReply, StubServer, chat_completion, models_list
from tests.support import free_port

SCHEMA = {
    "type": "object",
    "properties": {"age": {"type": "integer"}},
    "required": ["age"],
    "additionalProperties": False,
}
JSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}


@pytest.fixture(scope="module")
def stubs():
    """One stub that ignores every constraint (answers 200 with prose), one that answers garbage."""
    ignoring = StubServer(
        {
            "GET /v1/models": StubReply(json=models_list("stubborn")),
            "POST /v1/chat/completions": StubReply(json=chat_completion("I'd rather not write JSON today.")),
        }
    )
    garbage = StubServer(
        {
            "GET /info": StubReply(text="<html>maintenance</html>", content_type="text/html"),
            "POST /v1/chat/completions": StubReply(text="<html>maintenance</html>", content_type="text/html"),
        }
    )
    yield ignoring, garbage
    ignoring.stop()
    garbage.stop()


@pytest.fixture(scope="module")
def app_url(server_url: str, stubs, tmp_path_factory: pytest.TempPathFactory, start_module_server) -> str:
    """A second app whose providers are: itself, the first app (as vLLM), a closed port and the stubs."""
    ignoring, garbage = stubs
    path: Path = tmp_path_factory.mktemp("providers") / "providers.yaml"
    path.write_text(f"""
providers:
  - {{provider_id: local, provider_type: local::transformers, config: {{model: embedded}}}}
  - {{provider_id: upstream, provider_type: remote::vllm, config: {{base_url: "{server_url}/v1", model_prefix: "up/"}}}}
  - {{provider_id: dead, provider_type: remote::tgi, config: {{base_url: "http://127.0.0.1:{free_port()}", timeout_s: 5}}}}
  - {{provider_id: ignoring, provider_type: remote::openai, config: {{base_url: "{ignoring.url}/v1", api_key_env: null}}}}
  - {{provider_id: garbage, provider_type: remote::tgi, config: {{base_url: "{garbage.url}"}}}}
models:
  - {{model_id: ghost, provider_id: dead}}
  - {{model_id: junk, provider_id: garbage}}
""")
    return start_module_server("--providers", str(path), "--no-ui", "--allow-model-loading")


def chat(url: str, model: str, **extra) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Give me a JSON object with an age."}],
        "max_tokens": 20,
        "temperature": 0,
        **extra,
    }
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def test_models_of_every_provider_are_listed(app_url: str) -> None:
    assert httpx.get(f"{app_url}/health", timeout=10).status_code == 200
    listed = {(m["owned_by"], m["id"]) for m in httpx.get(f"{app_url}/v1/models", timeout=10).json()["data"]}
    assert {("upstream", "up/embedded"), ("dead", "ghost"), ("ignoring", "stubborn"), ("garbage", "junk")} <= listed
    assert any(owner == "local" for owner, _ in listed)


def test_a_remote_model_through_the_api_with_logprobs(app_url: str) -> None:
    response = chat(app_url, "up/embedded", response_format=JSON_FORMAT, logprobs=True, top_logprobs=2)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["validation"]["valid"] is True and choice["validation"]["enforced"] is True
    assert choice["logprobs"]["content"] and all(entry["top_logprobs"] for entry in choice["logprobs"]["content"])


def test_an_unreachable_provider_is_502_and_the_app_keeps_serving(app_url: str) -> None:
    response = chat(app_url, "ghost")
    assert response.status_code == 502
    body = response.json()["error"]
    assert body["code"] == "provider" and body["type"] == "server_error"
    assert body["message"].startswith("provider 'dead' failed: cannot connect to http://127.0.0.1:")
    local = chat(app_url, "embedded", response_format=JSON_FORMAT)
    assert local.status_code == 200 and local.json()["choices"][0]["validation"]["valid"] is True


def test_a_provider_answering_garbage_is_502(app_url: str) -> None:
    response = chat(app_url, "junk")
    assert response.status_code == 502
    assert response.json()["error"]["message"].startswith("provider 'garbage' failed: ")
    assert "not JSON: '<html>maintenance</html>'" in response.json()["error"]["message"]


def test_a_provider_that_ignores_the_constraint_is_flagged_not_enforced(app_url: str, stubs) -> None:
    response = chat(app_url, "stubborn", response_format=JSON_FORMAT)
    assert response.status_code == 200
    choice = response.json()["choices"][0]
    assert choice["message"]["content"] == "I'd rather not write JSON today."
    assert choice["validation"]["valid"] is False and choice["validation"]["enforced"] is False
    assert choice["validation"]["message"].startswith("not enforced by the provider: not JSON")
    sent = stubs[0].last("/v1/chat/completions").body
    assert sent["response_format"]["json_schema"]["schema"] == SCHEMA


def test_register_a_model_at_run_time_over_http(app_url: str) -> None:
    refused = httpx.post(f"{app_url}/v1/models", json={"id": "gpt-9", "provider_id": "upstream"}, timeout=30)
    assert refused.status_code == 404
    assert refused.json()["error"]["message"].startswith(
        "provider 'upstream' does not serve model 'gpt-9' (it serves: "
    )
    down = httpx.post(f"{app_url}/v1/models", json={"id": "later", "provider_id": "dead"}, timeout=30)
    assert down.status_code == 502 and down.json()["error"]["message"].startswith(
        "provider 'dead' failed: cannot connect"
    )
    added = httpx.post(f"{app_url}/v1/models", json={"id": "embedded", "provider_id": "upstream"}, timeout=30)
    assert added.status_code == 200 and added.json()["id"] == "up/embedded"


def test_what_a_remote_cannot_do_is_refused_under_the_names_sent(app_url: str) -> None:
    """Through a remote vLLM (the first app), what it cannot do is refused under the names the client sent: compact
    JSON whitespace (it was dropped: the answer came back laid out its way), echo with logprobs (a 400 named
    decoder_input_details, a field nobody sent), continue_final_message; tools with tool_choice auto on OpenAI."""
    compact = {"response_format": JSON_FORMAT, "structured_outputs": {"disable_any_whitespace": True}}
    error = chat(app_url, "up/embedded", **compact).json()["error"]
    assert error["param"] == "response_format" and "its JSON whitespace is the server's own" in error["message"]
    ask = {"prompt": "Count: 1, 2,", "max_tokens": 4, "temperature": 0, "echo": True, "logprobs": 1}
    for stream in (False, True):
        body = {**ask, "model": "up/embedded", "stream": stream}
        error = httpx.post(f"{app_url}/v1/completions", json=body, timeout=60).json()["error"]
        assert error["param"] == "echo" and "which provider 'upstream' does not give" in error["message"]
    continued = [{"role": "user", "content": "A pet"}, {"role": "assistant", "content": "{"}]
    refused = chat(app_url, "up/embedded", messages=continued, continue_final_message=True).json()["error"]
    assert refused["param"] == "continue_final_message" and refused["message"].startswith("continue_final_message")
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    auto = chat(app_url, "stubborn", tools=[tool]).json()["error"]
    assert auto["param"] == "tool_choice" and "cannot enforce a grammar constraint" in auto["message"]
    cut = {"model": "stubborn", "prompt": "hi", "max_tokens": 2, "truncate_prompt_tokens": 2}
    error = httpx.post(f"{app_url}/v1/completions", json=cut, timeout=60).json()["error"]
    assert error["param"] == "truncate_prompt_tokens" and error["message"].startswith("truncate_prompt_tokens is not")
