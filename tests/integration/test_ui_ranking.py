"""The chat tab's rankings on the embedded model: after a choice or enum turn by itself, under the chart of a
clicked token that starts an enum value, and nothing (no error) where the constraint lists no answers."""

from __future__ import annotations

import json
import math
import re

import pytest

from playground.debug.score import score
from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.render import SCORE_EMPTY
from playground.ui import evaluate, handlers
from playground.ui.state import ChatState, Form

COLORS = "red\ngreen\n<b>blue</b>"
PET = {
    "type": "object",
    "properties": {"kind": {"enum": ["<i>cat</i>", "dog"]}, "name": {"type": "string", "maxLength": 6}},
    "required": ["kind", "name"],
    "additionalProperties": False,
}


@pytest.fixture
def registry(engine) -> Registry:
    return Registry([LocalProvider([engine])])


def turn(registry: Registry, kind: str, text: str, message: str, max_new_tokens: int = 4) -> ChatState:
    state = ChatState()
    form = Form(model=registry.default_model, kind=kind, constraint_text=text, max_new_tokens=max_new_tokens)
    for _ in handlers.chat(registry, form, state, message):
        pass
    assert state.result is not None, "the turn finished"
    return state


def shares(chart: str) -> list[float]:
    """The constrained share of each bar, in the chart's order."""
    return [float(w) for w in re.findall(r'class="bar con" style="width:([0-9.]+)%"', chart)]


def test_a_choice_turn_ranks_its_answers_as_score_does_escaped(registry: Registry, engine) -> None:
    state = turn(registry, "choice", COLORS, "The color of grass is")
    chart = evaluate.rank_turn(registry, state)
    assert chart.count('class="bar-row"') == 3 and "(choice)" in chart
    assert "&lt;b&gt;blue&lt;/b&gt;" in chart and "<b>blue" not in chart
    expected = score(engine, state.request.inputs, state.request.params)
    assert shares(chart) == pytest.approx([a.probability * 100 for a in expected.alternatives], abs=0.051)
    assert math.isclose(sum(a.probability for a in expected.alternatives), 1.0, rel_tol=1e-6)


def test_a_json_enum_answer_is_ranked_and_other_turns_leave_the_panel_empty(registry: Registry) -> None:
    state = turn(registry, "json_schema", json.dumps({"enum": ["yes", "no", 3]}), "Is the sky blue?")
    chart = evaluate.rank_turn(registry, state)
    assert chart.count('class="bar-row"') == 3 and "enum at (root)" in chart and "&quot;yes&quot;" in chart
    assert sum(shares(chart)) == pytest.approx(100, abs=0.2)
    for kind, text in (("regex", "[a-z]+"), ("json_schema", json.dumps({"type": "string"}))):
        assert evaluate.rank_turn(registry, turn(registry, kind, text, "Say a word.")) == SCORE_EMPTY
    assert evaluate.rank_turn(registry, ChatState()) == SCORE_EMPTY


def test_a_clicked_token_that_starts_an_enum_value_gets_its_ranking(registry: Registry) -> None:
    state = turn(registry, "json_schema", json.dumps(PET), "A pet as JSON.", max_new_tokens=30)
    answer = "".join(t.text for t in state.tokens)
    charts = {i: evaluate.enum_at_token(registry, state, i) for i in range(len(state.tokens))}
    ranked = {i: chart for i, chart in charts.items() if chart}
    (index,) = ranked  # only the token that starts the kind's value: elsewhere nothing, and no error
    before = "".join(t.text for t in state.tokens[:index])
    assert before.rstrip().endswith('"kind":') and answer[len(before) :].lstrip().startswith('"')
    chart = ranked[index]
    assert "enum at kind" in chart and chart.count('class="bar-row"') == 2
    assert "&quot;&lt;i&gt;cat&lt;/i&gt;&quot;" in chart and "<i>" not in chart  # escaped text
    assert re.search(r"\d+\.\d% \(model (<0\.1|\d+\.\d)%\)", chart)  # constrained and raw probabilities
    assert sum(shares(chart)) == pytest.approx(100, abs=0.2)
    assert evaluate.enum_at_token(registry, state, None) == "" == evaluate.enum_at_token(registry, state, 999)
    # the Rank button: at the token, the same ranking; elsewhere the UI's words, not the API's ("give an answer
    # prefix that ends where a value starts", which the UI has no field for)
    assert "enum at kind" in evaluate.score_last_turn(registry, state, index)
    for pinned, where in ((None, "at the answer&#x27;s start"), (index + 1, "at the clicked token")):
        refused = evaluate.score_last_turn(registry, state, pinned)
        assert f"the last turn&#x27;s JSON schema lists no answers {where}: click a token where an enum" in refused
    many = turn(registry, "json_schema", json.dumps({"enum": [f"v{i}" for i in range(70)]}), "Pick.", max_new_tokens=3)
    assert "more than 64 answers, too many to score" in evaluate.score_last_turn(registry, many, None)
