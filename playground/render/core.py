"""The shared vocabulary of every rendering: escaping, token labels, probability, palette and verdict wording.

The widgets' JavaScript (widgets/static/helpers.js) follows the same rules; tests compare the two.
"""

from __future__ import annotations

import html
import json
import math
import re
from decimal import ROUND_HALF_UP, Decimal

from playground.errors import PlaygroundError
from playground.types import GenerationResult, Sequence, Validation

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_VISIBLE = {" ": "·", "\t": "⇥", "\n": "↵"}
UNKNOWN = "hsl(0, 0%, 90%)"  # the colour of a probability nobody reported (grey, never "0%")


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


def prob(logprob: float | None) -> float | None:
    """exp(logprob); 0 for a masked (-inf) token; None where nothing was reported."""
    if logprob is None or math.isnan(logprob):
        return None
    return math.exp(min(logprob, 0.0))


def colour(p: float | None) -> str:
    """Red (unlikely) through yellow to green (certain), pale so dark text stays readable; grey when unknown."""
    if p is None:
        return UNKNOWN
    hue = math.floor(max(0.0, min(1.0, p)) * 120 + 0.5)  # JavaScript's Math.round, so both languages agree
    return f"hsl({hue}, 80%, 82%)"


def pct(p: float | None) -> str:
    """A probability as a percentage with one decimal (JavaScript's toFixed rounding), '—' when unknown; one above 0
    that one decimal would show as 0.0% is '<0.1%' (a ranked answer the model gave e^-10 read "model 0.0%")."""
    if p is None:
        return "—"
    shown = Decimal(p * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    return "<0.1%" if p > 0 and shown == 0 else f"{shown}%"


def quoted(text: str) -> str:
    """A string as JavaScript's JSON.stringify writes it: stop sequences and token texts in prose."""
    return json.dumps(text, ensure_ascii=False)


def box(kind: str, text: str, *, elem_class: str = "") -> str:
    """A coloured status box: kind is ok, bad, warn or muted; text is escaped here."""
    return f'<div class="pg-box pg-{kind} {elem_class}">{esc(text)}</div>'


def error_box(message: str) -> str:
    """How a PlaygroundError reaches the user: a red box with its message, never a traceback."""
    return f'<div class="pg-box pg-bad pg-error" role="alert"><b>Error:</b> {esc(message)}</div>'


def error_text(exc: BaseException) -> str:
    """A failure in the one wording every surface shows: a PlaygroundError by its own message, as the API's
    `error` says it (no class name), anything else as a model failure."""
    if isinstance(exc, PlaygroundError):
        return exc.message
    return f"model failure ({type(exc).__name__}): {exc}"


def code_spans(escaped: str) -> str:
    """`keyword` -> <code>keyword</code>, on text that is already escaped."""
    return re.sub(r"`([^`<>]*)`", r"<code>\1</code>", escaped)


def kv_cells(items: list[tuple[str, str]]) -> str:
    """Label-value pairs of a details line, escaped."""
    return "".join(f'<span class="kv"><b>{esc(k)}</b> {esc(v)}</span>' for k, v in items)


def verdict(validation: Validation, kind: str) -> tuple[str, str]:
    """(state, text) of a verdict: ok, bad or muted; a constraint the provider did not enforce is always bad."""
    if not validation.enforced:
        text = f"⚠ not enforced by the provider — {validation.message or 'output checked after the fact'}"
        return "bad", text + (" (output is INVALID)" if validation.valid is False else "")
    if validation.valid is True:
        return "ok", f"✓ valid ({kind}): {validation.message}"
    if validation.valid is False:
        return "bad", f"✗ invalid ({kind}): {validation.message}"
    return "muted", validation.message or "no constraint — nothing to validate"


def finish_text(sequence: Sequence) -> str:
    """The finish reason, with the stop sequence or the stop_token_ids token that ended it."""
    if sequence.stop_token is not None:
        return f"{sequence.finish_reason} (stop token {sequence.stop_token})"
    if sequence.stop_sequence is None:
        return sequence.finish_reason
    return f"{sequence.finish_reason} ({quoted(sequence.stop_sequence)})"


def candidates(result: GenerationResult) -> list[Sequence]:
    """Every best_of candidate: the chosen one first, then the others by total logprob, highest first."""
    return [result.best, *sorted(result.best_of_sequences, key=lambda s: s.total_logprob, reverse=True)]
