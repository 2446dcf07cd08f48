"""Our own server (app.py in a subprocess, embedded model) used as remote::tgi, remote::openai and remote::vllm."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from playground.errors import UnsupportedConstraintError
from playground.providers.openai_compat import OpenAICompatProvider, OpenAIConfig
from playground.providers.tgi import TGIConfig, TGIProvider
from playground.providers.vllm import VLLMConfig, VLLMProvider
from playground.types import ChatMessage, GenerateParameters, GenerationResult, TokenEvent

MODEL = "embedded"
SCHEMA = {
    "type": "object",
    "properties": {"age": {"type": "integer"}},
    "required": ["age"],
    "additionalProperties": False,
}
IPV4 = r"(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}"
ASK_JSON = [ChatMessage(role="user", content="Give me a JSON object with an age.")]


@pytest.fixture(scope="module")
def tgi(server_url: str) -> TGIProvider:
    return TGIProvider("our-tgi", TGIConfig(base_url=server_url, max_top_n_tokens=20))


@pytest.fixture(scope="module")
def openai(server_url: str) -> OpenAICompatProvider:
    return OpenAICompatProvider("our-openai", OpenAIConfig(base_url=server_url + "/v1", api_key_env=None))


@pytest.fixture(scope="module")
def vllm(server_url: str) -> VLLMProvider:
    return VLLMProvider("our-vllm", VLLMConfig(base_url=server_url + "/v1"))


def test_each_provider_discovers_the_served_models(tgi, openai, vllm) -> None:
    assert tgi.list_models() == ["SmolLM2-135M-Instruct (embedded GGUF)"]
    assert MODEL in openai.list_models() and MODEL in vllm.list_models()
    info = tgi.info(MODEL)
    assert info.max_total_tokens > info.max_input_tokens > 0 and info.provider_type == "remote::tgi"


def test_tgi_json_schema_with_details_and_top_tokens(tgi) -> None:
    params = GenerateParameters(
        grammar={"type": "json", "value": SCHEMA}, max_new_tokens=20, top_n_tokens=3, decoder_input_details=True
    )
    result = tgi.generate(MODEL, "Give me a JSON object with an age:", params)
    assert result.best.validation.valid is True and result.best.validation.enforced is True
    assert json.loads(result.best.generated_text)["age"] >= 0
    tokens = result.best.tokens
    # Under the schema, masked alternatives drop out: at most 3, at least the chosen one, 3 where free.
    assert all(t.id >= 0 and 1 <= len(t.top_tokens) <= 3 and t.top_tokens[0].id == t.id for t in tokens)
    assert any(len(t.top_tokens) == 3 for t in tokens)
    assert "".join(t.text for t in tokens if not t.special) == result.best.generated_text
    assert result.prefill and result.input_length == len(result.prefill)
    assert (result.provider_id, result.constraint_kind, result.constraint_engine) == (
        "our-tgi",
        "json_schema",
        "remote::tgi",
    )


def test_tgi_regex_and_choice(tgi) -> None:
    ip = tgi.generate(
        MODEL,
        "The server's IP address is ",
        GenerateParameters(grammar={"type": "regex", "value": IPV4}, max_new_tokens=20),
    )
    assert re.fullmatch(IPV4, ip.best.generated_text) and ip.best.validation.valid is True
    choices = ["red.", "green|blue", "(none)"]
    pick = tgi.generate(
        MODEL, "Pick a colour:", GenerateParameters(grammar={"type": "choice", "value": choices}, max_new_tokens=10)
    )
    assert pick.best.generated_text in choices and pick.best.validation.message == "one of the choices"


def test_tgi_best_of_lists_the_other_candidates(tgi) -> None:
    params = GenerateParameters(best_of=2, do_sample=True, seed=5, max_new_tokens=4, top_n_tokens=2)
    result = tgi.generate(MODEL, "Once upon a time, in a land far away,", params)
    assert len(result.best_of_sequences) == 1
    other = result.best_of_sequences[0]
    assert other.tokens and other.finish_reason in ("length", "eos_token")
    assert result.best.total_logprob >= other.total_logprob


def test_tgi_stream_and_chat_route(tgi) -> None:
    items = list(tgi.stream(MODEL, "Count: 1, 2,", GenerateParameters(max_new_tokens=5, top_n_tokens=2)))
    events, final = items[:-1], items[-1]
    assert len(events) == 5 and all(isinstance(e, TokenEvent) and len(e.token.top_tokens) == 2 for e in events)
    assert isinstance(final, GenerationResult) and final.best.finish_reason == "length"
    assert final.best.generated_text == "".join(e.token.text for e in events) and final.input_length > 0
    chat = tgi.generate(MODEL, [ChatMessage(role="user", content="Say hi.")], GenerateParameters(max_new_tokens=5))
    assert chat.best.generated_text and chat.best.generated_tokens <= 5


def test_tgi_next_token_and_tokenize(tgi) -> None:
    view = tgi.next_token(MODEL, "The capital of France is", GenerateParameters(), top_k=5)
    assert len(view.candidates) == 5 and view.candidates[0].text == " Paris"
    assert all(c.allowed and c.logprob == c.raw_logprob for c in view.candidates)
    assert "".join(t.text for t in tgi.tokenize(MODEL, "Hello world")) == "Hello world"


def test_openai_json_schema_logprobs_and_n(openai) -> None:
    params = GenerateParameters(grammar={"type": "json", "value": SCHEMA}, max_new_tokens=20, top_n_tokens=3)
    result = openai.generate(MODEL, ASK_JSON, params)
    assert result.best.validation.valid is True
    assert all(1 <= len(t.top_tokens) <= 3 and t.logprob is not None for t in result.best.tokens)
    assert any(len(t.top_tokens) == 3 for t in result.best.tokens)
    assert all(t.id < 0 and t.text in {a.text for a in t.top_tokens} for t in result.best.tokens)  # ids: text stand-ins
    assert result.best.total_logprob < 0 and result.input_length > 0
    sampled = openai.generate(MODEL, ASK_JSON, params.model_copy(update={"best_of": 2, "do_sample": True, "seed": 3}))
    assert len(sampled.best_of_sequences) == 1
    assert all(s.validation.valid for s in [sampled.best, *sampled.best_of_sequences])
    with pytest.raises(UnsupportedConstraintError, match="cannot enforce a regex constraint"):
        openai.generate(MODEL, ASK_JSON, GenerateParameters(grammar={"type": "regex", "value": "[0-9]+"}))


def test_openai_stream(openai) -> None:
    params = GenerateParameters(grammar={"type": "json", "value": SCHEMA}, max_new_tokens=20, top_n_tokens=2)
    items = list(openai.stream(MODEL, ASK_JSON, params))
    final = items[-1]
    assert isinstance(final, GenerationResult) and final.best.validation.valid is True
    assert "".join(e.token.text for e in items[:-1]) == final.best.generated_text
    # the count is the server's usage, which counts the end-of-text token that its stream's tokens leave out
    ended = final.best.finish_reason == "eos_token"
    assert final.input_length > 0 and final.best.generated_tokens == len(items) - 1 + ended


@pytest.mark.parametrize(
    ("grammar", "check"),
    [
        ({"type": "json", "value": SCHEMA}, lambda text: "age" in json.loads(text)),
        ({"type": "regex", "value": IPV4}, lambda text: re.fullmatch(IPV4, text)),
        ({"type": "choice", "value": ["yes", "no"]}, lambda text: text in ("yes", "no")),
        (
            {"type": "grammar", "value": 'start: "ab" | "cd" NUMBER\n%import common.NUMBER'},
            lambda text: text == "ab" or text.startswith("cd"),
        ),
    ],
    ids=["json", "regex", "choice", "grammar"],
)
def test_vllm_structured_outputs_every_kind(vllm, grammar: dict, check) -> None:
    result = vllm.generate(
        MODEL, [ChatMessage(role="user", content="Answer.")], GenerateParameters(grammar=grammar, max_new_tokens=20)
    )
    assert result.best.validation.valid is True, result.best
    assert check(result.best.generated_text)


def test_vllm_n_and_stream(vllm) -> None:
    params = GenerateParameters(grammar={"type": "choice", "value": ["yes", "no"]}, best_of=3, do_sample=True, seed=1)
    result = vllm.generate(MODEL, "Is the sky blue?", params)
    assert len(result.best_of_sequences) == 2
    assert {s.generated_text for s in [result.best, *result.best_of_sequences]} <= {"yes", "no"}
    items = list(
        vllm.stream(
            MODEL, "Digits:", GenerateParameters(grammar={"type": "regex", "value": "[0-9]{4}"}, max_new_tokens=8)
        )
    )
    assert re.fullmatch("[0-9]{4}", items[-1].best.generated_text) and items[-1].best.validation.valid is True


def test_a_stop_sequence_through_an_openai_style_server_is_a_stop_sequence(vllm, server_url: str) -> None:
    """The server left vLLM's stop_reason out, and an OpenAI-style answer leaves the stop string out of its text:
    a stop hit came back through a vLLM provider as eos_token."""
    count = [ChatMessage(role="user", content="Count: one, two, three, four.")]
    greedy = GenerateParameters(max_new_tokens=16)
    stop = vllm.generate(MODEL, count, greedy).best.generated_text.split()[1]  # a word the greedy answer writes
    body = {"messages": [m.model_dump() for m in count], "max_tokens": 16, "temperature": 0, "stop": [stop]}
    choice = httpx.post(f"{server_url}/v1/chat/completions", json=body, timeout=120).json()["choices"][0]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    through = vllm.generate(MODEL, count, greedy.model_copy(update={"stop": [stop]}))
    assert through.best.finish_reason == "stop_sequence"
