"""Every way a remote can fail becomes one ProviderError naming the provider and the cause (424/502)."""

from __future__ import annotations

import time

import pytest

from playground.errors import ProviderError
from playground.providers.openai_compat import OpenAICompatProvider, OpenAIConfig
from playground.providers.tgi import TGIConfig, TGIProvider
from playground.providers.vllm import VLLMConfig, VLLMProvider
from playground.types import ChatMessage, GenerateParameters
from tests.stub_server import StubReply, chat_chunks, chat_completion, completion, serve, tgi_generation  # noqa: F401 (fixture)
from tests.support import free_port

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
JSON = GenerateParameters(grammar={"type": "json", "value": SCHEMA}, max_new_tokens=8)

ASKED = [ChatMessage(role="user", content="p")]  # a chat (a plain prompt goes to vLLM's completions)


def vllm(url: str, **config) -> VLLMProvider:
    return VLLMProvider("remote-a", VLLMConfig(base_url=url + "/v1", **config))


def tgi(url: str) -> TGIProvider:
    return TGIProvider("remote-t", TGIConfig(base_url=url))


def failure(call) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        call()
    return caught.value


def test_connection_refused_is_502_naming_provider_and_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    error = failure(lambda: vllm(url).generate("m", ASKED, GenerateParameters()))
    assert error.status == 502
    assert error.error_type == "provider"
    assert error.message.startswith(f"provider 'remote-a' failed: cannot connect to {url}/v1/chat/completions:")
    assert "refused" in error.message.lower()
    streaming = failure(lambda: list(tgi(url).stream("m", "p", GenerateParameters())))
    assert streaming.status == 502 and f"cannot connect to {url}/generate_stream" in streaming.message


def test_timeout_is_502_saying_so(serve) -> None:
    def slow(_body: object) -> StubReply:
        time.sleep(1.5)
        return StubReply(json=chat_completion("late"))

    stub = serve({"POST /v1/chat/completions": slow})
    error = failure(lambda: vllm(stub.url, timeout_s=0.3).generate("m", ASKED, GenerateParameters()))
    assert error.status == 502
    assert (
        error.message
        == f"provider 'remote-a' failed: no answer from {stub.url}/v1/chat/completions within 0.3 s (timeout)"
    )


@pytest.mark.parametrize(
    ("status", "body", "shown"),
    [
        (
            400,
            {"error": {"message": "maximum context length is 2048", "type": "BadRequestError"}},
            "maximum context length is 2048",
        ),
        (
            422,
            {"error": "Input validation error: `top_n_tokens` must be <= 5", "error_type": "validation"},
            "Input validation error: `top_n_tokens` must be <= 5",
        ),
        (
            404,
            {"object": "error", "message": "The model `x` does not exist.", "code": 404},
            "The model `x` does not exist.",
        ),
        (500, {"detail": "CUDA out of memory"}, "CUDA out of memory"),
    ],
)
def test_remote_error_answers_are_424_with_the_remote_message(serve, status: int, body: dict, shown: str) -> None:
    stub = serve({"POST /v1/chat/completions": StubReply(status, body), "POST /generate": StubReply(status, body)})
    for call in (
        lambda: vllm(stub.url).generate("m", ASKED, GenerateParameters()),
        lambda: tgi(stub.url).generate("m", "p", GenerateParameters()),
    ):
        error = failure(call)
        assert error.status == 424
        assert f"answered HTTP {status}: {shown}" in error.message
        # on /v1/*: the remote's failure is no fault of the request (an upstream 500 read "invalid_request_error")
        assert error.openai_type == ("server_error" if status >= 500 else "invalid_request_error")


@pytest.mark.parametrize(
    "reply",
    [
        StubReply(text="<html><body>502 Bad Gateway</body></html>", content_type="text/html"),
        StubReply(json={"choices": [{"index": 0}]}),
        StubReply(json={"choices": []}),
        StubReply(json=["not", "an", "object"]),
        StubReply(json={"choices": [{"index": 0, "message": {"content": 42}, "finish_reason": "stop"}]}),
    ],
)
def test_garbage_is_502_not_a_traceback(serve, reply: StubReply) -> None:
    stub = serve({"POST /v1/chat/completions": reply})
    error = failure(lambda: vllm(stub.url).generate("m", ASKED, GenerateParameters()))
    assert error.status == 502
    assert error.message.startswith("provider 'remote-a' failed: ")
    assert "not JSON" in error.message or "malformed chat completion" in error.message


def test_tgi_garbage_and_missing_details(serve) -> None:
    stub = serve({"POST /generate": StubReply(json={"generated_text": "x"}), "GET /info": StubReply(text="nope")})
    missing = failure(lambda: tgi(stub.url).generate("m", "p", GenerateParameters())).message
    assert (
        "malformed /generate answer (no 'details' field where the protocol has one)" in missing
    )  # (KeyError('details'))
    error = failure(lambda: tgi(stub.url).list_models())
    assert error.status == 502 and f"{stub.url}/info answered 200 with a body that is not JSON: 'nope'" in error.message


