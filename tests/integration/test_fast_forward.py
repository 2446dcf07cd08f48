"""Fast-forward: tokens a constraint forces are appended without sampling, in one forward, and marked."""

from __future__ import annotations

import math

import httpx
import pytest

from playground.types import ChatMessage, GenerateParameters

ASK = [ChatMessage(role="user", content="Describe a customer as JSON.")]
SCHEMA = {
    "type": "object",
    "properties": {
        "customer_full_legal_name": {"type": "string", "maxLength": 12},
        "customer_account_status": {"enum": ["active_subscription", "suspended_for_nonpayment"]},
    },
    "required": ["customer_full_legal_name", "customer_account_status"],
    "additionalProperties": False,
}
# Batched kernels round differently: a position scored in a multi-token forward differs from one scored
# alone by float32 rounding (~1e-5 measured); 1e-3 is far below any difference that changes a choice.
LOGPROB_TOLERANCE = 1e-3


@pytest.mark.parametrize("engine_name", ["llguidance", "xgrammar"])
def test_greedy_text_and_logprobs_same_with_and_without(engine, engine_name):
    params = GenerateParameters(
        grammar={"type": "json", "value": SCHEMA}, constraint_engine=engine_name, max_new_tokens=60, top_n_tokens=3
    )
    fast = engine.generate(ASK, params)
    plain = engine.generate(ASK, params.model_copy(update={"fast_forward": False}))
    assert fast.generated_text == plain.generated_text
    assert [t.id for t in fast.best.tokens] == [t.id for t in plain.best.tokens]
    assert fast.best.validation.valid
    forced = [t for t in fast.best.tokens if t.forced]
    assert len(forced) >= 5 and not any(t.forced for t in plain.best.tokens)
    for a, b in zip(fast.best.tokens, plain.best.tokens):
        assert a.raw_logprob == pytest.approx(b.raw_logprob, abs=LOGPROB_TOLERANCE)
        assert [t.id for t in a.raw_top_tokens] == [t.id for t in b.raw_top_tokens]
    # each forced token keeps the model's own view of it: a raw logprob and its alternatives
    assert all(math.isfinite(t.raw_logprob) and len(t.raw_top_tokens) == 3 for t in forced)


def test_custom_processors_turn_it_off(engine):
    params = GenerateParameters(
        grammar={"type": "json", "value": SCHEMA},
        max_new_tokens=30,
        logits_processors=[{"name": "max_whitespace", "params": ["1"]}],
    )
    assert not any(t.forced for t in engine.generate(ASK, params).best.tokens)


def _tokens(reply: httpx.Response) -> list[dict]:
    assert reply.status_code == 200, reply.text
    return reply.json()["details"]["tokens"]


def test_forced_flag_and_switch_on_the_wire(server_url):
    grammar = {"type": "json", "value": SCHEMA}
    body = {"inputs": "A customer as JSON:", "parameters": {"grammar": grammar, "max_new_tokens": 40, "details": True}}
    tokens = _tokens(httpx.post(f"{server_url}/generate", json=body, timeout=120))
    assert any(t["forced"] for t in tokens) and not all(t["forced"] for t in tokens)
    body["parameters"]["fast_forward"] = False
    tokens = _tokens(httpx.post(f"{server_url}/generate", json=body, timeout=120))
    assert not any(t["forced"] for t in tokens)
    chat = {
        "messages": [{"role": "user", "content": "A customer as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}},
        "max_tokens": 40,
        "temperature": 0,
        "logprobs": True,
    }
    content = httpx.post(f"{server_url}/v1/chat/completions", json=chat, timeout=120).json()
    assert any(entry["forced"] for entry in content["choices"][0]["logprobs"]["content"])


def test_token_budget_and_continuation_hold(engine):
    grammar = {"type": "json", "value": SCHEMA}
    for extra in ({}, {"continue_from": '{"customer_full_legal_name": "Al'}):
        params = GenerateParameters(grammar=grammar, max_new_tokens=9, **extra)
        fast = engine.generate(ASK, params)
        plain = engine.generate(ASK, params.model_copy(update={"fast_forward": False}))
        assert fast.best.generated_tokens == plain.best.generated_tokens == 9
        assert fast.best.finish_reason == "length"
        assert fast.generated_text == plain.generated_text
        assert any(t.forced for t in fast.best.tokens)


# Objects that repeat their keys: after the first, a row meets the same masks again (`":` after a key, `,` after a
# value) and drafts what it chose there.
PEOPLE = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "first_name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer"},
            "city_of_residence": {"type": "string", "maxLength": 12},
        },
        "required": ["first_name", "age", "city_of_residence"],
    },
    "minItems": 3,
    "maxItems": 3,
}
FOUR = [ChatMessage(role="user", content="Three people as JSON.")]


