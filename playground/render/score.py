"""Charts first, numbers second: the alternatives of a score, and an evaluation's mass kept and refusal reasons.

They read the JSON shapes /score and /evaluate answer (dicts), so the UI and the widget draw the same thing;
every text from a model or a user is escaped.
"""

from __future__ import annotations

import math
from typing import Any

from playground.render.core import esc, pct, token_label

SCORE_EMPTY = (
    '<div class="pg-chart pg-empty">A choice or an enum turn ranks its answers here; '
    "a small regex or grammar, on demand.</div>"
)
EVAL_EMPTY = '<div class="pg-chart pg-empty">Paste prompts and run the evaluation.</div>'
MAX_REASON_BARS = 12


def _bar_row(label: str, raw: float | None, constrained: float, number: str, *, bad: bool = False) -> str:
    raw_bar = f'<span class="bar raw" style="width:{raw * 100:.1f}%"></span>' if raw is not None else ""
    return (
        f'<div class="bar-row{" masked" if bad else ""}"><span class="bar-label">{label}</span>'
        f'<span class="bars">{raw_bar}<span class="bar con" style="width:{constrained * 100:.1f}%"></span></span>'
        f'<span class="num">{esc(number)}</span></div>'
    )


def score_html(result: dict[str, Any]) -> str:
    """A ranked bar chart: each alternative's share under the constraint (green) and the model's own (grey)."""
    rows = []
    for alt in result["alternatives"]:
        raw = math.exp(min(alt["raw_logprob"], 0.0))
        number = f"{pct(alt['probability'])} (model {pct(raw)})"
        rows.append(_bar_row(token_label(alt["text"]), raw, alt["probability"], number))
    methods = sorted({alt["method"] for alt in result["alternatives"]})
    heading = (
        f"{len(result['alternatives'])} answers ({result['source']}) · ranked by probability under the constraint"
        f" · tokenizations: {', '.join(methods)}"
    )
    legend = '<span class="sw raw">raw model</span><span class="sw con">under the constraint</span>'
    return f'<div class="pg-chart pg-score"><div class="legend">{esc(heading)} {legend}</div>{"".join(rows)}</div>'


def evaluation_html(summary: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Mass kept per prompt (red where the answer failed its check), the refusal-reason histogram, the figures."""
    kept = [
        _bar_row(
            f"#{row['index']}",
            None,
            row.get("mass_kept_mean") or 0.0,
            f"{pct(row.get('mass_kept_mean'))} · {_verdict(row)}",  # (_bar_row escapes it)
            bad=row.get("valid") is False or bool(row.get("error")),  # (unchecked, with no constraint, did not fail)
        )
        for row in sorted(rows, key=lambda r: r["index"])
    ]
    reasons = summary.get("refusal_reasons") or {}
    top = max(reasons.values(), default=1)
    histogram = [
        _bar_row(esc(reason), None, count / top, str(count))
        for reason, count in list(reasons.items())[:MAX_REASON_BARS]
    ]
    figures = _figures(summary)
    return (
        f'<div class="pg-eval"><div class="pg-eval-figures">{figures}</div>'
        f'<div class="pg-chart"><div class="legend">Mass kept per prompt (mean over its tokens)</div>{"".join(kept)}</div>'
        f'<div class="pg-chart"><div class="legend">First-refusal reasons ({sum(reasons.values())} rows)</div>'
        f"{''.join(histogram) or '<div>no refusal: the model always wanted an allowed token</div>'}</div></div>"
    )


def _verdict(row: dict[str, Any]) -> str:
    if row.get("error"):
        return "error"
    return {True: "valid", False: "invalid"}.get(row.get("valid"), "unchecked")


def _figures(summary: dict[str, Any]) -> str:
    """The summary's numbers as labelled cells."""

    def num(key: str, fmt: str = "{:.2f}") -> str:
        value = summary.get(key)
        return "—" if value is None else fmt.format(value)

    items = [
        ("rows", f"{summary['rows']} of {summary['total']}" + (" (cancelled)" if summary.get("cancelled") else "")),
        ("valid", pct(summary.get("valid_rate"))),
        ("agreement", pct(summary.get("agreement"))),
        ("mass kept mean / min", f"{pct(summary.get('mass_kept_mean'))} / {pct(summary.get('mass_kept_min'))}"),
        ("forced share", pct(summary.get("forced_share"))),
        ("overrides", str(summary.get("override_count", 0))),
        ("time to first token", num("mean_time_to_first_token_s", "{:.2f} s")),
        ("tokens/s", num("tokens_per_s", "{:.1f}")),
        ("finish reasons", ", ".join(f"{k} {v}" for k, v in (summary.get("finish_reasons") or {}).items())),
    ]
    return "".join(f'<span class="pg-fig"><b>{esc(k)}</b> {esc(v)}</span>' for k, v in items)
