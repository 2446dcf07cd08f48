"""The Gradio UI and the notebook widgets draw a result alike: one palette, one wording, one best-of order,
grey for a probability nobody reported, and hostile token text escaped on every surface."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from playground import render
from playground.debug.check import CheckResult, RefusedToken
from playground.errors import ParameterError
from playground.providers.registry import Registry
from playground.render import debugger as render_debugger
from playground.types import FieldConfidence, GeneratedToken, GenerationResult, Sequence, Token, Validation
from playground.ui.handlers import Panels, result_panels
from playground.ui.state import ChatState
from tests.fakes import FakeProvider
from tests.support import REPO_ROOT
from widgets import Playground, TokenView

HOSTILE = "<img src=x onerror=alert(1)>"
GREY = "background:hsl(0, 0%, 90%)"


def _result() -> GenerationResult:
    """A quarter-likely token, a token whose probability nobody reported, hostile text, candidates out of order (one
    ended by a stop_token_ids token)."""
    quarter = GeneratedToken(
        id=1,
        text=HOSTILE,
        logprob=math.log(0.25),
        raw_logprob=math.log(0.5),
        top_tokens=[Token(id=1, text=HOSTILE, logprob=math.log(0.25))],
        raw_top_tokens=[Token(id=2, text=f'"{HOSTILE}', logprob=math.log(0.5))],
    )
    unknown = GeneratedToken(id=3, text="x", logprob=None, raw_logprob=None)
    best = Sequence(
        generated_text=HOSTILE + "x",
        finish_reason="stop_sequence",
        stop_sequence=HOSTILE,
        generated_tokens=2,
        tokens=[quarter, unknown],
        total_logprob=-1.0,
        validation=Validation(valid=False, message=HOSTILE),
    )

    def other(text: str, logprob: float, stop_token: int | None = None) -> Sequence:
        reason = "length" if stop_token is None else "eos_token"
        return Sequence(
            generated_text=text, finish_reason=reason, generated_tokens=1, total_logprob=logprob, stop_token=stop_token
        )

    return GenerationResult(
        model_id=HOSTILE,
        prompt="p",
        input_length=3,
        best=best,
        best_of_sequences=[other("low", -9.0), other(HOSTILE, -2.0), other("mid", -5.0, stop_token=7)],
        constraint_kind="regex",
    )


def _ui(mode: str) -> Panels:
    return result_panels(ChatState(mode=mode), _result())


def _widgets(mode: str) -> list[str]:
    """Both widgets' HTML for the same result (the Playground's as if it had just run)."""
    playground = Playground(provider=FakeProvider())
    playground.result = _result()
    return [TokenView(_result(), colour_by=mode)._repr_html_(), *([playground._repr_html_()] * (mode != "raw"))]


@pytest.mark.parametrize("mode", ["constrained", "raw"])
def test_each_ui_panel_is_drawn_the_same_inside_the_widgets(mode: str) -> None:
    panels = _ui(mode)
    for page in _widgets(mode):
        for panel in (panels.tokens, panels.verdict, panels.bestof, panels.details):
            assert panel and panel in page


def test_one_palette_and_grey_for_a_missing_probability() -> None:
    spans = re.findall(r'<span class="tok[^"]*" data-index="(\d)"[^>]*style="([^"]*)"', _ui("constrained").tokens)
    assert spans == [("0", "background:hsl(30, 80%, 82%)"), ("1", GREY)]  # p = 0.25, then nothing reported
    raw = re.findall(r'data-index="\d"[^>]*style="([^"]*)"', _ui("raw").tokens)
    assert raw == ["background:hsl(60, 80%, 82%)", GREY]
    for page in _widgets("constrained"):
        assert 'data-index="0" tabindex="0" style="background:hsl(30, 80%, 82%)"' in page
        assert f'data-index="1" tabindex="-1" style="{GREY}"' in page  # one Tab stop: the first token
        assert "p = — after the sampling settings · raw p = —" in page  # "unknown", never 0%


def test_one_best_of_order_chosen_first_then_by_total_logprob() -> None:
    expected = [HOSTILE + "x", HOSTILE, "mid", "low"]
    assert [s.generated_text for s in render.candidates(_result())] == expected
    for page in [_ui("constrained").bestof, *_widgets("constrained")]:
        texts = re.findall(r'<td class="cand-text"[^>]*><pre>(.*?)</pre>', page)
        assert texts == [render.esc(t) for t in expected]


def test_one_wording_for_verdicts_and_stop_sequences() -> None:
    wording = "✗ invalid (regex): &lt;img src=x onerror=alert(1)&gt;"
    stop = "stop_sequence (&quot;&lt;img src=x onerror=alert(1)&gt;&quot;)"
    assert wording in _ui("constrained").verdict and stop in _ui("constrained").details
    for page in _widgets("constrained"):
        assert wording in page and stop in page


def test_hostile_token_text_is_escaped_on_every_surface() -> None:
    panels = _ui("constrained")
    for page in [panels.tokens, panels.verdict, panels.bestof, panels.details, *_widgets("constrained")]:
        assert "<img" not in page
    assert "&lt;img" in panels.tokens and "onerror=alert(1)&gt;" in panels.tokens  # spaces drawn as marks
    assert "&quot;&lt;img" in panels.tokens  # the raw alternative, quote and all


def test_the_widgets_ship_one_helper_module_inlined_into_each_view() -> None:
    from widgets.token_view import esm

    for name in ("token_view.js", "playground.js"):
        bundled = esm(name)
        assert '"./helpers.js"' not in bundled
        assert bundled.count("export function colour(p)") == 1
    assert Playground.class_traits()["_token_view_esm"].default() == esm("token_view.js")


def test_the_renderer_and_the_widgets_import_no_gradio() -> None:
    code = (
        "import sys, playground.render, widgets; print(sorted(m for m in sys.modules if m.split('.')[0] == 'gradio'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, cwd=REPO_ROOT
    )
    assert out.stdout.strip() == "[]"


# --- the panels moved into playground/render: one wording for a check and an error, every text escaped ---


def _check() -> CheckResult:
    refused = RefusedToken(position=1, token=7, text=HOSTILE, offset=2, reason=f"`{HOSTILE}` is not allowed")
    validation = Validation(valid=False, message=HOSTILE)
    return CheckResult(accepted=False, first_refused=refused, validation=validation, agree=False, tokens=["a", "b"])


def test_one_wording_for_an_instance_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from playground.ui import debugger as ui_debugger
    from playground.ui.state import Form
    from widgets import debugger as widget_debugger

    monkeypatch.setattr(ui_debugger, "check_text", lambda *args: _check())
    monkeypatch.setattr(widget_debugger, "check_text", lambda *args: _check())
    monkeypatch.setattr(widget_debugger, "local_engine", lambda *args: None)
    monkeypatch.setattr(Registry, "local_engine", lambda *args: None)
    lines = [text for _, text in render_debugger.check_lines(_check())]
    assert lines[0] == f"✗ token 1 {render.quoted(HOSTILE)} refused: `{HOSTILE}` is not allowed"
    form = Form(model="fake-model", kind="regex", constraint_text="a+")
    ui = ui_debugger.check_instance(Registry([FakeProvider()]), form, HOSTILE)
    assert ui == render_debugger.check_html(_check(), HOSTILE)
    assert all(render.esc(line) in ui for line in lines) and "<img" not in ui
    playground = Playground(provider=FakeProvider(), constraint_kind="regex", constraint_text="a+")
    playground.check(HOSTILE)
    assert playground.check_result["summary"] == " · ".join(lines) == render_debugger.check_summary(_check())


def test_one_wording_for_an_error() -> None:
    failure = ParameterError(f"bad {HOSTILE}")
    widget = Playground(provider=FakeProvider(error=failure), prompt="hi")
    assert widget.run(raise_errors=False) is None
    ui = Panels.failed(ChatState(), failure).error
    assert widget.error == render.error_text(failure) == f"bad {HOSTILE}"
    assert ui == render.error_box(widget.error) and "<img" not in ui
    assert render.error_text(RuntimeError("boom")) == "model failure (RuntimeError): boom"


def test_the_debugger_inspect_and_side_panels_escape_hostile_text() -> None:
    from playground.constraints.inspection import EngineReport, InspectResponse
    from playground.debug.why import TokenReason
    from playground.render.inspection import inspect_html
    from playground.render.panels import Column, columns_html, side_html, stopped_verdict_html
    from playground.ui import debugger as ui_debugger

    result = _result()
    leaf = {"tokens": 1, "prob_min": 0.5, "prob_product": 0.5, "mass_kept_min": None, "overridden": False, "forced": 0}
    fields = [FieldConfidence(path=HOSTILE, value=HOSTILE, **leaf)]
    state = ChatState(result=result.model_copy(update={"best": result.best.model_copy(update={"fields": fields})}))
    reasons = [TokenReason(id=1, text=HOSTILE, allowed=False, reason=f"`{HOSTILE}` refused")]
    report = InspectResponse(engines=[EngineReport(engine="xgrammar", compiled=False, error=HOSTILE)])
    pages = [
        ui_debugger.fields_html(state),
        render_debugger.reasons_html(f"before {HOSTILE}", reasons, {1: -1.0}),
        render_debugger.branch_html(result, "constrained", kept=HOSTILE, forced=HOSTILE),
        inspect_html(report),
        side_html(HOSTILE, result, render.validation_html(result.best, "regex")),
        columns_html([Column(HOSTILE, result=result), Column("x", error=HOSTILE)]),
        stopped_verdict_html(HOSTILE, None),
    ]
    assert pages[0] == render_debugger.fields_html(fields)
    for page in pages:
        assert "<img" not in page and "&lt;img" in page
