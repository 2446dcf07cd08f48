"""What a turn the user stopped shows: its tokens so far, a details line and a verdict on the partial text."""

from __future__ import annotations

from playground.constraints import Constraint
from playground.render.panels import STOPPED, stopped_details_html, stopped_verdict_html
from playground.types import GeneratedToken, GenerateParameters


def answer_text(tokens: list[GeneratedToken]) -> str:
    """The answer's text from its tokens (special tokens are not part of it)."""
    return "".join(token.text for token in tokens if not token.special)


def details_html(model: str, tokens: list[GeneratedToken]) -> str:
    """The details line of a stopped turn, in the shape of a finished one."""
    return stopped_details_html(model, len(tokens))


def verdict_html(params: GenerateParameters, tokens: list[GeneratedToken]) -> str:
    """Amber, never green: the answer is unfinished; says whether the partial text already fits."""
    head = f"■ {STOPPED} after {len(tokens)} tokens"
    if params.grammar is None:
        text, valid = f"{head} — no constraint to check", None
    else:
        verdict = Constraint.from_grammar(params.grammar).validate(answer_text(tokens))
        word = {True: "✓ already valid", False: "✗ not valid (yet)", None: "not checked"}[verdict.valid]
        text, valid = f"{head} — the partial answer is {word} ({params.grammar.type}): {verdict.message}", verdict.valid
    return stopped_verdict_html(text, valid)
