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


def test_score_after_a_run_ranks_after_the_prompt_typed_since() -> None:
    """It ranked after the last run's prompt whatever was typed after it (the README: the current prompt first)."""
    widget = Playground(mode="prompt", prompt="Invent a person as JSON.", max_new_tokens=2)
    widget.run()
    widget.constraint_kind, widget.constraint_text = "choice", COLORS
    widget.prompt = "The color of grass is"
    after_run = {a.text: a.raw_logprob for a in widget.score().result.alternatives}
    fresh = Playground(mode="prompt", prompt="The color of grass is", constraint_kind="choice")
    fresh.constraint_text = COLORS
    assert after_run == {a.text: a.raw_logprob for a in fresh.score().result.alternatives}


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
