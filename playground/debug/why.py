"""Reasons for a list of tokens at one answer prefix: what /reason, the next-token chart and the token popover show."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from playground.constraints import Constraint
from playground.debug import reasons
from playground.debug.check import first_refused
from playground.debug.state import LocalEngine, state_after
from playground.decoding import row_budget
from playground.errors import InvalidConstraintError, ParameterError
from playground.types import EngineName, GrammarType, Strict

MAX_REASON_TOKENS = 50
MAX_PREFIX_CHARS = 20_000
MAX_PREFIX_TOKENS = 2_000  # as /check's text: each is walked through the constraint


class ReasonRequest(Strict):
    """Body of POST /reason: why each token is (not) allowed after `prefix` under `grammar`."""

    grammar: GrammarType
    prefix: str = Field(default="", max_length=MAX_PREFIX_CHARS)
    tokens: list[int] = Field(min_length=1, max_length=MAX_REASON_TOKENS)
    constraint_engine: EngineName = "auto"
    model: str | None = None


class TokenReason(BaseModel):
    id: int
    text: str
    allowed: bool
    reason: str


class ReasonResult(BaseModel):
    prefix: str
    constraint_engine: str | None
    eos_gated: bool = Field(description="The JSON EOS gate took the end of text away here.")
    reasons: list[TokenReason]


def reasons_at(
    engine: LocalEngine, grammar: GrammarType | None, prefix: str, token_ids: list[int], constraint_engine: str = "auto"
) -> ReasonResult:
    """Each token's verdict and reason after `prefix` (which the constraint must allow), within a CPU budget."""
    with row_budget.walking("the prefix"):
        return _reasons_at(engine, grammar, prefix, token_ids, constraint_engine)


def _reasons_at(
    engine: LocalEngine, grammar: GrammarType | None, prefix: str, token_ids: list[int], constraint_engine: str
) -> ReasonResult:
    bad = [t for t in token_ids if not 0 <= t < engine.vocab_size]
    if bad:
        raise ParameterError(f"tokens: ids must be in 0..{engine.vocab_size - 1}, got {bad[0]}", field="tokens")
    constraint = Constraint.from_grammar(grammar)
    compiled = engine.compiler.compile(constraint, constraint_engine)
    if compiled is None:
        items = [TokenReason(id=t, text=engine.token_text(t), allowed=True, reason="no constraint") for t in token_ids]
        return ReasonResult(prefix=prefix, constraint_engine=None, eos_gated=False, reasons=items)
    ids = engine._encode(prefix, add_special_tokens=False) if prefix else []
    if len(ids) > MAX_PREFIX_TOKENS:
        raise ParameterError(f"prefix: at most {MAX_PREFIX_TOKENS} tokens, got {len(ids)}", field="prefix")
    refused = first_refused(engine, constraint, compiled, ids, with_eos=False)
    if refused is not None:
        raise InvalidConstraintError(
            f"prefix: the constraint refuses token {refused.position} ({refused.text!r}): {refused.reason}",
            field="prefix",
        )
    state = state_after(engine, constraint, compiled, ids)
    items = [
        TokenReason(
            id=t,
            text=engine.token_text(t),
            allowed=bool(state.allowed[t]),
            reason=_explained(engine, constraint, state, t),
        )
        for t in token_ids
    ]
    return ReasonResult(prefix=state.text, constraint_engine=compiled.engine, eos_gated=state.eos_gated, reasons=items)


def _explained(engine: LocalEngine, constraint: Constraint, state: Any, token_id: int) -> str:
    row_budget.walked()
    return reasons.explain(engine, constraint, state, token_id)
