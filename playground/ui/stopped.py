"""What a turn cut short shows: its tokens so far, a details line and a verdict on the partial text.

Cut short by the user (Stop: an amber verdict), or by the engine: the text broke a schema keyword the engine
does not enforce and its mask allowed nothing but the end (a red verdict and the engine's message).
"""

from __future__ import annotations

from playground.constraints import Constraint
from playground.render.core import box
from playground.render.panels import STOPPED, stopped_details_html, stopped_verdict_html
from playground.render.results import verdict_html as judged_html
from playground.types import GeneratedToken, GenerateParameters


def answer_text(tokens: list[GeneratedToken]) -> str:
    """The answer's text from its tokens (special tokens and a thinking model's reasoning are not part of it)."""
    return "".join(token.text for token in tokens if not token.special and token.segment != "reasoning")


def row_text(tokens: list[GeneratedToken]) -> str:
    """The row's text from its tokens, a thinking model's reasoning and its delimiters included."""
    return "".join(token.text for token in tokens if not token.special or token.segment == "reasoning")


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


# The finish reason of an answer the engine ended because it had broken the schema (UnenforcedKeywordError).
UNENFORCED = "ended: the text broke a keyword the engine does not enforce"


def unenforced_details_html(model: str, tokens: list[GeneratedToken], message: str) -> str:
    """The details line of an answer the engine had to end, with the engine's message as a note."""
    details = stopped_details_html(model, len(tokens), finish=UNENFORCED, attr="unenforced")
    return details + box("warn", message, elem_class="pg-unenforced")


def unenforced_verdict_html(params: GenerateParameters, tokens: list[GeneratedToken]) -> str:
    """Red: the verdict of the constraint on the text the engine could not finish validly."""
    kind = params.grammar.type if params.grammar is not None else "none"
    return judged_html(Constraint.from_grammar(params.grammar).validate(answer_text(tokens)), kind)
