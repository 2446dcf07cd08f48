"""Results -> safe HTML: every piece of model or user text goes through `esc` before it becomes markup."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass

from playground.types import GeneratedToken, GenerationResult, NextTokenDistribution, Sequence

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_VISIBLE = {" ": "·", "\t": "⇥", "\n": "↵"}


def esc(text: object) -> str:
    """HTML-escape anything (quotes too, so it is safe inside attributes)."""
    return html.escape(str(text), quote=True)


def token_label(text: str) -> str:
    """A token's text made visible and safe: spaces, tabs, newlines and control bytes shown as marks."""
    if text == "":
        return '<span class="ws">∅</span>'
    out: list[str] = []
    for char in text:
        if char in _VISIBLE:
            out.append(f'<span class="ws">{_VISIBLE[char]}</span>')
        elif _CONTROL.match(char):
            out.append(f'<span class="ws">\\x{ord(char):02x}</span>')
        else:
            out.append(esc(char))
    return "".join(out)


def prob(logprob: float | None) -> float:
    """exp(logprob), 0 for a masked (None or -inf) token."""
    if logprob is None or math.isinf(logprob) or math.isnan(logprob):
        return 0.0
    return math.exp(min(logprob, 0.0))


def colour(p: float) -> str:
    """Red (unlikely) through yellow to green (certain); pale, so dark text stays readable."""
    hue = round(max(0.0, min(1.0, p)) * 120)
    return f"hsl({hue}, 80%, 82%)"


def pct(p: float) -> str:
    return f"{p * 100:.1f}%"


def box(kind: str, text: str, *, elem_class: str = "") -> str:
    """A coloured status box: kind is ok, bad, warn or muted; text is escaped here."""
    return f'<div class="pg-box pg-{kind} {elem_class}">{esc(text)}</div>'


def error_box(message: str) -> str:
    """How a PlaygroundError reaches the user: a red box with its message, never a traceback."""
    return f'<div class="pg-box pg-bad pg-error" role="alert"><b>Error:</b> {esc(message)}</div>'


# How the engines (and the verdict) read each kind: Rust regex syntax, Unicode classes by default.
DIALECT_NOTES = {
    "regex": "Rust regex syntax: \\d, \\w and . match any Unicode digit, word character or character "
    "(\\d admits digits like ٣ or 🯳); write [0-9], [A-Za-z] for ASCII. No look-around or backreferences.",
    "grammar": "Lark (start: ...) or llama.cpp GBNF (root ::= ...); regexes inside use Rust syntax.",
}


def constraint_status(kind: str, message: str | None) -> str:
    """The line under the constraint editor: what is wrong, or that the text is ready; how the kind is read."""
    if kind in ("none", "processor"):
        return ""
    note = f'<div class="pg-muted pg-dialect">{esc(DIALECT_NOTES[kind])}</div>' if kind in DIALECT_NOTES else ""
    if message:
        return box("bad", f"✗ {message}", elem_class="pg-constraint-bad") + note
    return box("ok", "✓ constraint is valid", elem_class="pg-constraint-ok") + note


# --- tokens --------------------------------------------------------------------------------------


