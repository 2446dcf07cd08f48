"""Side-by-side panels: the Compare tab's two answers and its engine columns, and a turn the user stopped."""

from __future__ import annotations

from dataclasses import dataclass

from playground.render.core import error_box, esc, kv_cells
from playground.render.results import details_html, validation_html
from playground.render.tokens import tokens_html
from playground.types import GeneratedToken, GenerationResult

STOPPED = "stopped by the user"


def side_html(title: str, result: GenerationResult, verdict_html: str) -> str:
    """One answer of a comparison: its text (a thinking model's reasoning apart), the verdict, details and tokens."""
    span = result.best.reasoning
    thought = (
        f'<details class="reasoning"><summary>reasoning</summary><pre class="answer">{esc(span.text)}</pre></details>'
        if span is not None and span.text
        else ""
    )
    return (
        f'<div class="pg-side"><h4>{esc(title)}</h4>{thought}'
        f'<pre class="answer">{esc(result.best.answer)}</pre>'
        f"{verdict_html}{details_html(result)}{tokens_html(result.best.tokens)}</div>"
    )


@dataclass
class Column:
    """One run of the turn: its label and its result, or the error that stopped it."""

    label: str
    result: GenerationResult | None = None
    error: str | None = None


def columns_html(columns: list[Column]) -> str:
    """The columns side by side; token differences are counted against the first column that ran."""
    first = next((c.result for c in columns if c.result is not None), None)
    cells = "".join(_column(c, first) for c in columns)
    return f'<div class="pg-engine-compare">{cells}</div>'


def _column(column: Column, first: GenerationResult | None) -> str:
    head = f"<h4>{esc(column.label)}</h4>"
    if column.result is None:
        return f'<div class="pg-side pg-engine-col">{head}{error_box(column.error or "")}</div>'
    result = column.result
    return (
        f'<div class="pg-side pg-engine-col">{head}'
        f'<pre class="answer">{esc(result.generated_text)}</pre>'
        f"{validation_html(result.best, result.constraint_kind)}"
        f'<div class="pg-details">{_figures(result)}</div>'
        f'<div class="pg-engine-diff">{esc(_difference(result, first))}</div>'
        f"{tokens_html(result.best.tokens)}</div>"
    )


def _figures(result: GenerationResult) -> str:
    timings = result.timings
    compile_ms = f"{timings.compile_s * 1000:.1f} ms" + (" (cached)" if timings.compile_cached else "")
    kept = _mean_mass_kept(result.best.tokens)
    pairs = [
        ("engine", result.constraint_engine or "none"),
        ("compile", compile_ms),
        ("tokens/s", f"{timings.tokens_per_s:.1f}"),
        ("mass kept", "—" if kept is None else f"{kept:.0%}"),
    ]
    return kv_cells(pairs)


def _mean_mass_kept(tokens: list[GeneratedToken]) -> float | None:
    kept = [t.mass_kept for t in tokens if t.mass_kept is not None]
    return sum(kept) / len(kept) if kept else None


def _difference(result: GenerationResult, first: GenerationResult | None) -> str:
    """Where this column's tokens part from the first column's, or that they are the same."""
    if first is None or result is first:
        return "reference for the token differences"
    ours, theirs = result.best.tokens, first.best.tokens
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if a.id != b.id:
            return f"differs from token {k}: {a.text!r} here, {b.text!r} in the first column"
    if len(ours) != len(theirs):
        return f"same first {min(len(ours), len(theirs))} tokens, then {len(ours)} against {len(theirs)}"
    return "same tokens as the first column"


def stopped_details_html(model: str, tokens: int, finish: str = STOPPED, attr: str = "stopped") -> str:
    """The details line of a stopped (or engine-ended) turn, in the shape of a finished one."""
    items = [("finish reason", finish), ("tokens", f"{tokens} generated"), ("model", model)]
    return f'<div class="pg-details" data-finish="{esc(attr)}">{kv_cells(items)}</div>'


def stopped_verdict_html(text: str, valid: bool | None) -> str:
    """Amber, never green: the answer is unfinished (`text` says whether the partial answer already fits)."""
    attr = {True: "valid", False: "invalid", None: "none"}[valid]
    return f'<div class="pg-box pg-warn pg-verdict pg-stopped" data-valid="{attr}">{esc(text)}</div>'
