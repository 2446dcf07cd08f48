"""The constraint debugger's panels: confidence per field, why tokens were refused, branches, and an instance
check worded once for the UI and the Playground widget."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from playground.render.core import box, code_spans, colour, esc, pct, prob, quoted, token_label
from playground.render.results import validation_html
from playground.render.tokens import tokens_html
from playground.types import FieldConfidence, GenerationResult, Sequence

if TYPE_CHECKING:  # the debugger's types; importing them at run time would load the decoding stack
    from playground.debug.check import CheckResult, RefusedToken
    from playground.debug.why import TokenReason

REASONS_EMPTY = '<div class="pg-reasons pg-empty">Click a token to see why the alternatives were refused.</div>'
FIELDS_EMPTY = '<div class="pg-fields pg-empty">Confidence per field appears for JSON schema answers.</div>'
BRANCH_EMPTY = '<div class="pg-branch pg-empty">Click a token, then continue from there.</div>'


def fields_html(fields: list[FieldConfidence] | None) -> str:
    """One row per JSON value of the answer: model probability (min, product), mass kept, overrides, forced."""
    if not fields:
        return FIELDS_EMPTY
    rows = "".join(
        f'<tr data-path="{esc(f.path)}"><td><code>{esc(f.path)}</code></td>'
        f'<td class="cand-text"><pre>{esc(json.dumps(f.value, ensure_ascii=False))}</pre></td>'
        f'<td class="num" style="background:{colour(f.prob_min)}">{esc(pct(f.prob_min))}</td>'
        f'<td class="num">{esc(pct(f.prob_product))}</td>'
        f'<td class="num">{"—" if f.mass_kept_min is None else esc(pct(f.mass_kept_min))}</td>'
        f'<td>{"⚠ yes" if f.overridden else "no"}</td><td class="num">{f.forced}/{f.tokens}</td></tr>'
        for f in fields
    )
    head = (
        "<tr><th>field</th><th>value</th><th>model p (min token)</th><th>model p (value)</th>"
        "<th>mass kept (min)</th><th>overridden</th><th>forced/tokens</th></tr>"
    )
    return f'<div class="pg-fields"><table>{head}{rows}</table></div>'


def reason_html(reason: str) -> str:
    """A reason with its `quoted` parts as code, everything escaped."""
    return code_spans(esc(reason))


# A refused token the model gave less than this (0.0% on screen) did not matter: it is counted, not listed.
MATTERS = 0.0005


def reasons_html(where: str, reasons: list[TokenReason], raw: dict[int, float | None]) -> str:
    """Each candidate at a position that mattered: its text, the raw model's probability (`raw` logprobs by
    id; unknown ones are listed) and why; then how many refused tokens the model hardly wanted."""
    shown = [r for r in reasons if r.allowed or r.id not in raw or (prob(raw[r.id]) or 0.0) >= MATTERS]
    rows = "".join(
        f'<tr class="{"ok" if r.allowed else "refused"}"><td>{token_label(r.text)}</td>'
        f'<td class="num">{esc(pct(prob(raw[r.id]))) if r.id in raw else "—"}</td>'
        f'<td class="reason">{reason_html(r.reason)}</td></tr>'
        for r in shown
    )
    head = "<tr><th>token</th><th>model p</th><th>why</th></tr>"
    rest = len(reasons) - len(shown)
    # (of the candidates examined, the model's likeliest: the vocabulary's other refused tokens are not counted)
    note = f'<div class="muted">and {rest} more of its likeliest tokens refused, each under 0.05%</div>' if rest else ""
    return f'<div class="pg-reasons"><div class="legend">{esc(where)}</div><table>{head}{rows}</table>{note}</div>'


def refusal_text(refused: RefusedToken, tokens: int) -> str:
    """The first token (or the end of text, at position `tokens`) the masks refuse, and why."""
    where = "the end of text" if refused.position == tokens else f"token {refused.position} {quoted(refused.text)}"
    return f"✗ {where} refused: {refused.reason}"


def check_lines(result: CheckResult) -> list[tuple[str, str]]:
    """(state, text) of each line of an instance check: the masks' walk, the final verdict, any disagreement."""
    if result.first_refused is None:
        count = len(result.tokens)
        walk = (
            "ok",
            f"✓ accepted by the masks of {result.constraint_engine} ({count} token{'' if count == 1 else 's'})",
        )
    else:
        walk = ("bad", refusal_text(result.first_refused, len(result.tokens)))
    valid = result.validation.valid
    lines = [
        walk,
        ("ok" if valid else "bad" if valid is False else "muted", f"final verdict: {result.validation.message}"),
    ]
    if not result.agree:
        lines.append(("warn", "⚠ the masks and the final verdict disagree"))
    return lines


def check_summary(result: CheckResult) -> str:
    """The instance check on one line (the Playground widget's)."""
    return " · ".join(text for _, text in check_lines(result))


def check_html(result: CheckResult, text: str) -> str:
    """The instance check as boxes, then the text with the refused part marked."""
    boxes = "".join(box(state, line) for state, line in check_lines(result))
    refused = result.first_refused
    if refused is None:
        shown = esc(text)
    else:
        at = refused.offset
        shown = f'{esc(text[:at])}<mark class="refused">{esc(text[at:] or "⏎ end")}</mark>'
    accepted = str(result.accepted).lower()
    return f'<div class="pg-check" data-accepted="{accepted}">{boxes}<pre>{shown}</pre></div>'


def branch_html(result: GenerationResult, mode: str, kept: str = "", forced: str | None = None) -> str:
    """An answer (the original, or a branch: the kept prefix, the forced text, then the continuation's
    tokens), with its verdict and total logprob."""
    seq = result.best
    body = tokens_html(seq.tokens, mode)
    if forced is not None:
        mark = f'<mark class="forced" title="forced through the constraint">{esc(forced)}</mark>'
        body = f'<pre class="answer">{esc(kept)}{mark}{esc(seq.generated_text)}</pre>' + body
    return _branch_view(body, seq, result.constraint_kind, branched=forced is not None)


def _branch_view(body: str, seq: Sequence, kind: str, *, branched: bool = False) -> str:
    """`branched`: the figures are the continuation's only (beside the whole original's, it would look likelier)."""
    figures = f"total logprob {seq.total_logprob:.3f} · {seq.generated_tokens} tokens"
    if branched:
        figures = f"continuation's {figures} (the kept and forced text not counted)"
    total = f'<div class="legend">{figures}</div>'
    return f'<div class="pg-branch">{body}{validation_html(seq, kind)}{total}</div>'