def _alternatives(token: GeneratedToken) -> str:
    """The popover table: top alternatives under the raw model and under the constraint."""
    raw = token.raw_top_tokens
    con = [t for t in token.top_tokens if prob(t.logprob) > 0.0]
    allowed = {t.id for t in con}
    rows = []
    for rank in range(max(len(raw), len(con))):
        cells = []
        for column, tokens in (("raw", raw), ("con", con)):
            if rank >= len(tokens):
                cells.append("<td></td><td></td>")
                continue
            alt = tokens[rank]
            classes = ["alt"]
            if alt.id == token.id:
                classes.append("chosen")
            if column == "raw" and allowed and alt.id not in allowed:
                classes.append("masked")
            text_cell = f'<td class="{" ".join(classes)}">{token_label(alt.text)}</td>'
            cells.append(f'{text_cell}<td class="num">{pct(prob(alt.logprob))}</td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    header = '<tr><th colspan="2">raw model</th><th colspan="2">under the constraint</th></tr>'
    return f'<table class="alts">{header}{"".join(rows)}</table>'


def _popover(token: GeneratedToken) -> str:
    mass = "—" if token.mass_kept is None else pct(token.mass_kept)
    lines = [
        f'<div class="pop-head">{token_label(token.text)} <span class="muted">id {token.id}</span></div>',
        f"<div>p = {pct(prob(token.logprob))} · raw p = {pct(prob(token.raw_logprob))} · mass kept {mass}</div>",
    ]
    if token.overridden:
        first = token.raw_top_tokens[0]
        lines.append(
            f'<div class="override">the model wanted {token_label(first.text)} ({pct(prob(first.logprob))}); '
            "the constraint did not allow it</div>"
        )
    if token.raw_top_tokens or token.top_tokens:
        lines.append(_alternatives(token))
    return f'<span class="pop" role="tooltip">{"".join(lines)}</span>'


def token_span(index: int, token: GeneratedToken, mode: str, popover: bool = True) -> str:
    """One token: coloured by its probability (raw or constrained), with its popover nested inside."""
    p = prob(token.raw_logprob if mode == "raw" else token.logprob)
    classes = ["tok"]
    if token.overridden:
        classes.append("overridden")
    if token.special:
        classes.append("special")
    if token.forced:
        classes.append("forced")
    newline = "<br>" if token.text.endswith("\n") else ""
    return (
        f'<span class="{" ".join(classes)}" data-index="{index}" tabindex="0" style="background:{colour(p)}">'
        f"{token_label(token.text)}{_popover(token) if popover else ''}</span>{newline}"
    )


def tokens_html(tokens: list[GeneratedToken], mode: str = "constrained", *, popovers: bool = True) -> str:
    """The answer as coloured tokens; `mode` picks raw or constrained probabilities for the colour.

    While streaming, popovers are left out: each update resends the whole panel.
    """
    if not tokens:
        return '<div class="pg-tokens pg-empty">No answer yet.</div>'
    spans = "".join(token_span(i, tok, mode, popovers) for i, tok in enumerate(tokens))
    overridden = sum(1 for tok in tokens if tok.overridden)
    forced = sum(1 for tok in tokens if tok.forced)
    legend = (
        f'<div class="legend">colour: {esc(mode)} probability '
        '<span class="sw" style="background:hsl(0, 80%, 82%)">low</span>'
        '<span class="sw" style="background:hsl(60, 80%, 82%)">mid</span>'
        '<span class="sw" style="background:hsl(120, 80%, 82%)">high</span>'
        f' · <span class="tok overridden legend-tok">outlined</span> = constraint overrode the model ({overridden})'
        f' · <span class="tok forced legend-tok">dotted</span> = forced by the constraint, not sampled ({forced})'
        " · hover a token for alternatives, click it for the next-token chart</div>"
    )
    return f'<div class="pg-tokens" data-mode="{esc(mode)}">{legend}<div class="tok-line">{spans}</div></div>'


# --- details and verdict -------------------------------------------------------------------------


def details_html(result: GenerationResult) -> str:
    """Finish reason, counts, seed and timings of the chosen sequence."""
    best, timings = result.best, result.timings
    finish = best.finish_reason + (f" ({best.stop_sequence!r})" if best.stop_sequence else "")
    items = [
        ("finish reason", finish),
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
    cells = "".join(f'<span class="kv"><b>{esc(k)}</b> {esc(v)}</span>' for k, v in items)
    return f'<div class="pg-details" data-finish="{esc(best.finish_reason)}">{cells}</div>'


def validation_html(sequence: Sequence, constraint_kind: str) -> str:
    """The verdict: green when valid, red when invalid or when the provider did not enforce it."""
    verdict = sequence.validation
    if not verdict.enforced:
        state, text = "bad", f"⚠ not enforced by the provider — {verdict.message or 'output checked after the fact'}"
        if verdict.valid is False:
            text += " (output is INVALID)"
    elif verdict.valid is True:
        state, text = "ok", f"✓ valid ({constraint_kind}): {verdict.message}"
    elif verdict.valid is False:
        state, text = "bad", f"✗ invalid ({constraint_kind}): {verdict.message}"
    else:
        state, text = "muted", verdict.message or "no constraint — nothing to validate"
    attr = {True: "valid", False: "invalid", None: "none"}[verdict.valid]
    return f'<div class="pg-box pg-{state} pg-verdict" data-valid="{attr}">{esc(text)}</div>'


# --- best-of -------------------------------------------------------------------------------------


def candidates(result: GenerationResult) -> list[tuple[bool, Sequence]]:
    """Every candidate, best first, each flagged whether it is the chosen one."""
    others = sorted(result.best_of_sequences, key=lambda s: s.total_logprob, reverse=True)
    return [(True, result.best)] + [(False, seq) for seq in others]


def bestof_html(result: GenerationResult) -> str:
    """One row per candidate: text, total logprob, finish reason, seed and verdict; the chosen one marked."""
    rows = []
    for number, (chosen, seq) in enumerate(candidates(result), start=1):
        valid = {True: "✓ valid", False: "✗ invalid", None: "—"}[seq.validation.valid]
        rows.append(
            f'<tr class="cand{" chosen" if chosen else ""}">'
            f"<td>{'★ ' if chosen else ''}{number}</td>"
            f'<td class="cand-text"><pre>{esc(seq.generated_text)}</pre></td>'
            f'<td class="num">{seq.total_logprob:.3f}</td><td>{esc(seq.finish_reason)}</td>'
            f"<td>{'—' if seq.seed is None else seq.seed}</td>"
            f'<td title="{esc(seq.validation.message)}">{valid}</td></tr>'
        )
    head = "<tr><th>#</th><th>text</th><th>total logprob</th><th>finish</th><th>seed</th><th>valid</th></tr>"
    note = "" if len(rows) > 1 else '<div class="muted">Set best_of &gt; 1 (with sampling) to compare candidates.</div>'
    return f'<div class="pg-bestof"><table>{head}{"".join(rows)}</table>{note}</div>'


# --- next-token chart ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    """One row of the next-token chart."""

    text: str
    raw: float
    constrained: float
    allowed: bool


def chart_rows(dist: NextTokenDistribution, limit: int = 12) -> list[Bar]:
    """The candidates to draw, most likely first under either distribution."""
    bars = [Bar(c.text, prob(c.raw_logprob), prob(c.logprob) if c.allowed else 0.0, c.allowed) for c in dist.candidates]
    bars.sort(key=lambda b: max(b.raw, b.constrained), reverse=True)
    return bars[:limit]


def next_token_html(dist: NextTokenDistribution, where: str) -> str:
    """A horizontal bar chart, raw (grey) against constrained (green), with the mass the constraint kept."""
    rows = []
    for bar in chart_rows(dist):
        rows.append(
            f'<div class="bar-row{"" if bar.allowed else " masked"}">'
            f'<span class="bar-label">{token_label(bar.text)}</span>'
            f'<span class="bars"><span class="bar raw" style="width:{bar.raw * 100:.1f}%"></span>'
            f'<span class="bar con" style="width:{bar.constrained * 100:.1f}%"></span></span>'
            f'<span class="num">{pct(bar.raw)} → {pct(bar.constrained)}</span></div>'
        )
    summary = (
        f"{esc(where)} · constraint keeps {pct(dist.mass_kept)} of the model's probability mass · "
        f"{dist.allowed_count} of {dist.vocab_size} tokens allowed"
    )
    legend = '<span class="sw raw">raw model</span><span class="sw con">under the constraint</span>'
    return f'<div class="pg-chart"><div class="legend">{summary} {legend}</div>{"".join(rows)}</div>'
