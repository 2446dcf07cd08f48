"""Remote answers land in our result types: logprobs, alternatives, best_of/n, finish reasons, streams."""

from __future__ import annotations

import pytest

from playground.providers.mapping import answer_result, text_id
from playground.providers.openai_compat import OpenAICompatProvider, OpenAIConfig
from playground.providers.tgi import TGIConfig, TGIProvider
from playground.providers.vllm import VLLMConfig, VLLMProvider
from playground.types import ChatMessage, GenerateParameters, GenerationResult, TokenEvent
from tests.stub_server import StubReply, chat_chunks, chat_completion, serve, tgi_generation  # noqa: F401 (fixture)

ASKED = [ChatMessage(role="user", content="p")]  # a chat (a plain prompt goes to vLLM's completions)


def vllm(url: str) -> VLLMProvider:
    return VLLMProvider("v", VLLMConfig(base_url=url + "/v1"))


def tgi(url: str) -> TGIProvider:
    return TGIProvider("t", TGIConfig(base_url=url))


def _logprob_entry(token: str, logprob: float, alternatives: list[tuple[str, float]]) -> dict:
    return {"token": token, "logprob": logprob, "top_logprobs": [{"token": t, "logprob": lp} for t, lp in alternatives]}


def test_openai_logprobs_and_top_alternatives_become_tokens(serve) -> None:
    answer = chat_completion("Hi!")
    answer["choices"][0]["logprobs"] = {
        "content": [
            _logprob_entry("Hi", -0.1, [("Hi", -0.1), ("Hello", -2.5)]),
            _logprob_entry("!", -0.3, [("!", -0.3), (".", -1.4)]),
        ]
    }
    stub = serve({"POST /v1/chat/completions": StubReply(json=answer)})
    result = vllm(stub.url).generate("m", ASKED, GenerateParameters(top_n_tokens=2))
    tokens = result.best.tokens
    assert [(t.text, t.logprob) for t in tokens] == [("Hi", -0.1), ("!", -0.3)]
    assert [[(a.text, a.logprob) for a in t.top_tokens] for t in tokens] == [
        [("Hi", -0.1), ("Hello", -2.5)],
        [("!", -0.3), (".", -1.4)],
    ]
    assert tokens[0].id == tokens[0].top_tokens[0].id == text_id("Hi") < 0
    assert result.best.total_logprob == -0.4
    # the server's usage counts 3: vLLM counts the end-of-text token, which its logprobs leave out
    assert (result.input_length, result.best.generated_tokens, result.provider_id) == (7, 3, "v")
    assert result.best.finish_reason == "eos_token"


def test_n_choices_best_by_total_logprob_others_listed(serve) -> None:
    answer = chat_completion("x", n=3)
    for choice, (text, lp) in zip(answer["choices"], [("low", -5.0), ("high", -0.5), ("mid", -2.0)]):
        choice["message"]["content"] = text
        choice["logprobs"] = {"content": [_logprob_entry(text, lp, [])]}
    stub = serve({"POST /v1/chat/completions": StubReply(json=answer)})
    result = vllm(stub.url).generate("m", ASKED, GenerateParameters(best_of=3, do_sample=True, seed=11))
    assert result.best.generated_text == "high"
    assert [s.generated_text for s in result.best_of_sequences] == ["low", "mid"]
    assert all(s.seed == 11 for s in [result.best, *result.best_of_sequences])


def test_openai_finish_reasons(serve) -> None:
    cases = {
        "length": ({"finish_reason": "length"}, "length", None),
        "vllm stop string": ({"finish_reason": "stop", "stop_reason": "END"}, "stop_sequence", "END"),
        "vllm eos": ({"finish_reason": "stop", "stop_reason": None}, "eos_token", None),
        "vllm stop token": ({"finish_reason": "stop", "stop_reason": 42}, "eos_token", None),
    }
    for name, (fields, reason, stop) in cases.items():
        answer = chat_completion("abc")
        answer["choices"][0].update(fields)
        stub = serve({"POST /v1/chat/completions": StubReply(json=answer)})
        best = vllm(stub.url).generate("m", ASKED, GenerateParameters(stop=["END"], stop_token_ids=[42])).best
        assert (best.finish_reason, best.stop_sequence) == (reason, stop), name
        assert best.stop_token == (42 if name == "vllm stop token" else None), name
        # vLLM's text leaves the stop string out (its tokens keep it); the result keeps it, as TGI's /generate does
        assert best.generated_text == ("abcEND" if stop else "abc"), name


