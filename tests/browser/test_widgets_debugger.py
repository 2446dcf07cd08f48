"""The Playground widget's debugger pieces in Chromium: reasons on the chart, fields, testing an instance."""

from __future__ import annotations

import math

from playground.debug.check import CheckResult
from playground.render.debugger import check_summary
from tests.browser.test_widgets_esm import _mount, _playground_state, harness_url  # noqa: F401 (fixture)
from tests.browser.ui_helpers import next_token_payload
from tests.unit.test_widgets import SCRIPT, sample_result
from widgets.token_view import result_payload


def test_chart_reasons_fields_and_check(page, harness_url: str) -> None:  # noqa: F811
    _mount(page, harness_url, "playground", _playground_state())
    result = result_payload(sample_result())
    result["best"]["fields"] = [
        {
            "path": "name",
            "value": SCRIPT,
            "tokens": 2,
            "prob_min": 0.5,
            "prob_product": 0.25,
            "mass_kept_min": 0.9,
            "overridden": True,
            "forced": 1,
        },
    ]
    page.evaluate("s => window.model.set('result_json', s)", result)
    row = page.locator("#mount table.sp-fields tr[data-path='name'] td")
    assert row.all_inner_texts() == ["name", f'"{SCRIPT}"', "50.0%", "25.0%", "90.0%", "yes", "1/2"]
    distribution = next_token_payload(
        [
            {
                "id": 9,
                "text": "x",
                "raw_logprob": math.log(0.6),
                "logprob": None,
                "allowed": False,
                "reason": f"the schema allows only the keys `{SCRIPT}` here",
            },
            {"id": 1, "text": "{", "raw_logprob": math.log(0.2), "logprob": math.log(0.8), "allowed": True},
        ],
    )
    page.evaluate("d => window.model.set('next_token', d)", distribution)
    reason = page.locator("#mount .sp-chart .sp-bar-row.sp-masked .sp-reason")
    assert reason.inner_text() == f"the schema allows only the keys `{SCRIPT}` here"
    page.fill("#mount textarea.sp-check-text", '{"kind": "cow"}')
    page.click("#mount button.sp-check-run")
    state = page.evaluate("window.model.state")
    assert state["check_text"] == '{"kind": "cow"}' and state["check_requested"] == 1
    check = {
        "accepted": False,
        "agree": True,
        "tokens": [],
        "first_refused": {"position": 4, "token": 1, "text": "c", "offset": 9, "reason": "kind must be one of `cat`"},
        "validation": {"valid": False, "message": "schema violation at kind", "enforced": True},
    }
    check["summary"] = check_summary(CheckResult.model_validate(check))  # worded in Python, as Playground.check does
    page.evaluate("c => window.model.set('check_result', c)", check)
    out = page.locator("#mount .sp-check-result")
    assert (
        out.inner_text()
        == '\u2717 token 4 "c" refused: kind must be one of `cat` \u00b7 final verdict: schema violation at kind'
    )
    assert page.locator("#mount script, #mount img").count() == 0
