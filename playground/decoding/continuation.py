"""Branch from any token: decoding resumes after a given answer prefix, forced through the constraint.

The prefix is tokenized as the model would write it and fed to every row's processors, exactly as if
the model had sampled it; a prefix the constraint refuses is a 422 naming its first refused token
(PrefixRefused: the edges ask the debugger for the reason in words).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from playground.constraints import Constraint
from playground.constraints.compiler import CompiledConstraint
from playground.decoding.walk import LocalEngine, first_refusal
from playground.errors import InvalidConstraintError, PromptTooLongError

if TYPE_CHECKING:
    from playground.decoding.rows import Row


class PrefixRefused(InvalidConstraintError):
    """continue_from holds a token the constraint refuses: where, and what to explain it with."""

    def __init__(
        self, message: str, constraint: Constraint, compiled: CompiledConstraint, ids: list[int], field: str
    ) -> None:
        super().__init__(message, field=field)
        self.constraint, self.compiled, self.ids = constraint, compiled, ids


def prefix_ids(engine: LocalEngine, text: str | None, prompt_length: int) -> list[int]:
    """The prefix as the model's tokens; it must leave room for at least one new token."""
    if not text:
        return []
    ids = engine._encode(text, add_special_tokens=False)
    if prompt_length + len(ids) > engine.max_input_tokens:
        raise PromptTooLongError(
            f"prompt and continue_from have {prompt_length + len(ids)} tokens; at most {engine.max_input_tokens}",
            field="continue_from",
        )
    return ids


def check_prefix(
    engine: LocalEngine, constraint: Constraint, compiled: CompiledConstraint | None, ids: list[int]
) -> None:
    """A 422 naming the first token of the prefix that the constraint refuses, and why."""
    if compiled is None or not ids:
        return
    refused = first_refusal(engine, constraint, compiled, ids, with_eos=False)
    if refused is not None:
        k = refused.position
        offset = sum(len(engine.token_text(i)) for i in ids[:k])
        raise PrefixRefused(
            f"continue_from: the constraint refuses token {k} ({engine.token_text(refused.token)!r}, "
            f"at character {offset})",
            constraint,
            compiled,
            ids,
            field="continue_from",
        )


def start_rows(engine: LocalEngine, rows: list[Row], prompt_ids: list[int], ids: list[int]) -> None:
    """Put every row after the prefix: its processors have consumed it and its text begins with it."""
    if not ids:
        return
    for row in rows:
        # one processor call per prefix token; the decode loop's first call consumes the last one
        row.chooser.consume(prompt_ids, ids)
        # as the row's text is decoded from here on (a thinking model's `<think>`, a template's `<tool_call>` kept):
        # the answer is what follows it, character for character
        text = row.chooser.decode(list(ids))
        row.ids, row.text, row.emitted, row.prefix = list(ids), text, text, text
