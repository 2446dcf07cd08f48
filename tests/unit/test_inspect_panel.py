"""The inspect panel's handler and renderer without a model: debounce, remote models, escaping, summary."""

from __future__ import annotations

from playground.constraints.inspection import EngineReport, InspectResponse, summary
from playground.providers.registry import Registry
from playground.ui.inspect import inspect_html, inspect_panel
from tests.fakes import FakeProvider

REPORT = InspectResponse(
    engines=[
        EngineReport(engine="llguidance", compiled=False, error='llguidance refused: Unimplemented keys: ["<not>"]'),
        EngineReport(
            engine="xgrammar",
            compiled=True,
            compile_ms=3.2,
            warnings=["xgrammar ignores `not` (only the final check enforces it)"],
            compiled_form='root ::= "<script>"',
        ),
    ]
)


def test_no_constraint_clears_the_panel() -> None:
    registry = Registry([FakeProvider()])
    assert inspect_panel(registry, "none", "", "fake-model") == ""
    assert inspect_panel(registry, "regex", "   ", "fake-model") == ""


def test_a_remote_model_or_a_bad_constraint_says_why_engines_are_not_compared() -> None:
    registry = Registry([FakeProvider()])
    remote = inspect_panel(registry, "regex", "[0-9]+", "fake-model")
    assert "engines not compared: model &#x27;fake-model&#x27; is served remotely" in remote
    bad = inspect_panel(registry, "json_schema", "{not json", "fake-model")
    assert "engines not compared: invalid JSON" in bad


def test_the_summary_names_what_each_engine_refuses_or_ignores() -> None:
    assert summary(REPORT) == "1/2 engines compile; llguidance refuses; xgrammar ignores `not`"


def test_every_engine_text_is_escaped() -> None:
    html = inspect_html(REPORT)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "&lt;not&gt;" in html
    assert "<code>not</code>" in html  # backticks become code spans, after escaping
