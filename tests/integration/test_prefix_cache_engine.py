"""The prefix cache on the embedded model: chat turns, retries and the next-token view reuse the KV cache
and give the same greedy text and logprobs as without it."""

from __future__ import annotations

import pytest

from playground.decoding.prefix_cache import PrefixCache
from playground.types import ChatMessage, GenerateParameters

# A prompt prefilled in two pieces (cached prefix, then the rest) rounds differently from one prefilled
# at once: float32 matmuls of other shapes differ by ~1e-5 here. 1e-3 is far below what changes a choice.
TOLERANCE = 1e-3
PARAMS = GenerateParameters(max_new_tokens=12, top_n_tokens=3)
SYSTEM = ChatMessage(role="system", content="You are a terse assistant who answers in one short sentence. " * 8)


def turns(answer: str) -> list[ChatMessage]:
    return [
        SYSTEM,
        ChatMessage(role="user", content="Name a colour."),
        ChatMessage(role="assistant", content=answer),
        ChatMessage(role="user", content="Now name a fruit."),
    ]


def same(a, b) -> None:
    assert a.generated_text == b.generated_text
    for x, y in zip(a.best.tokens, b.best.tokens, strict=True):
        assert x.logprob == pytest.approx(y.logprob, abs=TOLERANCE)
        assert x.raw_logprob == pytest.approx(y.raw_logprob, abs=TOLERANCE)


def test_turns_retries_and_the_view_match_the_uncached_engine(engine, monkeypatch):
    first = [SYSTEM, ChatMessage(role="user", content="Name a colour.")]
    monkeypatch.setattr(engine, "prefix_cache", PrefixCache(0))
    plain_first = engine.generate(first, PARAMS)
    plain_second = engine.generate(turns(plain_first.generated_text), PARAMS)
    plain_view = engine.next_token_distribution(turns(plain_first.generated_text), PARAMS, prefix="A", top_k=5)

    cache = PrefixCache(4096)
    monkeypatch.setattr(engine, "prefix_cache", cache)
    same(engine.generate(first, PARAMS), plain_first)
    assert cache.usage()["hits"] == 0
    second = engine.generate(turns(plain_first.generated_text), PARAMS)
    reused = cache.usage()["reused_tokens"]
    assert reused > 100  # the system prompt, the first question and the answer
    same(second, plain_second)
    same(engine.generate(turns(plain_first.generated_text), PARAMS), plain_second)  # Retry
    assert cache.usage()["reused_tokens"] > 2 * reused
    view = engine.next_token_distribution(turns(plain_first.generated_text), PARAMS, prefix="A", top_k=5)
    assert [c.id for c in view.candidates] == [c.id for c in plain_view.candidates]
    for x, y in zip(view.candidates, plain_view.candidates, strict=True):
        assert x.raw_logprob == pytest.approx(y.raw_logprob, abs=TOLERANCE)


def test_best_of_and_adapters_keep_their_own_prefill(engine, monkeypatch):
    cache = PrefixCache(4096)
    monkeypatch.setattr(engine, "prefix_cache", cache)
    prompt = [SYSTEM, ChatMessage(role="user", content="Say a word.")]
    params = GenerateParameters(max_new_tokens=4, best_of=2, do_sample=True, seed=5)
    once = engine.generate(prompt, params)
    again = engine.generate(prompt, params)  # reuses the prompt's cache, expanded to two rows
    assert cache.usage()["hits"] == 1
    assert [s.generated_text for s in [once.best, *once.best_of_sequences]] == [
        s.generated_text for s in [again.best, *again.best_of_sequences]
    ]


def test_info_reports_the_prefix_cache(server_url):
    import httpx

    body = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 2}}
    assert httpx.post(f"{server_url}/generate", json=body, timeout=120).status_code == 200
    usage = httpx.get(f"{server_url}/info", timeout=30).json()["prefix_cache"]
    assert usage["max_tokens"] == 4096 and usage["scope"] == "client" and usage["bytes"] % (64 << 20) == 0
    assert "hits" not in usage and "tokens" not in usage  # nothing another client's request moves


def test_a_client_never_reuses_another_clients_prompt(engine, monkeypatch):
    from playground import client_scope

    cache = PrefixCache(4096)
    monkeypatch.setattr(engine, "prefix_cache", cache)
    prompt = [SYSTEM, ChatMessage(role="user", content="My PIN is 4831. Say OK.")]
    params = GenerateParameters(max_new_tokens=1)
    with client_scope.scoped("client:victim"):
        engine.generate(prompt, params)
    with client_scope.scoped("client:attacker"):
        engine.generate(prompt, params)
        engine.next_token_distribution(prompt, params)
    assert cache.usage()["hits"] == 1  # the attacker's second look found only the attacker's own entry
    with client_scope.scoped("client:victim"):
        engine.generate(prompt, params)
    assert cache.usage()["hits"] == 2


def test_usage_says_how_much_of_the_prompt_the_cache_held_on_every_openai_route(server_url):
    """usage.prompt_tokens_details.cached_tokens (OpenAI's, vLLM's) and the Responses API's cached_tokens, which
    was always 0: a request repeated by its client reuses the prompt its first run left in the cache."""
    import uuid

    import openai

    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=120, max_retries=0)
    system = f"Session {uuid.uuid4().hex}. " + SYSTEM.content  # a prompt no earlier request wrote
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Name a colour."}]
    first, again = (
        client.chat.completions.create(model="tgi", messages=messages, max_tokens=1, temperature=0).usage
        for _ in range(2)
    )
    assert first.prompt_tokens_details.cached_tokens < 20  # at most the template's first tokens, seen before
    assert first.prompt_tokens - 8 <= again.prompt_tokens_details.cached_tokens < again.prompt_tokens
    completions = [client.completions.create(model="tgi", prompt=system, max_tokens=1).usage for _ in range(2)]
    assert completions[1].prompt_tokens_details.cached_tokens >= completions[0].prompt_tokens - 8
    responses = client.responses.create(model="tgi", input=messages, max_output_tokens=1).usage
    assert responses.input_tokens_details.cached_tokens == again.prompt_tokens_details.cached_tokens
