"""The constraint's state after an answer prefix: the engine's own mask, the EOS gate, llguidance's view.

The mask comes from the engine that decodes (the truth about what was allowed); llguidance, when it can
compile the constraint, adds what only a parser knows: the bytes it forces next and trial continuations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from playground.constraints import Constraint
from playground.constraints.compiler import CompiledConstraint, lenient_form
from playground.decoding.walk import LocalEngine, masks
from playground.errors import ConstraintError

if TYPE_CHECKING:
    pass

# Listing the first characters of every allowed token costs a decode per token; past this many
# allowed tokens the list would be too long to be a reason anyway.
MAX_LISTED_TOKENS = 4000


@dataclass
class State:
    """What the constraint allows after `text` (the decoded answer prefix)."""

    text: str
    allowed: torch.Tensor | None
    eos_gated: bool
    engine: str
    matcher: Any | None

    def forced(self) -> str:
        """The text the constraint forces next ("" when there is a choice), as llguidance computes it."""
        if self.matcher is None:
            return ""
        return self.matcher.compute_ff_bytes().decode("utf-8", "replace").rstrip("\ufffd")

    def accepts(self, engine: LocalEngine, continuation: str) -> bool:
        """Would llguidance accept `continuation` from here (any tokenization of it)? True without llguidance."""
        if self.matcher is None:
            return True
        ids = engine.answer_ids(continuation)
        trial = self.matcher.deep_copy()
        return trial.try_consume_tokens(ids) == len(ids)

    def advanced(self, engine: LocalEngine, piece: str) -> State:
        """The state after `piece` more text, seen by llguidance alone (no engine mask)."""
        matcher = None
        if self.matcher is not None:
            matcher = self.matcher.deep_copy()
            matcher.try_consume_tokens(engine.answer_ids(piece))
        return State(self.text + piece, None, False, self.engine, matcher)


def llguidance_matcher(engine: LocalEngine, constraint: Constraint, token_ids: list[int]) -> Any | None:
    """An llguidance matcher advanced through `token_ids`; None when llguidance can't take the constraint."""
    import llguidance

    try:
        compiled = engine.compiler.compile(constraint, "llguidance")
    except ConstraintError as exc:  # read leniently, as `auto` reads it (the keywords it leaves out aside), or none
        lenient = lenient_form(constraint, "llguidance", exc)
        try:
            compiled = None if lenient is None else engine.compiler.compile(lenient, "llguidance")
        except ConstraintError:
            return None
    if compiled is None:
        return None
    template = compiled.template
    matcher = llguidance.LLMatcher(template.llg_tokenizer, template.grammar)
    if token_ids and not matcher.consume_tokens(token_ids):
        return None
    return matcher


def state_after(
    engine: LocalEngine, constraint: Constraint, compiled: CompiledConstraint, token_ids: list[int]
) -> State:
    """The state after an answer prefix given as token ids (which the constraint must allow)."""
    *_, (allowed, gated) = masks(engine, constraint, compiled, token_ids)
    text = engine.tokenizer.decode(token_ids, skip_special_tokens=True)
    return State(text, allowed, gated, compiled.engine, llguidance_matcher(engine, constraint, token_ids))


def first_chars(engine: LocalEngine, allowed: torch.Tensor | None) -> set[str] | None:
    """The first characters of the allowed (non-special) tokens; None when too many tokens are allowed."""
    if allowed is None:
        return None
    ids = allowed.nonzero().flatten().tolist()
    if len(ids) > MAX_LISTED_TOKENS:
        return None
    chars = set()
    for token_id in ids:
        if token_id in engine.runner.special_ids or token_id in engine.runner.eos_ids:
            continue
        text = engine.token_text(token_id)
        if text and text[0] != "\ufffd":  # a byte of a longer character (non-ASCII digits, say)
            chars.add(text[0])
    return chars
