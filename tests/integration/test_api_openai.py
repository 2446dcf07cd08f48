"""The OpenAI-compatible routes on a live server, through the openai SDK and huggingface_hub's client."""

from __future__ import annotations

import json
from typing import Any

import httpx
import huggingface_hub
import jsonschema
import openai
import pytest
from huggingface_hub import InferenceClient

from tests.spec import sse_events

PET_SCHEMA = {
    "type": "object",
    "properties": {"kind": {"enum": ["cat", "dog"]}, "age": {"type": "integer", "minimum": 0, "maximum": 30}},
    "required": ["kind", "age"],
    "additionalProperties": False,
}
ASK_PET = [{"role": "user", "content": "Describe a pet as JSON."}]
PET_FORMAT = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET_SCHEMA, "strict": True}}


@pytest.fixture(autouse=True)
def hub_reaches_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite runs with HF_HUB_OFFLINE=1, which blocks every huggingface_hub request; ours go to 127.0.0.1."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(scope="module")
def client(server_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=300, max_retries=0)


def ask(client: openai.OpenAI, question: str, **fields: Any) -> Any:
    """One user question to the embedded model."""
    return client.chat.completions.create(model="embedded", messages=[{"role": "user", "content": question}], **fields)


def test_json_schema_answers_validate_for_each_of_n_choices(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="embedded", messages=ASK_PET, response_format=PET_FORMAT, n=2, seed=5, max_tokens=40
    )
    assert [c.index for c in completion.choices] == [0, 1]
    for choice in completion.choices:
        jsonschema.validate(json.loads(choice.message.content), PET_SCHEMA)
        assert choice.finish_reason == "stop"
        assert choice.model_extra["validation"]["valid"] is True
    assert [c.model_extra["seed"] for c in completion.choices] == [5, 6]  # choice i is seed + i
    assert completion.usage.completion_tokens > 0
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_logprobs_with_top_logprobs(client: openai.OpenAI) -> None:
    completion = ask(client, "Say hello.", temperature=0, max_tokens=5, logprobs=True, top_logprobs=3)
    content = completion.choices[0].logprobs.content
    assert 0 < len(content) <= 5
    assert "".join(entry.token for entry in content) == completion.choices[0].message.content
    for entry in content:
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token  # greedy picks the top token
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob >= entry.top_logprobs[2].logprob
        assert entry.bytes == list(entry.token.encode("utf-8"))
        assert entry.model_extra["raw_logprob"] == pytest.approx(entry.logprob, abs=1e-4)  # unconstrained


def test_a_token_that_is_part_of_a_character_has_its_own_bytes(client: openai.OpenAI) -> None:
    """OpenAI's spelling and bytes for a token that is part of a character: the bytes add up to the answer, and
    each token matches its own top entry (before, '' with no bytes, against U+FFFD's bytes in top_logprobs)."""
    completion = ask(
        client,
        "Say hello in Chinese.",
        temperature=0,
        max_tokens=8,
        logprobs=True,
        top_logprobs=2,
        extra_body={"guided_choice": ["你好", "世界"]},
    )
    content = completion.choices[0].logprobs.content
    assert b"".join(bytes(entry.bytes) for entry in content) == completion.choices[0].message.content.encode()
    assert any(entry.token.startswith("bytes:\\x") for entry in content)
    for entry in content:
        assert entry.top_logprobs[0].token == entry.token and entry.top_logprobs[0].bytes == entry.bytes


def test_streaming_with_usage_matches_the_plain_answer(client: openai.OpenAI) -> None:
    kwargs = dict(
        model="embedded", messages=[{"role": "user", "content": "Name three colors."}], temperature=0, max_tokens=8
    )
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    plain = client.chat.completions.create(**kwargs)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [plain.choices[0].finish_reason]
    assert chunks[-1].choices == [] and _counts(chunks[-1].usage) == _counts(plain.usage)
    assert all(c.usage is None for c in chunks[:-1])


def test_a_stream_of_n_choices_adds_up_per_index_with_one_usage(client: openai.OpenAI) -> None:
    kwargs = dict(model="embedded", messages=[{"role": "user", "content": "Say hi."}], temperature=0, max_tokens=6, n=3)
    plain = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    texts = {index: "" for index in range(3)}
    finishes = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            finishes.update({choice.index: choice.finish_reason} if choice.finish_reason else {})
    assert texts == {c.index: c.message.content for c in plain.choices}
    assert finishes == {c.index: c.finish_reason for c in plain.choices}
    assert chunks[-1].choices == [] and _counts(chunks[-1].usage) == _counts(plain.usage)


