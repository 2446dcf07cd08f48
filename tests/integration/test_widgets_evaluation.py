"""The Playground widget's score and evaluate methods on the embedded model: charts, progress, exports."""

from __future__ import annotations

import json

from widgets import Playground, local_provider

COLORS = "red\ngreen\nblue"


def test_score_ranks_the_choices_and_draws_the_chart() -> None:
    local_provider("embedded")
    widget = Playground(mode="prompt", prompt="The color of grass is", constraint_kind="choice")
    widget.constraint_text = COLORS
    scored = widget.score()
    alternatives = scored.result.alternatives
    assert sorted(a.text for a in alternatives) == ["blue", "green", "red"]
    assert abs(sum(a.probability for a in alternatives) - 1) < 1e-9
    html = scored._repr_html_()
    assert html.index(alternatives[0].text) < html.index(alternatives[-1].text) and "pg-score" in html


def test_evaluate_fifty_prompts_with_progress_and_exports() -> None:
    widget = Playground(mode="prompt", constraint_kind="choice", max_new_tokens=3)
    widget.constraint_text = COLORS
    seen: list[dict] = []
    widget.observe(lambda change: seen.append(change["new"]), names="evaluation_progress")
    prompts = [f"Name a color ({i}):" for i in range(50)]
    result = widget.evaluate(prompts, expected=["red"] * 50)
    assert [r.index for r in result.rows] == list(range(50)) and result.summary["valid_rate"] == 1.0
    assert seen[0] == {"done": 0, "total": 50} and seen[-1] == {"done": 50, "total": 50} and len(seen) == 51
    assert result.summary["agreement"] == sum(r.text == "red" for r in result.rows) / 50
    assert len(result.to_csv().splitlines()) == 51
    assert json.loads(result.to_jsonl().splitlines()[7])["index"] == 7
    assert "Mass kept per prompt" in result._repr_html_() and "#49" in result._repr_html_()
