"""The widgets' JavaScript helpers follow the Python renderer's rules: palette, percentages, verdict wording,
best-of order, finish text and the next-token chart, compared value for value in Chromium."""

from __future__ import annotations

import math
from typing import Any

from playground import render
from playground.render.chart import chart_summary
from playground.types import NextTokenCandidate, NextTokenDistribution, Validation
from tests.browser.test_widgets_esm import harness_url  # noqa: F401 (fixture)
from tests.unit.test_results_render_alike import _result
from widgets.token_view import result_payload

HELPERS = "/widgets/static/helpers.js"


def _js(page, url: str, body: str, arg: Any) -> Any:
    """Run `body` (an expression over `m`, the helpers module, and `arg`) in the harness page."""
    page.goto(url)
    page.wait_for_function("window.harnessReady === true")
    return page.evaluate(f"async (arg) => {{ const m = await import('{HELPERS}'); return {body}; }}", arg)


def test_palette_and_percentages_match(page, harness_url: str) -> None:  # noqa: F811
    probs = [None, 0.0, 0.0125, 0.0375, 0.0025, 0.125 / 100, 0.25, 0.5, 0.7412, 0.99951, 1.0, 1.5, 4.5e-5, 0.0004999]
    got = _js(page, harness_url, "arg.map((p) => [m.colour(p), m.percent(p)])", probs)
    assert got == [[render.colour(p), render.pct(p)] for p in probs]
    assert [render.pct(p) for p in (0.0, 4.5e-5, 0.0004999, 0.0005)] == ["0.0%", "<0.1%", "<0.1%", "0.1%"]


def test_verdict_wording_matches(page, harness_url: str) -> None:  # noqa: F811
    cases = [
        Validation(valid=True, message="matches"),
        Validation(valid=False, message="<b>no</b>"),
        Validation(valid=None),
        Validation(valid=False, message="checked after", enforced=False),
        Validation(valid=True, message="", enforced=False),
    ]
    got = _js(page, harness_url, "arg.map((v) => m.verdict(v, 'regex'))", [v.model_dump() for v in cases])
    assert got == [list(render.verdict(v, "regex")) for v in cases]


def test_best_of_order_and_finish_text_match(page, harness_url: str) -> None:  # noqa: F811
    result = _result()
    body = "m.candidates(arg).map((s) => [s.generated_text, m.finishText(s)])"
    got = _js(page, harness_url, body, result_payload(result))
    assert got == [[s.generated_text, render.finish_text(s)] for s in render.candidates(result)]


def test_next_token_chart_rows_match(page, harness_url: str) -> None:  # noqa: F811
    def candidate(id_: int, raw: float, con: float | None) -> NextTokenCandidate:
        lp = None if con is None else math.log(con)
        return NextTokenCandidate(
            id=id_, text=f"t{id_}", raw_logprob=math.log(raw), logprob=lp, allowed=con is not None
        )

    dist = NextTokenDistribution(
        prefix="",
        candidates=[candidate(1, 0.6, None), candidate(2, 0.05, 0.9), candidate(3, 0.2, 0.1), candidate(4, 0.01, None)],
        mass_kept=0.25,
        allowed_count=2,
        vocab_size=100,
    )
    body = "[m.chartRows(arg).map((r) => [r.text, m.percent(r.raw), m.percent(r.con), r.allowed]), m.chartSummary(arg, 'here')]"
    rows, summary = _js(page, harness_url, body, dist.model_dump(mode="json"))
    expected = [[b.text, render.pct(b.raw), render.pct(b.constrained), b.allowed] for b in render.chart_rows(dist)]
    assert rows == expected and summary == chart_summary(dist, "here")
    assert summary.endswith("2 of 100 tokens allowed")
    remote = dist.model_copy(update={"allowed_count": None, "vocab_size": None})  # a remote server's view
    _, summary = _js(page, harness_url, body, remote.model_dump(mode="json"))
    assert summary == chart_summary(remote, "here") and summary.endswith(
        "the server does not say how many tokens are allowed"
    )


def test_static_html_keeps_its_sheet_inside_and_shows_popovers_on_hover(page, harness_url: str) -> None:  # noqa: F811
    from widgets import TokenView

    page.goto(harness_url)
    page.wait_for_function("window.harnessReady === true")
    page.evaluate("html => { document.getElementById('mount').innerHTML = html; }", TokenView(_result())._repr_html_())
    token = page.locator("#mount .pg-result .tok-line .tok").nth(0)
    popover = token.locator(".pop")
    assert popover.is_hidden()
    token.hover()
    assert popover.is_visible() and "under the constraint" in popover.inner_text()
    assert page.locator("#mount img").count() == 0
    assert page.evaluate("getComputedStyle(document.body).fontSize") != "14px"  # the sheet stays in its fragment
    assert page.locator("#mount .pg-result").evaluate("n => getComputedStyle(n).fontSize") == "14px"
