"""The one mask walk: a token sequence fed through a constraint exactly as decoding feeds it.

/check, the debugger, continue_from and benchmarks.maskbench all walk text through here, so what they
report is what decoding would have allowed: the engine's mask and the JSON EOS gate of a TokenChooser.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from playground.constraints import Constraint
from playground.constraints.compiler import CompiledConstraint, ConstraintCompiler
from playground.decoding import row_budget
from playground.decoding.runner import RowText
from playground.types import GenerateParameters

if TYPE_CHECKING:
    from playground.decoding.chooser import TokenChooser
    from playground.decoding.runner import ModelRunner


class LocalEngine(Protocol):
    """What the walk, continue_from and the debugger use of the local engine (decoding.engine.Engine)."""

    tokenizer: Any
    runner: ModelRunner
    compiler: ConstraintCompiler
    vocab_size: int
    max_input_tokens: int

    def token_text(self, token_id: int) -> str: ...

    def _encode(self, text: str, *, add_special_tokens: bool) -> list[int]: ...

    def chooser(
        self, params: GenerateParameters, compiled: CompiledConstraint, constraint: Constraint, prompt_length: int
    ) -> TokenChooser: ...


@dataclass(frozen=True)
class Refusal:
    """Where a walk stopped: the refused token (an EOS id at the end of text) and what was allowed there."""

    position: int  # index into the walked ids; len(ids) for the end of text
    token: int
    allowed: torch.Tensor
    gated: bool  # the JSON EOS gate, not the engine's mask, took EOS away


def masks(
    engine: LocalEngine, constraint: Constraint, compiled: CompiledConstraint, token_ids: list[int]
) -> Iterator[tuple[torch.Tensor, bool]]:
    """Before each of `token_ids` and after the last: the allowed tokens and whether the EOS gate took EOS.

    Scored through the engine's own TokenChooser (its mask and its JSON EOS gate), as decoding does.
    """
    chooser = engine.chooser(GenerateParameters(), compiled, constraint, 0)
    runner = engine.runner
    # The processors consume input_ids[-1] from their second call on: any token can start the row.
    ids = [min(runner.eos_ids)]
    answer = RowText(runner.text, runner.text_joins)  # the text so far, for the key gate, decoded as it grows
    for k in range(len(token_ids) + 1):
        row_budget.walked()
        with torch.inference_mode():
            allowed = chooser.allowed(chooser.row_ids(ids)).cpu()
            eos = [t for t in runner.eos_ids if t < allowed.shape[0] and bool(allowed[t])]
            text = engine.tokenizer.decode(token_ids[:k], skip_special_tokens=True) if eos else ""
            gated = chooser.eos_refused(eos, text)
            if gated:
                allowed = allowed.clone()
                allowed[eos] = False
            key_gate = chooser.key_gate
            again = key_gate.refused(answer(token_ids[:k]), allowed.shape[0]) if key_gate is not None else []
            if again:  # as decoding: no key twice in one object
                allowed = allowed.clone()
                allowed[again] = False
            # the walked token, spelled otherwise than the engine's mask offers forced text, may be the constraint's
            if (
                k < len(token_ids)
                and not bool(allowed[token_ids[k]])
                and token_ids[k] not in again
                and chooser.accepts(chooser.row_ids(ids), token_ids[k])
            ):
                allowed = allowed.clone()
                allowed[token_ids[k]] = True
        yield allowed, gated
        if k < len(token_ids):
            ids.append(token_ids[k])


def first_refusal(
    engine: LocalEngine, constraint: Constraint, compiled: CompiledConstraint, ids: list[int], *, with_eos: bool = True
) -> Refusal | None:
    """The first token of `ids` (or, with_eos, the end of text after them) the constraint refuses; None when all pass."""
    eos = min(engine.runner.eos_ids)
    for k, (allowed, gated) in enumerate(masks(engine, constraint, compiled, ids)):
        if k == len(ids) and not with_eos:
            return None
        token = ids[k] if k < len(ids) else eos
        if not bool(allowed[token]):
            return Refusal(k, token, allowed, gated)
    return None