def test_a_remote_answer_cut_by_a_stop_sequence_is_not_said_to_be_unenforced(serve) -> None:
    """The verdict said "not enforced by the provider" outright for a regex answer a stop string had cut short."""
    answer = chat_completion(" Pari")
    answer["choices"][0].update(finish_reason="stop", stop_reason="s")
    stub = serve({"POST /v1/chat/completions": StubReply(json=answer)})
    params = GenerateParameters(stop=["s"], grammar={"type": "regex", "value": " [A-Z][a-z]+[.]"})
    best = vllm(stub.url).generate("m", ASKED, params).best
    assert best.validation.message.startswith("not enforced by the provider, or cut short by a stop sequence:")
    # the chat routes show the text without the stop string: their verdict is on that text
    answer["choices"][0].update(message={"role": "assistant", "content": "ye"}, stop_reason="s")
    choice = GenerateParameters(stop=["s"], grammar={"type": "choice", "value": ["yes", "ye"]})
    best = vllm(serve({"POST /v1/chat/completions": StubReply(json=answer)}).url).generate("m", ASKED, choice).best
    assert best.generated_text == "yes" and best.trimmed_validation.valid is True
    answer["choices"][0].update(stop_reason="not-a-stop")  # a stop_reason the request did not give: nothing added
    best = vllm(serve({"POST /v1/chat/completions": StubReply(json=answer)}).url).generate("m", ASKED, choice).best
    assert best.generated_text == "ye"


def test_tgi_details_best_of_and_prefill(serve) -> None:
    answer = tgi_generation("ab", finish_reason="stop_sequence")
    answer["generated_text"] = "ab."
    details = answer["details"]
    details["seed"] = 42
    details["prefill"] = [{"id": 1, "text": "Q", "logprob": None}, {"id": 2, "text": ":", "logprob": -3.0}]
    details["top_tokens"] = [
        [
            {"id": 100, "text": "a", "logprob": -0.25, "special": False},
            {"id": 7, "text": "z", "logprob": -2.0, "special": False},
        ],
        [],
    ]
    details["best_of_sequences"] = [
        {
            "generated_text": "zz",
            "finish_reason": "length",
            "generated_tokens": 1,
            "seed": 43,
            "prefill": [],
            "tokens": [{"id": 7, "text": "zz", "logprob": -4.0, "special": False}],
        }
    ]
    stub = serve({"POST /generate": StubReply(json=answer)})
    result = tgi(stub.url).generate(
        "m", "Q:", GenerateParameters(best_of=2, do_sample=True, stop=["."], top_n_tokens=2, decoder_input_details=True)
    )
    best = result.best
    assert (best.generated_text, best.finish_reason, best.stop_sequence, best.seed) == ("ab.", "stop_sequence", ".", 42)
    assert [(t.id, t.text) for t in best.tokens] == [(100, "a"), (101, "b")]
    assert [(a.id, a.logprob) for a in best.tokens[0].top_tokens] == [(100, -0.25), (7, -2.0)]
    assert [(s.generated_text, s.seed, s.finish_reason) for s in result.best_of_sequences] == [("zz", 43, "length")]
    assert [(p.text, p.logprob) for p in result.prefill] == [("Q", None), (":", -3.0)]
    assert result.input_length == 2


def test_tgi_keeps_a_playground_remotes_raw_fields(serve) -> None:
    answer = tgi_generation("a")
    answer["details"]["tokens"][0].update(
        raw_logprob=-1.5, mass_kept=0.4, raw_top_tokens=[{"id": 9, "text": "b", "logprob": -0.3}]
    )
    stub = serve({"POST /generate": StubReply(json=answer)})
    token = tgi(stub.url).generate("m", "p", GenerateParameters()).best.tokens[0]
    assert (token.raw_logprob, token.mass_kept, token.raw_top_tokens[0].id) == (-1.5, 0.4, 9)


def test_an_openai_style_playground_remote_keeps_its_raw_fields(serve) -> None:
    """vLLM- and OpenAI-typed providers dropped what a remote playground adds to each token (TGI's kept it)."""
    answer = chat_completion("a")
    entry = _logprob_entry("a", -0.2, [("a", -0.2)]) | {"raw_logprob": -1.5, "mass_kept": 0.4, "forced": True}
    answer["choices"][0]["logprobs"] = {"content": [entry]}
    stub = serve({"POST /v1/chat/completions": StubReply(json=answer)})
    token = vllm(stub.url).generate("m", ASKED, GenerateParameters(top_n_tokens=1)).best.tokens[0]
    assert (token.raw_logprob, token.mass_kept, token.forced) == (-1.5, 0.4, True)


def test_openai_stream_becomes_token_events_then_the_result(serve) -> None:
    stub = serve({"POST /v1/chat/completions": StubReply(events=chat_chunks(["{", '"n"', ": 1}"]))})
    params = GenerateParameters(grammar={"type": "json", "value": {"type": "object"}})
    items = list(vllm(stub.url).stream("m", ASKED, params))
    assert stub.last("/v1/chat/completions").body["stream_options"] == {"include_usage": True}
    events, final = items[:-1], items[-1]
    assert all(isinstance(e, TokenEvent) and e.index == 0 for e in events)
    assert [e.token.text for e in events] == ["{", '"n"', ": 1}"]
    assert isinstance(final, GenerationResult)
    assert (final.best.generated_text, final.input_length, final.best.generated_tokens) == ('{"n": 1}', 5, 3)
    assert final.best.validation.valid is True
    assert final.timings.time_to_first_token_s > 0


