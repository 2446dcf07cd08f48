"""The next-token chart: what the model wanted against what the constraint allowed, one bar pair a token."""

from __future__ import annotations

from dataclasses import dataclass

from playground.render.core import esc, pct, prob, token_label
from playground.types import NextTokenDistribution

NEXT_TOKEN_EMPTY = '<div class="pg-chart pg-empty">Send a message to see the next-token distribution.</div>'


@dataclass(frozen=True)
class Bar:
    """One row of the next-token chart."""

    text: str
    raw: float
    constrained: float
    allowed: bool


def chart_rows(dist: NextTokenDistribution, limit: int = 12) -> list[Bar]:
    """The candidates to draw, most likely first under either distribution; a refused token keeps 0."""
    bars = [
        Bar(c.text, prob(c.raw_logprob) or 0.0, (prob(c.logprob) or 0.0) if c.allowed else 0.0, c.allowed)
        for c in dist.candidates
    ]
    bars.sort(key=lambda b: max(b.raw, b.constrained), reverse=True)
    return bars[:limit]


def chart_summary(dist: NextTokenDistribution, where: str) -> str:
    """The chart's heading line (plain text: the caller escapes it)."""
    counted = (
        f"{dist.allowed_count} of {dist.vocab_size} tokens allowed"
        if dist.allowed_count is not None and dist.vocab_size is not None
        else "the server does not say how many tokens are allowed"
    )
    return f"{where} · constraint keeps {pct(dist.mass_kept)} of the model's probability mass · {counted}"


def next_token_html(dist: NextTokenDistribution, where: str) -> str:
    """A horizontal bar chart, raw (grey) against constrained (green), with the mass the constraint kept."""
    rows = []
    for bar in chart_rows(dist):
        rows.append(
            f'<div class="bar-row{"" if bar.allowed else " masked"}">'
            f'<span class="bar-label">{token_label(bar.text)}</span>'
            f'<span class="bars"><span class="bar raw" style="width:{bar.raw * 100:.1f}%"></span>'
            f'<span class="bar con" style="width:{bar.constrained * 100:.1f}%"></span></span>'
            f'<span class="num">{esc(pct(bar.raw))} → {esc(pct(bar.constrained))}</span></div>'
        )
    legend = '<span class="sw raw">raw model</span><span class="sw con">under the constraint</span>'
    return f'<div class="pg-chart"><div class="legend">{esc(chart_summary(dist, where))} {legend}</div>{"".join(rows)}</div>'