def _without_drafts(engine, monkeypatch, params: GenerateParameters):
    with monkeypatch.context() as m:
        m.setattr(engine.runner, "drops_positions", False)
        return engine.generate(FOUR, params)


@pytest.mark.parametrize("engine_name", ["llguidance", "xgrammar"])
def test_drafts_keep_greedy_tokens_and_logprobs(engine, monkeypatch, engine_name):
    params = GenerateParameters(
        grammar={"type": "json", "value": PEOPLE}, constraint_engine=engine_name, max_new_tokens=150, top_n_tokens=2
    )
    drafted = engine.generate(FOUR, params)
    plain = _without_drafts(engine, monkeypatch, params)
    assert drafted.timings.drafts_kept >= 5 and plain.timings.drafted == 0
    assert [t.id for t in drafted.best.tokens] == [t.id for t in plain.best.tokens]
    assert [t.forced for t in drafted.best.tokens] == [t.forced for t in plain.best.tokens]  # a draft is a choice
    for a, b in zip(drafted.best.tokens, plain.best.tokens):
        assert a.logprob == pytest.approx(b.logprob, abs=LOGPROB_TOLERANCE)
        assert [t.id for t in a.top_tokens] == [t.id for t in b.top_tokens]
    assert drafted.best.validation.valid


def test_a_refused_draft_is_undone_and_sampling_draws_the_same(engine, monkeypatch):
    refused = 0
    for seed in range(6):  # hot sampling: some drafts are refused, their cache positions and matcher steps undone
        params = GenerateParameters(
            grammar={"type": "json", "value": PEOPLE}, max_new_tokens=90, do_sample=True, temperature=1.5, seed=seed
        )
        drafted = engine.generate(FOUR, params)
        plain = _without_drafts(engine, monkeypatch, params)
        assert [t.id for t in drafted.best.tokens] == [t.id for t in plain.best.tokens]
        assert drafted.generated_text == plain.generated_text
        refused += drafted.timings.drafted - drafted.timings.drafts_kept
        if refused >= 2:
            break
    assert refused >= 2


def test_best_of_rows_do_not_draft(engine):
    params = GenerateParameters(
        grammar={"type": "json", "value": PEOPLE}, max_new_tokens=60, do_sample=True, best_of=2, seed=1
    )
    assert engine.generate(FOUR, params).timings.drafted == 0


def test_a_refused_draft_in_free_text_before_a_fence_is_undone(engine, monkeypatch):
    """A structural tag's free text ends at a stop lexeme, which llguidance cannot roll back through: a refused
    draft returns to a copy of the matcher taken before it."""
    from tests.integration.test_structural_tag import FENCE

    tag = {k: v for k, v in FENCE.items() if k != "type"}
    refused = 0
    for seed in range(6):
        params = GenerateParameters(
            grammar={"type": "structural_tag", "value": tag},
            max_new_tokens=60,
            do_sample=True,
            temperature=0.7,
            seed=seed,
        )
        drafted = engine.generate(FOUR, params)
        plain = _without_drafts(engine, monkeypatch, params)
        assert [t.id for t in drafted.best.tokens] == [t.id for t in plain.best.tokens]
        refused += drafted.timings.drafted - drafted.timings.drafts_kept
        if refused:
            break
    assert refused
