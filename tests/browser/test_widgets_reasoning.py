"""TokenView marks a thinking model's turn as the token panel does: reasoning tokens, the token where the
constraint engaged, and the reasoning's line in the summary."""

from __future__ import annotations

import math

from playground.types import GeneratedToken, GenerationResult, ReasoningSpan, Sequence, Validation, segment_figures
from tests.browser.test_widgets_esm import _mount, harness_url  # noqa: F401 (fixture)
from widgets.token_view import result_payload


def _thinking_result() -> GenerationResult:
    def token(i: int, text: str, segment: str, *, forced: bool = False) -> GeneratedToken:
        return GeneratedToken(
            id=i, text=text, logprob=math.log(0.5), raw_logprob=math.log(0.5), forced=forced, segment=segment
        )

    tokens = [
        token(1, "<think>", "reasoning", forced=True),
        token(2, "<b>hmm</b>", "reasoning"),
        token(3, "</think>", "reasoning", forced=True),
        token(4, "yes", "answer"),
    ]
    span = ReasoningSpan(
        text="<b>hmm</b>",
        tokens=3,
        answer_token=3,
        answer_char=len("<think><b>hmm</b></think>"),
        ended_by="budget",
        delimiters=("<think>", "</think>"),
        figures=segment_figures(tokens),
    )
    best = Sequence(
        generated_text="<think><b>hmm</b></think>yes",
        finish_reason="eos_token",
        generated_tokens=4,
        tokens=tokens,
        validation=Validation(valid=True, message="full match"),
        reasoning=span,
    )
    return GenerationResult(model_id="m", prompt="p", input_length=1, best=best, constraint_kind="choice")


def test_token_view_marks_reasoning_and_the_engaged_token(page, harness_url: str) -> None:  # noqa: F811
    state = {"result": result_payload(_thinking_result()), "colour_by": "constrained", "selected": -1}
    _mount(page, harness_url, "token_view", state)
    tokens = page.locator("#mount .sp-token")
    classes = [tokens.nth(i).get_attribute("class").split() for i in range(tokens.count())]
    assert ["sp-reasoning" in c for c in classes] == [True, True, True, False]
    assert tokens.nth(1).text_content() == "<b>hmm</b>" and page.locator("#mount .sp-tokens b").count() == 0
    # the marker sits right before the answer's first token
    assert page.evaluate("document.querySelector('#mount .sp-engaged').nextElementSibling.dataset.index") == "3"
    summary = page.locator("#mount .sp-summary").inner_text()
    assert "3 tokens, ended by budget; constraint engaged at token 3" in summary
