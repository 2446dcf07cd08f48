"""The debugger's UI handlers on the embedded model: check an instance, fields, reasons, branches."""

from __future__ import annotations

import json

import pytest

from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.ui import debugger, handlers
from playground.ui.state import ChatState, Form
from tests.support import PET_SCHEMA

PET = json.dumps(PET_SCHEMA)


@pytest.fixture
def registry(engine) -> Registry:
    return Registry([LocalProvider([engine])])


def pet_form(registry: Registry) -> Form:
    return Form(model=registry.default_model, kind="json_schema", constraint_text=PET, max_new_tokens=30)


def test_check_instance_marks_the_refused_token_escaped(registry: Registry) -> None:
    html = debugger.check_instance(registry, pet_form(registry), '{"kind": "<b>cow"}')
    assert 'data-accepted="false"' in html
    assert "kind must be one of `cat`, `dog`" in html
    assert "<b>cow" not in html and "&lt;b&gt;" in html
    ok = debugger.check_instance(registry, pet_form(registry), '{"kind": "cat", "name": "Tom"}')
    assert 'data-accepted="true"' in ok and "valid against the schema" in ok


def test_check_instance_without_a_constraint_says_so(registry: Registry) -> None:
    html = debugger.check_instance(registry, Form(model=registry.default_model), "anything")
    assert "pick a constraint first" in html


def test_turn_fields_reasons_and_a_branch(registry: Registry) -> None:
    state = ChatState()
    for _ in handlers.chat(registry, pet_form(registry), state, "A pet as JSON."):
        pass
    answer = json.loads(state.result.best.generated_text)
    fields = debugger.fields_html(state)
    assert all(f'data-path="{key}"' in fields for key in answer)
    # pin the token that starts the name's value and branch with another name
    text = state.result.best.generated_text
    start = text.index(answer["name"], text.index('"name"') + 6)
    at, index = 0, None
    for i, token in enumerate(state.tokens):
        if at >= start:
            index = i
            break
        at += len(token.text)
    branches, offered = debugger.pin(state, debugger.BranchState(), index)
    assert branches.pinned == index and isinstance(offered, str)
    reasons = debugger.reasons_html(registry, state, index)
    assert "end of text not allowed" in reasons
    branches, picker, panel = debugger.branch(registry, state, branches, "Zed")
    (made,) = branches.branches
    assert made.result.best.continued_from.endswith("Zed")
    full = made.result.best.continued_from + made.result.best.generated_text
    assert json.loads(full)["name"].startswith("Zed") and made.result.best.validation.valid
    assert picker["value"] == f"branch 1 at #{index}: 'Zed'"
    assert '<mark class="forced"' in panel
    assert "continuation's total logprob" in panel and "(the kept and forced text not counted)" in panel
    original = debugger.branch_html(state, branches, debugger.ORIGINAL)
    assert "✓ valid" in original and "continuation's" not in original  # the whole answer's figures


def test_branch_before_a_click_asks_for_one(registry: Registry) -> None:
    _, _, panel = debugger.branch(registry, ChatState(), debugger.BranchState(), "x")
    assert "click a token of the answer first" in panel


def test_tools_kind_answers_a_valid_call_with_token_insight(registry: Registry) -> None:
    from playground.constraints.examples import WEATHER_TOOLS

    state = ChatState()
    form = Form(model=registry.default_model, kind="tools", constraint_text=WEATHER_TOOLS, max_new_tokens=40)
    for _ in handlers.chat(registry, form, state, "What's the weather in Paris?"):
        pass
    call = json.loads(state.result.best.generated_text)
    assert call["name"] in {"get_weather", "get_time"} and isinstance(call["arguments"], dict)
    assert state.result.best.validation.valid is True and state.tokens
    assert "get_weather" in state.request.inputs[0].text()  # the tools are described to the model
    assert debugger.fields_html(state).count("<tr data-path=") >= 2


def test_tools_kind_errors_are_named(registry: Registry) -> None:
    from playground.ui import controls

    assert "invalid JSON in the tools" in controls.constraint_status("tools", "[{")
    assert "no tool named &#x27;x&#x27;" in controls.constraint_status(
        "tools",
        '{"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "x"}}}',
    )


def thinking_turn(registry: Registry) -> ChatState:
    """A turn of the embedded model that reasons first (think_first, a budget of 4), then answers under a regex."""
    form = Form(
        model=registry.default_model, kind="regex", constraint_text="(yes|no)", max_new_tokens=20, think_first=True,
        max_reasoning_tokens=4,
    )  # fmt: skip
    state = ChatState()
    for _ in handlers.chat(registry, form, state, "Is the sky blue?"):
        pass
    return state


def test_a_reasoning_token_is_not_explained_or_branched_as_the_answer_s_start(registry: Registry) -> None:
    """A thinking turn's reasoning tokens mapped to the answer's position 0: the panel explained the answer's first
    token under a reasoning token's title, and a branch there dropped the reasoning (or refused `<think>`)."""
    state = thinking_turn(registry)
    first = state.result.best.reasoning.answer_token
    assert first > 1 and state.tokens[1].segment == "reasoning"
    assert f"is in the reasoning, which the constraint does not judge (the answer starts at token #{first})" in (
        debugger.reasons_html(registry, state, 1)
    )
    branches, _ = debugger.pin(state, debugger.BranchState(), 1)
    branches, picker, panel = debugger.branch(registry, state, branches, "maybe")
    assert "a branch starts at a token of the answer" in panel and not branches.branches
    assert "is in the reasoning" not in debugger.reasons_html(registry, state, first)


def test_a_thinking_turn_s_chart_opens_at_the_answer(registry: Registry) -> None:
    """The chart opened on the forced reasoning opener (`<think>` 100%, "constraint keeps 0.0%"), though the view starts
    at the answer, where the constraint engages."""
    state = thinking_turn(registry)
    first = state.result.best.reasoning.answer_token
    chart = handlers.next_token(registry, state)
    assert f"at token #{first}, the answer&#x27;s first (after the reasoning)" in chart  # (escaped)
    assert "&lt;think&gt;" not in chart and "<think>" not in chart