def test_tgi_stream_becomes_token_events_then_the_result(serve) -> None:
    def event(i: int, text: str, last: bool) -> dict:
        return {
            "index": i,
            "token": {"id": i, "text": text, "logprob": -0.5, "special": False},
            "top_tokens": [{"id": i, "text": text, "logprob": -0.5, "special": False}],
            "generated_text": "12" if last else None,
            "details": {"finish_reason": "length", "generated_tokens": 2, "seed": None, "input_length": 4}
            if last
            else None,
        }

    stub = serve({"POST /generate_stream": StubReply(events=[event(1, "1", False), event(2, "2", True)])})
    params = GenerateParameters(grammar={"type": "regex", "value": "[0-9]+"}, top_n_tokens=1)
    items = list(tgi(stub.url).stream("m", "p", params))
    assert stub.last("/generate_stream").body["parameters"]["grammar"] == {"type": "regex", "value": "[0-9]+"}
    assert [(e.index, e.token.text, e.token.top_tokens[0].id) for e in items[:-1]] == [(0, "1", 1), (0, "2", 2)]
    final = items[-1]
    assert (final.best.generated_text, final.best.finish_reason, final.input_length) == ("12", "length", 4)
    assert final.best.validation.valid is True and final.constraint_engine == "remote::tgi"


def test_openai_next_token_view(serve) -> None:
    entry = _logprob_entry(" yes", -0.1, [(" no", -2.4), (" yes", -0.1)])
    answer = chat_completion(" yes")
    answer["choices"][0]["logprobs"] = {"content": [entry]}
    stub = serve({"POST /v1/chat/completions": StubReply(json=answer)})
    provider = OpenAICompatProvider("o", OpenAIConfig(base_url=stub.url + "/v1", api_key_env=None))
    view = provider.next_token("m", "yes or no?", GenerateParameters(), top_k=2)
    assert [(c.text, c.raw_logprob, c.logprob, c.allowed) for c in view.candidates] == [
        (" yes", -0.1, -0.1, True),
        (" no", -2.4, -2.4, True),
    ]
    assert stub.last("/v1/chat/completions").body["top_logprobs"] == 2


def test_model_info_from_vllm_and_tgi(serve) -> None:
    stub = serve(
        {
            "GET /v1/models": StubReply(json={"data": [{"id": "q", "max_model_len": 32768}]}),
            "GET /info": StubReply(
                json={
                    "model_id": "t",
                    "max_input_tokens": 1000,
                    "max_total_tokens": 2048,
                    "max_best_of": 2,
                    "max_stop_sequences": 4,
                    "model_sha": "abc",
                }
            ),
        }
    )
    info = vllm(stub.url).info("q")
    assert (info.max_total_tokens, info.max_input_tokens, info.provider_type) == (32768, 32767, "remote::vllm")
    info = tgi(stub.url).info("t")
    assert (info.max_total_tokens, info.max_input_tokens, info.max_best_of, info.model_sha, info.max_top_n_tokens) == (
        2048,
        1000,
        2,
        "abc",
        5,
    )


def test_an_answer_s_json_from_tgi_or_openai_reads_as_a_result() -> None:
    """What the TokenView shows when handed the JSON those servers answer (no verdict: nothing was checked)."""
    tgi_body = tgi_generation("ok!", finish_reason="stop_sequence")
    tgi_body["details"]["top_tokens"] = [[{"id": 7, "text": "o", "logprob": -0.25, "special": False}]] * 3
    shown = answer_result([tgi_body])
    assert [(t.id, t.text, t.logprob) for t in shown.best.tokens] == [
        (100, "o", -0.25),
        (101, "k", -0.25),
        (102, "!", -0.25),
    ]
    assert [len(t.top_tokens) for t in shown.best.tokens] == [1, 1, 1] and shown.best.finish_reason == "stop_sequence"
    assert shown.best.validation.valid is None and shown.constraint_kind == "none"
    chat = chat_completion("Hi!", logprobs=[("Hi", -0.1), ("!", -0.3)], n=2, finish_reason="length")
    shown = answer_result(chat)
    assert shown.model_id == "stub-model" and shown.generated_text == "Hi!" and len(shown.best_of_sequences) == 1
    assert [(t.text, t.logprob) for t in shown.best.tokens] == [("Hi", -0.1), ("!", -0.3)]
    assert shown.best.finish_reason == "length"
    completion = {
        "model": "m",
        "choices": [
            {
                "index": 0,
                "text": " blue",
                "finish_reason": "stop",
                "logprobs": {
                    "tokens": [" bl", "ue"],
                    "token_logprobs": [-0.5, None],
                    "top_logprobs": [{" bl": -0.5, " gr": -1.0}, None],
                },
            }
        ],
    }
    shown = answer_result(completion)
    assert [(t.text, t.logprob) for t in shown.best.tokens] == [(" bl", -0.5), ("ue", None)]
    assert [[a.text for a in t.top_tokens] for t in shown.best.tokens] == [[" bl", " gr"], []]
    with pytest.raises(ValueError, match="not an answer this view reads.*its keys: error"):
        answer_result({"error": "nope"})
