"""Tokens coloured by probability, each with a popover of what the model wanted against what was allowed."""

from __future__ import annotations

from playground.render.core import colour, esc, pct, prob, token_label
from playground.types import GeneratedToken, segment_figures

LEGEND_SWATCHES = "".join(
    f'<span class="sw" style="background:{colour(p)}">{word}</span>'
    for p, word in ((0.0, "low"), (0.5, "mid"), (1.0, "high"), (None, "unknown"))
)


def _alternatives(token: GeneratedToken) -> str:
    """The popover table: top alternatives under the raw model and under the constraint."""
    raw = token.raw_top_tokens
    con = [t for t in token.top_tokens if (prob(t.logprob) or 0.0) > 0.0]
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
            cells.append(f'{text_cell}<td class="num">{esc(pct(prob(alt.logprob)))}</td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    header = '<tr><th colspan="2">raw model</th><th colspan="2">under the constraint</th></tr>'
    return f'<table class="alts">{header}{"".join(rows)}</table>'


def _popover(token: GeneratedToken) -> str:
    lines = [
        f'<div class="pop-head">{token_label(token.text)} <span class="muted">id {token.id}</span></div>',
        # p is what the token was drawn from (temperature, top-k and top-p applied), where the next-token chart's
        # constrained bars come before temperature: named, so the two never read as disagreeing
        f"<div>p = {esc(pct(prob(token.logprob)))} after the sampling settings · "
        f"raw p = {esc(pct(prob(token.raw_logprob)))} · "
        f"mass kept {esc(pct(token.mass_kept))}</div>",
    ]
    if token.overridden:
        first = token.raw_top_tokens[0]
        lines.append(
            f'<div class="override">the model wanted {token_label(first.text)} ({esc(pct(prob(first.logprob)))}); '
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
    if token.segment == "reasoning":
        classes.append("reasoning")
    newline = "<br>" if token.text.endswith("\n") else ""
    # a roving tab stop: only the first token is in the Tab order; the arrow keys move between tokens
    return (
        f'<span class="{" ".join(classes)}" data-index="{index}" tabindex="{0 if index == 0 else -1}" '
        f'style="background:{colour(p)}">'
        f"{token_label(token.text)}{_popover(token) if popover else ''}</span>{newline}"
    )


def tokens_html(tokens: list[GeneratedToken], mode: str = "constrained", *, popovers: bool = True) -> str:
    """The answer as coloured tokens; `mode` picks raw or constrained probabilities for the colour.

    While streaming, popovers are left out: each update resends the whole panel.
    """
    if not tokens:
        return '<div class="pg-tokens pg-empty">No answer yet.</div>'
    engaged = next((i for i, tok in enumerate(tokens) if tok.segment == "answer"), None)
    spans = "".join(
        (ENGAGED if i == engaged else "") + token_span(i, tok, mode, popovers) for i, tok in enumerate(tokens)
    )
    overridden = sum(1 for tok in tokens if tok.overridden)
    forced = sum(1 for tok in tokens if tok.forced)
    reasoning = sum(1 for tok in tokens if tok.segment == "reasoning")
    segmented = any(tok.segment is not None for tok in tokens)
    by = "the constraint or the reasoning's delimiters" if segmented else "the constraint"
    thinking = (
        f' · <span class="tok reasoning legend-tok">striped</span> = reasoning, unconstrained ({reasoning});'
        " ▸ marks where the constraint engaged"
        if segmented
        else ""
    )
    legend = (
        f'<div class="legend">colour: {esc(mode)} probability {LEGEND_SWATCHES}'
        f' · <span class="tok overridden legend-tok">outlined</span> = constraint overrode the model ({overridden})'
        f' · <span class="tok forced legend-tok">dotted</span> = forced by {by}, not sampled ({forced}){thinking}'
        " · hover a token for alternatives, click it for the next-token chart</div>"
    )
    line = '<div class="tok-line" role="group" aria-label="answer tokens: arrow keys move, Enter pins, Escape unpins">'
    return f'<div class="pg-tokens" data-mode="{esc(mode)}">{legend}{segments_html(tokens)}{line}{spans}</div></div>'


ENGAGED = '<span class="engaged" title="the constraint engaged here: the answer begins">▸</span>'


def segments_html(tokens: list[GeneratedToken]) -> str:
    """A thinking model's turn: mass kept, overrides and forced tokens for the answer and the reasoning apart."""
    if not any(tok.segment is not None for tok in tokens):
        return ""
    cells = [
        f'<span class="segment-figures" data-segment="{segment}"><b>{segment}</b> {f.tokens} tokens · '
        f"mass kept {esc(pct(f.mass_kept_mean))} mean, {esc(pct(f.mass_kept_min))} min · "
        f"{f.overridden} overridden · {f.forced} forced</span>"
        for segment, f in segment_figures(tokens).items()
    ]
    return f'<div class="legend segments">{" · ".join(cells)}</div>'
