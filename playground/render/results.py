"""A finished result: details, verdict, best_of candidates, and the whole answer as one notebook fragment."""

from __future__ import annotations

from pathlib import Path

from playground.render.core import box, candidates, esc, finish_text, kv_cells, verdict
from playground.render.tokens import tokens_html
from playground.types import GenerationResult, Sequence, Validation

# The panels' sheet, written un-nested: Gradio scopes it to each panel, `page` nests it under its root.
STYLESHEET = (Path(__file__).parent / "static" / "panels.css").read_text(encoding="utf-8")

# How the engines (and the verdict) read each kind: Rust regex syntax, Unicode classes by default.
DIALECT_NOTES = {
    "regex": "Rust regex syntax: \\d, \\w and . match any Unicode digit, word character or character "
    "(\\d admits digits like ٣ or 🯳); write [0-9], [A-Za-z] for ASCII. No look-around or backreferences.",
    "grammar": "Lark (start: ...) or llama.cpp GBNF (root ::= ...); regexes inside use Rust syntax.",
    "structural_tag": "vLLM's structural_tag: {structures: [{begin, schema, end}], triggers} or xgrammar's {format}; "
    "free text, each JSON segment between its markers checked against its schema (llguidance, xgrammar).",
}


def constraint_status(kind: str, message: str | None) -> str:
    """The line under the constraint editor: what is wrong, or that the text is ready; how the kind is read."""
    if kind in ("none", "processor"):
        return ""
    note = f'<div class="pg-muted pg-dialect">{esc(DIALECT_NOTES[kind])}</div>' if kind in DIALECT_NOTES else ""
    if message:
        return box("bad", f"✗ {message}", elem_class="pg-constraint-bad") + note
    return box("ok", "✓ constraint is valid", elem_class="pg-constraint-ok") + note


def details_html(result: GenerationResult) -> str:
    """Finish reason, counts, seed and timings of the chosen sequence."""
    best, timings = result.best, result.timings
    items = [
        ("finish reason", finish_text(best)),
        ("tokens", f"{best.generated_tokens} generated · {result.input_length} prompt"),
        ("seed", "—" if best.seed is None else str(best.seed)),
        ("time to first token", f"{timings.time_to_first_token_s * 1000:.0f} ms"),
        ("speed", f"{timings.tokens_per_s:.1f} tokens/s"),
        (
            "constraint",
            result.constraint_kind + (f" via {result.constraint_engine}" if result.constraint_engine else ""),
        ),
        ("compile time", f"{timings.compile_s * 1000:.0f} ms" + (" (cached)" if timings.compile_cached else "")),
        ("model", f"{result.model_id} ({result.provider_id})"),
    ]
    if timings.drafted:
        items.insert(5, ("drafts", f"{timings.drafts_kept} kept of {timings.drafted}"))
    if best.reasoning is not None:
        items.insert(2, ("reasoning", reasoning_text(best)))
    return f'<div class="pg-details" data-finish="{esc(best.finish_reason)}">{kv_cells(items)}</div>'


ENDED_BY = {
    "model": "the model ended it",
    "budget": "max_reasoning_tokens forced its end",
    "prompt": "the chat template closed it",
    "length": "the turn ended inside it (no answer)",
}


def reasoning_text(seq: Sequence) -> str:
    """How a thinking model's reasoning went: its length, what ended it, where the constraint engaged."""
    span = seq.reasoning
    assert span is not None
    engaged = "never" if span.answer_token is None else f"at token {span.answer_token}"
    return f"{span.tokens} tokens · {ENDED_BY[span.ended_by]} · the constraint engaged {engaged}"


def validation_html(sequence: Sequence, constraint_kind: str) -> str:
    """The verdict: green when valid, red when invalid or when the provider did not enforce it."""
    return verdict_html(sequence.validation, constraint_kind)


def verdict_html(validation: Validation, constraint_kind: str) -> str:
    """The verdict box of a text judged outside a finished sequence (an answer the engine had to end)."""
    state, text = verdict(validation, constraint_kind)
    attr = {True: "valid", False: "invalid", None: "none"}[validation.valid]
    return f'<div class="pg-box pg-{state} pg-verdict" data-valid="{attr}">{esc(text)}{segments_html(validation)}</div>'


def segments_html(validation: Validation) -> str:
    """Each constrained segment (a structural tag's, a tool call's): its marker, its content and its own verdict."""
    if not validation.segments:
        return ""
    rows = []
    for number, segment in enumerate(validation.segments, start=1):
        mark = {True: ("ok", "✓"), False: ("bad", "✗"), None: ("muted", "?")}[segment.valid]
        attr = {True: "valid", False: "invalid", None: "none"}[segment.valid]
        rows.append(
            f'<li class="pg-segment" data-valid="{attr}"><span class="pg-{mark[0]}-text">{mark[1]} segment {number}'
            f"</span> <code>{esc(segment.begin)}</code><pre>{esc(segment.content)}</pre>"
            f'<span class="pg-muted">{esc(segment.message)}</span></li>'
        )
    return f'<ol class="pg-segments">{"".join(rows)}</ol>'


def bestof_html(result: GenerationResult) -> str:
    """One row per candidate: text, total logprob, finish reason, seed and verdict; the chosen one marked."""
    rows = []
    for number, seq in enumerate(candidates(result), start=1):
        chosen = number == 1
        state, text = verdict(seq.validation, result.constraint_kind)
        # data-label: on a phone each candidate is a card of labelled lines (page.css)
        rows.append(
            f'<tr class="cand{" chosen" if chosen else ""}">'
            f'<td data-label="#">{"★ " if chosen else ""}{number}</td>'
            f'<td class="cand-text" data-label="text"><pre>{esc(seq.generated_text)}</pre></td>'
            f'<td class="num" data-label="total logprob">{seq.total_logprob:.3f}</td>'
            f'<td data-label="finish">{esc(finish_text(seq))}</td>'
            f'<td data-label="seed">{"—" if seq.seed is None else seq.seed}</td>'
            f'<td class="pg-{state}-text" data-label="verdict">{esc(text)}</td></tr>'
        )
    head = "<tr><th>#</th><th>text</th><th>total logprob</th><th>finish</th><th>seed</th><th>verdict</th></tr>"
    note = "" if len(rows) > 1 else '<div class="muted">Set best_of &gt; 1 (with sampling) to compare candidates.</div>'
    return f'<div class="pg-bestof"><table>{head}{"".join(rows)}</table>{note}</div>'


def page(fragment: str) -> str:
    """A fragment with the panels' sheet nested under its root, for notebooks (no Gradio to scope it)."""
    return f'<div class="pg-result"><style>.pg-result {{ {STYLESHEET} }}</style>{fragment}</div>'


def result_html(result: GenerationResult, mode: str = "constrained") -> str:
    """The whole answer as the UI shows it: details, verdict, tokens with popovers and the candidates."""
    parts = [
        details_html(result),
        validation_html(result.best, result.constraint_kind),
        tokens_html(result.best.tokens, mode),
    ]
    if result.best_of_sequences:
        parts.append(bestof_html(result))
    return page("".join(parts))
