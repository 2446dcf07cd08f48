"""Scoring every allowed answer (/score) against a brute-force computation on the embedded model.

Brute force: one plain forward per tokenization, of the whole prompt + alternative with no cache and no
batch, summing the log-softmax of each alternative token. The tolerance (1e-3 on a sum of at most a few
tokens) is the batching one the README measures (at most 3e-5 per token between a batched and a lone
forward) with a wide margin; a wrong token, position or cache is off by far more (whole nats).
"""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest
import torch

from playground.constraints import Constraint
from playground.debug.score import score, tokenizations
from playground.decoding.walk import first_refusal
from playground.types import GenerateParameters

TOLERANCE = 1e-3
CITIES = [" Paris", " London", " Berlin"]
PET = {"type": "object", "properties": {"kind": {"enum": ["cat", "dog", "fish"]}}, "required": ["kind"]}


def brute_force(engine: Any, prompt: str, prefix: str, ids: list[int]) -> float:
    """log p(ids | prompt + prefix) from one plain forward of the whole sequence."""
    context = engine._encode(prompt, add_special_tokens=True)
    context += engine._encode(prefix, add_special_tokens=False) if prefix else []
    with torch.inference_mode():
        logits = engine.model(input_ids=torch.tensor([context + ids])).logits[0].float()
    steps = torch.log_softmax(logits[len(context) - 1 : -1], dim=-1)
    return float(sum(steps[k, t] for k, t in enumerate(ids)))


def leads_for(grammar: dict, prefix: str) -> tuple[str, ...]:
    """What may stand before an alternative: a JSON value also the space JSON allows, unless already there."""
    return ("", " ") if grammar["type"] == "json" and not prefix[-1:].isspace() else ("",)


def allowed_spellings(engine: Any, grammar: dict, prefix: str, text: str, complete: bool) -> list[list[int]]:
    """Every tokenization of `text` after `prefix` that the constraint's mask allows; a JSON value also with
    the space JSON allows before it, unless the prefix ends in whitespace."""
    constraint = Constraint.from_grammar(grammar)
    compiled = engine.compiler.compile(constraint, "auto")
    prefix_ids = engine._encode(prefix, add_special_tokens=False) if prefix else []
    spelled = [ids for lead in leads_for(grammar, prefix) for ids in tokenizations(engine, lead + text)[0]]
    return [
        ids
        for ids in spelled
        if first_refusal(engine, constraint, compiled, prefix_ids + ids, with_eos=complete) is None
    ]


@pytest.mark.parametrize(
    ("prompt", "grammar", "prefix", "expected"),
    [
        ("The capital of France is", {"type": "choice", "value": CITIES}, "", CITIES),
        ("Is the sky blue? Answer:", {"type": "regex", "value": " (yes|no|maybe)"}, "", [" yes", " no", " maybe"]),
        ("A pet as JSON: ", {"type": "json", "value": PET}, '{"kind": ', ['"cat"', '"dog"', '"fish"']),
        ("A pet as JSON: ", {"type": "json", "value": PET}, '{"kind":', ['"cat"', '"dog"', '"fish"']),
    ],
)
def test_every_alternative_matches_brute_force(
    engine: Any, prompt: str, grammar: dict, prefix: str, expected: list[str]
) -> None:
    result = score(engine, prompt, GenerateParameters(grammar=grammar, continue_from=prefix or None))
    alternatives = result.alternatives
    assert sorted(a.text for a in alternatives) == sorted(expected)
    assert [a.logprob for a in alternatives] == sorted((a.logprob for a in alternatives), reverse=True)
    assert math.isclose(sum(a.probability for a in alternatives), 1.0, abs_tol=1e-9)
    assert result.forwards == 1 and result.complete is (prefix == "")
    for alt in alternatives:
        spellings = allowed_spellings(engine, grammar, prefix, alt.text, result.complete)
        canonical = brute_force(engine, prompt, prefix, spellings[0])
        assert abs(alt.canonical_raw_logprob - canonical) < TOLERANCE, alt.text
        assert [t.id for t in alt.tokens] == spellings[0]
        assert abs(sum(t.raw_logprob for t in alt.tokens) - canonical) < TOLERANCE
        if alt.method == "all_tokenizations":
            assert alt.tokenizations == len(spellings) > 1
            total = math.log(sum(math.exp(brute_force(engine, prompt, prefix, ids)) for ids in spellings))
            assert abs(alt.raw_logprob - total) < TOLERANCE, alt.text
        elif alt.method == "canonical_only":  # too many spellings: each lead's canonical one the mask allows
            canonicals = [tokenizations(engine, lead + alt.text)[0][0] for lead in leads_for(grammar, prefix)]
            summed = [ids for ids in canonicals if ids in spellings]
            total = math.log(sum(math.exp(brute_force(engine, prompt, prefix, ids)) for ids in summed))
            assert abs(alt.raw_logprob - total) < TOLERANCE, alt.text
        else:
            assert alt.raw_logprob == alt.canonical_raw_logprob
    norm = math.log(sum(math.exp(a.raw_logprob) for a in alternatives))
    for alt in alternatives:
        assert abs(alt.logprob - (alt.raw_logprob - norm)) < 1e-9
    if prefix.endswith(":"):  # the value as the model writes it, ` "dog"`, is summed in
        spaced = [ids for alt in alternatives for ids in allowed_spellings(engine, grammar, prefix, alt.text, False)]
        assert any(engine.token_text(ids[0]).startswith(" ") for ids in spaced)
        assert all(alt.method != "canonical" for alt in alternatives)