def _counts(usage) -> dict:
    """A usage's token counts; what the prefix cache held differs between a request and its repeat."""
    assert usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens
    return usage.model_dump(exclude={"prompt_tokens_details"})


def test_stop_sequence_is_trimmed_as_openai_does(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Count from 1 to 9 separated by commas."}]
    full = client.chat.completions.create(model="embedded", messages=messages, temperature=0, max_tokens=20)
    text = full.choices[0].message.content
    assert "4" in text, text
    stopped = client.chat.completions.create(
        model="embedded", messages=messages, temperature=0, max_tokens=20, stop=["4"]
    )
    assert stopped.choices[0].message.content == text[: text.index("4")]
    assert stopped.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(
        model="embedded", messages=messages, temperature=0, max_tokens=20, stop="4", stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == text[: text.index("4")]


def test_the_verdict_judges_the_text_a_stop_sequence_cut(client: openai.OpenAI, server_url: str) -> None:
    """OpenAI leaves the stop sequence and what follows it out: "yes" is not one of the choices "yes sir", "no sir",
    while TGI's text keeps it whole (and passes)."""
    choices = ["yes sir", "no sir"]
    extra = {"guided_choice": choices}
    cut = ask(client, "Is water wet?", max_tokens=5, temperature=0, stop=[" "], extra_body=extra).choices[0]
    assert cut.finish_reason == "stop" and cut.message.content in ("yes", "no")
    assert cut.model_extra["validation"]["valid"] is False
    body = {"inputs": "Is water wet?", "parameters": {"grammar": {"type": "choice", "value": choices}, "stop": [" "]}}
    whole = httpx.post(f"{server_url}/generate", json=body, timeout=120).json()
    assert whole["generated_text"] in choices and whole["validation"]["valid"] is True


@pytest.mark.parametrize(
    "extra_body",
    [{"structured_outputs": {"choice": ["yes", "no"]}}, {"guided_choice": ["yes", "no"]}, {"guided_regex": "(yes|no)"}],
    ids=["structured_outputs", "guided_choice", "guided_regex"],
)
def test_vllm_style_constraints(client: openai.OpenAI, extra_body: dict) -> None:
    completion = ask(client, "Is water wet?", max_tokens=5, seed=1, extra_body=extra_body)
    assert completion.choices[0].message.content in ("yes", "no")
    assert completion.choices[0].model_extra["validation"]["valid"] is True


def test_inference_client_chat_completion_with_response_format(server_url: str) -> None:
    hf = InferenceClient(base_url=server_url, timeout=300)
    output = hf.chat_completion(ASK_PET, response_format=PET_FORMAT, max_tokens=40, seed=3)
    jsonschema.validate(json.loads(output.choices[0].message.content), PET_SCHEMA)
    chunks = list(
        hf.chat_completion(
            ASK_PET, response_format={"type": "json_object", "value": PET_SCHEMA}, max_tokens=40, seed=3, stream=True
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(streamed), PET_SCHEMA)


def test_raw_chat_stream_ends_with_done(server_url: str) -> None:
    body = {"model": "embedded", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": True}
    with httpx.stream("POST", f"{server_url}/v1/chat/completions", json=body, timeout=300) as response:
        events = sse_events(response.iter_lines())
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])


def test_models_list_and_run_time_registration(client: openai.OpenAI, server_url: str) -> None:
    ids = [m.id for m in client.models.list()]
    assert "embedded" in ids and any(i.startswith("SmolLM2-135M-Instruct") for i in ids)
    registered = httpx.post(f"{server_url}/v1/models", json={"id": "embedded", "provider_id": "local"}, timeout=60)
    assert registered.status_code == 200
    assert registered.json()["owned_by"] == "local"
    assert registered.json()["id"] in ids


def test_models_retrieve_names_a_served_model_and_404s_another(client: openai.OpenAI) -> None:
    served = [m.id for m in client.models.list()]
    for model_id in served:
        card = client.models.retrieve(model_id)
        assert (card.id, card.owned_by) == (model_id, "local")
        # vLLM's field, which a remote::vllm or remote::openai provider reads (it fell back to 4096 for 8192)
        assert card.model_extra["max_model_len"] == 8192
    assert all(m.model_extra["max_model_len"] == 8192 for m in client.models.list())
    with pytest.raises(openai.NotFoundError, match="no provider serves model 'org/missing'"):
        client.models.retrieve("org/missing")
    listed = httpx.get(f"{client.base_url}models/", timeout=60).json()["data"]  # with the slash: the list
    assert [m["id"] for m in listed] == served
