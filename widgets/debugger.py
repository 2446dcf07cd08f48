"""The constraint debugger for the Playground widget: reasons on the next-token chart, testing an
instance, and branching the last answer from a token. Local models only; a remote provider is named.
"""

from __future__ import annotations

from typing import Any

from playground.debug.check import CheckResult, check_text
from playground.debug.why import reasons_at
from playground.errors import ParameterError
from playground.providers.base import Inputs, Provider, local_engine
from playground.types import GenerateParameters, GenerationResult, GrammarType, NextTokenDistribution


def with_reasons(
    provider: Provider, model: str, params: GenerateParameters, prefix: str, dist: NextTokenDistribution
) -> dict[str, Any]:
    """The distribution as the chart reads it, each refused candidate with why (when the model is local)."""
    payload = dist.model_dump(mode="json")
    refused = [c.id for c in dist.candidates if not c.allowed]
    if params.grammar is None or not refused or not provider.capabilities.local_engine:
        return payload
    result = reasons_at(
        local_engine(provider, model, "a reason"), params.grammar, prefix, refused, params.constraint_engine
    )
    why = {r.id: r.reason for r in result.reasons}
    for candidate in payload["candidates"]:
        if candidate["id"] in why:
            candidate["reason"] = why[candidate["id"]]
    return payload


def check(provider: Provider, model: str, grammar: GrammarType | None, text: str, engine_name: str) -> CheckResult:
    """Walk a candidate text through the constraint's masks and EOS gate, with the final verdict."""
    if grammar is None:
        raise ParameterError("pick a constraint first: there is nothing to check the text against")
    return check_text(local_engine(provider, model, "checking an instance"), grammar, text, engine_name)


def branch(
    provider: Provider,
    model: str,
    inputs: Inputs,
    params: GenerateParameters,
    result: GenerationResult,
    position: int,
    text: str,
) -> GenerationResult:
    """The last answer up to token `position`, then `text` forced through the constraint, then decoded on."""
    tokens = result.best.tokens
    if not 0 <= position <= len(tokens):
        raise ParameterError(f"position must be in 0..{len(tokens)}, got {position}", field="position")
    prefix = "".join(t.text for t in tokens[:position] if not t.special) + text
    update = {"best_of": None, "continue_from": prefix or None}
    return provider.generate(model, inputs, params.model_copy(update=update))