def post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}/score", json=body, timeout=300)


def test_score_over_http_ranks_the_choices(server_url: str) -> None:
    body = {"inputs": "The capital of France is", "parameters": {"grammar": {"type": "choice", "value": CITIES}}}
    data = post(server_url, body).json()
    assert [a["text"] for a in data["alternatives"]][0] == " Paris"
    first = data["alternatives"][0]
    assert set(first) >= {"text", "raw_logprob", "logprob", "tokens", "method"}
    assert first["logprob"] > first["raw_logprob"] and data["source"] == "choice"
    assert data["warnings"] == []
    sampled = {**body, "parameters": {**body["parameters"], "temperature": 0.5}}
    assert post(server_url, sampled).json()["warnings"] == [
        "temperature: accepted and ignored (scoring reads the model's own distribution, before sampling)"
    ]
    # " Paris" also starts " Paris, France": its share holds that answer too (it read as the likelier one, silently)
    body["parameters"]["grammar"]["value"] = [" Paris", " Paris, France"]
    warnings = post(server_url, body).json()["warnings"]
    assert warnings == [
        "' Paris' is the start of ' Paris, France': its probability counts every answer that goes on past it (the "
        "end of text is not counted), so the two do not compare as decoding chooses between them"
    ]


def test_score_on_a_chat_ranks_tool_names(server_url: str) -> None:
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    stock = {"type": "function", "function": {"name": "get_stock_price", "parameters": {"type": "object"}}}
    body = {"messages": [{"role": "user", "content": "Will it rain in Paris tomorrow?"}], "tools": [weather, stock]}
    data = post(server_url, body).json()
    assert sorted(a["text"] for a in data["alternatives"]) == ['"get_stock_price"', '"get_weather"']
    assert data["source"] == "enum at name" and data["continued_from"] == '{"name": '


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "[a-z]{3}"}}}, "more than 64 answers"),
        ({"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "a+"}}}, "too many to score"),
        ({"inputs": "x"}, "scoring needs a constraint"),
        ({"inputs": "x", "parameters": {"grammar": {"type": "json", "value": {"type": "object"}}}}, "no `enum`"),
        ({"inputs": "x", "messages": [{"role": "user", "content": "x"}]}, "exactly one of"),
        (
            {"inputs": "x", "parameters": {"grammar": {"type": "choice", "value": ["a"]}, "continue_from": "b"}},
            "continue_from",
        ),
    ],
)
def test_what_cannot_be_scored_is_a_422_naming_why(server_url: str, body: dict, message: str) -> None:
    response = post(server_url, body)
    assert response.status_code == 422, response.text
    assert message in response.json()["error"]
