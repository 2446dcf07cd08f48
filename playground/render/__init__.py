"""Results -> safe HTML for every Python surface: the Gradio UI's panels and the notebook widgets' static HTML.

Imports no UI toolkit. One palette, one wording, one best-of order and one handling of a missing
probability (grey, never 0); every piece of model or user text goes through `esc` or `token_label`.
"""

from playground.render.chart import NEXT_TOKEN_EMPTY, Bar, chart_rows, next_token_html
from playground.render.core import (
    UNKNOWN,
    box,
    candidates,
    code_spans,
    colour,
    error_box,
    error_text,
    esc,
    finish_text,
    kv_cells,
    pct,
    prob,
    quoted,
    token_label,
    verdict,
)
from playground.render.panels import side_html
from playground.render.results import (
    DIALECT_NOTES,
    STYLESHEET,
    bestof_html,
    constraint_status,
    details_html,
    page,
    result_html,
    validation_html,
)
from playground.render.score import EVAL_EMPTY, SCORE_EMPTY, evaluation_html, score_html
from playground.render.tokens import token_span, tokens_html

__all__ = [
    "DIALECT_NOTES",
    "EVAL_EMPTY",
    "NEXT_TOKEN_EMPTY",
    "SCORE_EMPTY",
    "STYLESHEET",
    "UNKNOWN",
    "Bar",
    "bestof_html",
    "box",
    "candidates",
    "chart_rows",
    "code_spans",
    "colour",
    "constraint_status",
    "details_html",
    "error_box",
    "error_text",
    "evaluation_html",
    "esc",
    "finish_text",
    "kv_cells",
    "next_token_html",
    "page",
    "pct",
    "prob",
    "quoted",
    "result_html",
    "score_html",
    "side_html",
    "token_label",
    "token_span",
    "tokens_html",
    "validation_html",
    "verdict",
]