def test_stream_errors(serve) -> None:
    stub = serve(
        {
            "POST /v1/chat/completions": StubReply(events=[{"error": {"message": "overloaded"}}]),
            "POST /generate_stream": StubReply(
                events=[{"index": 0, "token": {"id": 1, "text": "a", "logprob": -1.0, "special": False}}]
            ),
        }
    )
    mid = failure(lambda: list(vllm(stub.url).stream("m", ASKED, GenerateParameters())))
    assert mid.status == 424 and "reported an error mid-stream: overloaded" in mid.message
    stub.routes["POST /v1/chat/completions"] = StubReply(
        events=[{"object": "error", "message": "bad seed", "code": 400}]
    )
    old_vllm = failure(lambda: list(vllm(stub.url).stream("m", ASKED, GenerateParameters())))
    assert old_vllm.status == 424 and "reported an error mid-stream: bad seed" in old_vllm.message
    cut = failure(lambda: list(tgi(stub.url).stream("m", "p", GenerateParameters())))
    assert cut.status == 502 and "the stream ended without its final details" in cut.message


def test_stream_of_non_json_events_and_unfinished_choices(serve) -> None:
    chunks = chat_chunks(["a", "b"])
    chunks[2]["choices"][0]["finish_reason"] = None
    stub = serve({"POST /v1/chat/completions": StubReply(events=chunks)})
    error = failure(lambda: list(vllm(stub.url).stream("m", ASKED, GenerateParameters())))
    assert error.status == 502 and "the stream ended before choice 0 finished" in error.message
    stub.routes["POST /v1/chat/completions"] = StubReply(events=["<html>"])
    error = failure(lambda: list(vllm(stub.url).stream("m", ASKED, GenerateParameters())))
    assert "streamed an event that is not JSON: '<html>'" in error.message
    # a page where the stream should be (a proxy's): it read "a malformed stream (ValueError('the stream ended...'))"
    page = StubReply(text="<html>oops</html>", content_type="text/html")
    stub.routes["POST /v1/chat/completions"] = stub.routes["POST /generate_stream"] = page
    for provider, inputs in ((vllm(stub.url), ASKED), (tgi(stub.url), "p")):
        error = failure(lambda: list(provider.stream("m", inputs, GenerateParameters())))  # noqa: B023
        assert error.status == 502 and "answered 200 with text/html, not an event stream: '<html>oops</html>'" in (
            error.message
        ), error.message


def test_a_provider_that_ignores_the_constraint_is_caught_by_the_verdict(serve) -> None:
    stub = serve(
        {
            "POST /v1/chat/completions": StubReply(json=chat_completion("Sure! Here is a number: 7")),
            "POST /v1/completions": StubReply(json=completion("Sure! 7")),
            "POST /generate": StubReply(json=tgi_generation("seven")),
        }
    )
    for provider in (
        vllm(stub.url),
        tgi(stub.url),
        OpenAICompatProvider("plain", OpenAIConfig(base_url=stub.url + "/v1", api_key_env=None)),
    ):
        result = provider.generate("m", "give me json", JSON)
        verdict = result.best.validation
        assert (verdict.valid, verdict.enforced) == (False, False), provider
        assert verdict.message.startswith("not enforced by the provider: not JSON")
        assert result.constraint_kind == "json_schema"
    regex = GenerateParameters(grammar={"type": "regex", "value": "[0-9]+"})
    verdict = vllm(stub.url).generate("m", ASKED, regex).best.validation
    assert verdict.message.startswith("not enforced by the provider: does not fully match /[0-9]+/")


def test_a_truncated_answer_says_it_may_have_been_cut_short(serve) -> None:
    stub = serve({"POST /v1/chat/completions": StubReply(json=chat_completion('{"n": ', finish_reason="length"))})
    verdict = vllm(stub.url).generate("m", ASKED, JSON).best.validation
    assert verdict.enforced is False
    assert verdict.message.startswith("not enforced by the provider, or cut short by max_new_tokens: not JSON")


def test_a_valid_remote_answer_is_valid_and_enforced(serve) -> None:
    stub = serve({"POST /v1/chat/completions": StubReply(json=chat_completion('{"n": 3}'))})
    verdict = vllm(stub.url).generate("m", ASKED, JSON).best.validation
    assert (verdict.valid, verdict.enforced, verdict.message) == (True, True, "valid against the schema")


def test_a_malformed_field_is_named_in_the_502(serve) -> None:
    details = {"finish_reason": "bogus", "generated_tokens": 1, "tokens": []}
    stub = serve({"POST /generate": StubReply(json={"generated_text": "x", "details": details})})
    error = failure(lambda: tgi(stub.url).generate("m", "p", GenerateParameters()))
    assert error.status == 502
    assert "malformed /generate answer (finish_reason: Input should be 'length'" in error.message


def test_a_remote_s_own_failure_is_a_server_error_on_the_openai_routes(serve) -> None:
    """An upstream 500 came back as 424 with type invalid_request_error, which clients read as "fix your request"."""
    from fastapi.testclient import TestClient

    from playground.providers.registry import Registry
    from playground.server import create_app

    models = StubReply(json={"object": "list", "data": [{"id": "m", "object": "model"}]})
    for status, kind in ((500, "server_error"), (400, "invalid_request_error")):
        reply = StubReply(status, {"object": "error", "message": "no", "code": status})
        stub = serve({"GET /v1/models": models, "POST /v1/chat/completions": reply})
        client = TestClient(create_app(Registry([vllm(stub.url)]), ui=False))
        answer = client.post(
            "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
        )
        assert (answer.status_code, answer.json()["error"]["type"]) == (424, kind)
