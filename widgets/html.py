"""Static HTML for a generation result, for notebooks and viewers where widget JavaScript doesn't run.

Every piece of token text goes through `html.escape`: tokens are arbitrary bytes and `<script>` is a
valid token. Colours are inline styles so the output survives renderers that drop <style> blocks.
"""

from __future__ import annotations

import html
import math
from typing import Any, Literal

from playground.types import GeneratedToken, GenerationResult, Sequence, Token, Validation

ColourBy = Literal["constrained", "raw"]


def probability(logprob: float | None) -> float | None:
    """exp(logprob), or None where the engine reported nothing."""
    return None if logprob is None else math.exp(logprob)


def colour(p: float | None) -> str:
    """Red for unlikely through yellow to green for certain; grey when unknown."""
    if p is None:
        return "hsl(0, 0%, 90%)"
    return f"hsl({round(120 * max(0.0, min(1.0, p)))}, 75%, 82%)"


def percent(p: float | None) -> str:
    """A probability as a short percentage, '-' when unknown."""
    return "-" if p is None else f"{100 * p:.1f}%"


def visible(text: str) -> str:
    """Make whitespace-only and empty tokens visible; newlines keep their line break."""
    if text == "":
        return "\u2205"
    return text.replace("\n", "\u21b5\n").replace("\t", "\u21e5")


def _alternatives(tokens: list[Token]) -> str:
    """One line per alternative: its text and probability."""
    return "\n".join(f"  {t.text!r} {percent(probability(t.logprob))}" for t in tokens) or "  (none)"


def token_title(token: GeneratedToken) -> str:
    """The hover text of one token: probabilities, the mass kept and the alternatives under both."""
    lines = [
        f"{token.text!r}  constrained {percent(probability(token.logprob))}"
        f"  raw {percent(probability(token.raw_logprob))}  mass kept {percent(token.mass_kept)}",
    ]
    if token.overridden:
        lines.append("the constraint overrode the model's first choice")
    lines += ["raw top:", _alternatives(token.raw_top_tokens), "constrained top:", _alternatives(token.top_tokens)]
    return "\n".join(lines)


def render_tokens(sequence: Sequence, colour_by: ColourBy = "constrained") -> str:
    """The sequence's tokens as coloured spans with their alternatives as the hover title."""
    spans = []
    for index, token in enumerate(sequence.tokens):
        p = probability(token.raw_logprob if colour_by == "raw" else token.logprob)
        classes = "sp-token sp-overridden" if token.overridden else "sp-token"
        classes += " sp-forced" if token.forced else ""
        border = "border-bottom:2px solid #c62828;" if token.overridden else ""
        spans.append(
            f'<span class="{classes}" data-index="{index}" title="{html.escape(token_title(token))}" '
            f'style="background:{colour(p)};{border}white-space:pre-wrap;padding:0 1px;">'
            f"{html.escape(visible(token.text))}</span>"
        )
    return f'<div class="sp-tokens" style="font-family:monospace;line-height:1.8;">{"".join(spans)}</div>'


def verdict(validation: Validation) -> tuple[str, str]:
    """A short verdict and its colour; a constraint a provider did not enforce is always red."""
    if not validation.enforced:
        return f"not enforced by the provider {validation.message}".strip(), "#c62828"
    if validation.valid is None:
        return "no constraint to check", "#555"
    if validation.valid:
        return "valid", "#2e7d32"
    return f"invalid: {validation.message}", "#c62828"


def finish_text(sequence: Sequence) -> str:
    """The finish reason, with the stop sequence that ended it."""
    if sequence.finish_reason == "stop_sequence" and sequence.stop_sequence is not None:
        return f"stop_sequence ({sequence.stop_sequence!r})"
    return sequence.finish_reason


def candidates(result: GenerationResult) -> list[Sequence]:
    """The chosen sequence first, then the other best_of candidates."""
    return [result.best, *result.best_of_sequences]


def render_candidates(result: GenerationResult) -> str:
    """A table of every best_of candidate with the chosen one marked; empty for a single sequence."""
    if not result.best_of_sequences:
        return ""
    rows = []
    for index, seq in enumerate(candidates(result)):
        text, tint = verdict(seq.validation)
        mark = "chosen" if index == 0 else ""
        rows.append(
            f"<tr><td>{mark}</td><td style='white-space:pre-wrap;font-family:monospace;'>"
            f"{html.escape(seq.generated_text)}</td><td>{seq.total_logprob:.3f}</td>"
            f"<td>{html.escape(finish_text(seq))}</td><td>{'' if seq.seed is None else seq.seed}</td>"
            f"<td style='color:{tint}'>{html.escape(text)}</td></tr>"
        )
    head = "<tr><th></th><th>text</th><th>total logprob</th><th>finish</th><th>seed</th><th>verdict</th></tr>"
    return f'<table class="sp-candidates">{head}{"".join(rows)}</table>'


def render_result(result: GenerationResult | dict[str, Any], colour_by: ColourBy = "constrained") -> str:
    """The whole result as one self-contained HTML fragment."""
    if isinstance(result, dict):
        result = GenerationResult.model_validate(result)
    text, tint = verdict(result.best.validation)
    overridden = sum(token.overridden for token in result.best.tokens)
    summary = (
        f"<div class='sp-summary'>model <b>{html.escape(result.model_id)}</b> via "
        f"{html.escape(result.provider_id)} &middot; constraint {html.escape(result.constraint_kind)} &middot; "
        f"finish <b class='sp-finish'>{html.escape(finish_text(result.best))}</b> &middot; "
        f"{result.best.generated_tokens} tokens &middot; {overridden} overridden &middot; "
        f"{result.timings.tokens_per_s:.1f} tokens/s &middot; "
        f"<span class='sp-verdict' style='color:{tint}'>{html.escape(text)}</span></div>"
    )
    legend = (
        f"<div style='color:#555;font-size:smaller'>colour: {html.escape(colour_by)} probability; "
        "<span class='sp-forced'>dotted</span> = forced by the constraint, not sampled; hover a token</div>"
    )
    return f'<div class="sp-result">{summary}{legend}{render_tokens(result.best, colour_by)}{render_candidates(result)}</div>'


def render_error(message: str) -> str:
    """An error message in red, escaped."""
    return f'<div class="sp-error" style="color:#c62828">{html.escape(message)}</div>'
