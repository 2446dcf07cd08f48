"""The widgets' ESM in headless Chromium: a harness page mounts them on a stand-in anywidget model."""

from __future__ import annotations

import functools
import json
import math
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anywidget
import pytest

from playground import render
from tests.browser.ui_helpers import next_token_payload
from tests.support import REPO_ROOT
from tests.unit.test_widgets import IMG, SCRIPT, sample_result
from widgets.playground import Playground
from widgets.token_view import esm, result_payload


class _QuietHandler(SimpleHTTPRequestHandler):
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".js": "text/javascript"}

    def log_message(self, *_args: Any) -> None:
        """Keep the test output clean."""


@pytest.fixture(scope="module")
def harness_url() -> Iterator[str]:
    """The repository served on 127.0.0.1, so the harness page finds widgets/static/ (its CSS, helpers.js)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(REPO_ROOT)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/tests/browser/widget_harness.html"
    server.shutdown()
    server.server_close()


def _mount(page, url: str, module: str, state: dict[str, Any]) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.wait_for_function("window.harnessReady === true")
    page.evaluate("([m, s]) => window.mount(m, s)", [esm(f"{module}.js"), state])
    assert errors == []


def _css_colour(page, css: str) -> str:
    """How Chromium normalises a CSS colour, to compare with a token's inline background."""
    return page.evaluate(
        "c => { const d = document.createElement('div'); d.style.background = c; return d.style.backgroundColor; }", css
    )


def _token_view_state() -> dict[str, Any]:
    return {"result": result_payload(sample_result()), "colour_by": "constrained", "selected": -1}


def test_tokens_render_coloured_and_escaped(page, harness_url: str) -> None:
    _mount(page, harness_url, "token_view", _token_view_state())
    tokens = page.locator("#mount .sp-token")
    assert tokens.count() == 3
    assert tokens.nth(1).text_content() == SCRIPT
    assert tokens.nth(2).text_content() == "}\u21b5\n"
    assert page.locator("#mount script, #mount img").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert "sp-overridden" in tokens.nth(0).get_attribute("class")
    assert "sp-overridden" not in tokens.nth(1).get_attribute("class")
    expected = _css_colour(page, render.colour(math.exp(-0.05)))
    assert tokens.nth(0).evaluate("n => n.style.backgroundColor") == expected
    summary = page.locator("#mount .sp-summary").inner_text()
    assert "tiny <model> via local" in summary and "eos_token" in summary
    assert page.locator("#mount .sp-verdict").inner_text() == "\u2717 invalid (json_schema): Expecting value: line 1"


def test_hover_shows_alternatives_raw_and_constrained(page, harness_url: str) -> None:
    _mount(page, harness_url, "token_view", _token_view_state())
    assert "hover or click" in page.locator("#mount .sp-detail-slot").inner_text()
    page.locator("#mount .sp-token").nth(0).hover()
    detail = page.locator("#mount .sp-detail")
    text = detail.inner_text()
    assert "mass kept 40.0%" in text and "overrode the model's first choice" in text
    rows = detail.locator("tr")
    assert rows.nth(1).inner_text().split("\t") == ['"```"', "74.1%", "masked"]
    assert rows.nth(2).inner_text().split("\t") == ['"{"', "22.3%", "95.1%"]
    page.locator("#mount .sp-token").nth(1).hover()
    cells = page.locator("#mount .sp-detail td.sp-alt-text").all_inner_texts()
    assert cells == [f'"{SCRIPT}"', '"<img src=x onerror=\\"window.__pwned = 2\\">"']
    assert page.locator("#mount script, #mount img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_click_pins_a_token_and_toggles_colouring(page, harness_url: str) -> None:
    _mount(page, harness_url, "token_view", _token_view_state())
    page.locator("#mount .sp-token").nth(2).click()
    assert page.evaluate("window.model.state.selected") == 2
    assert page.evaluate("window.model.saved.length") == 1
    page.mouse.move(0, 0)
    assert "mass kept 10.0%" in page.locator("#mount .sp-detail").inner_text()
    page.locator("#mount button.sp-mode[data-mode='raw']").click()
    assert page.evaluate("window.model.state.colour_by") == "raw"
    expected = _css_colour(page, render.colour(math.exp(-1.5)))
    assert page.locator("#mount .sp-token").nth(0).evaluate("n => n.style.backgroundColor") == expected
    assert "sp-active" in page.locator("#mount button.sp-mode[data-mode='raw']").get_attribute("class")


def test_best_of_candidates_are_listed_and_selectable(page, harness_url: str) -> None:
    _mount(page, harness_url, "token_view", _token_view_state())
    rows = page.locator("#mount .sp-candidate")
    assert rows.count() == 3
    assert rows.nth(0).inner_text().startswith("chosen")
    assert "not enforced by the provider" in rows.nth(2).inner_text()
    assert 'stop_sequence ("\\n\\n")' in rows.nth(2).inner_text()
    rows.nth(1).click()
    tokens = page.locator("#mount .sp-token")
    assert tokens.count() == 1 and tokens.nth(0).text_content() == IMG
    assert page.locator("#mount .sp-verdict").inner_text() == "\u2713 valid (json_schema): ok"
    assert page.evaluate("window.__pwned") is None


def _playground_state() -> dict[str, Any]:
    """Every synced trait of a Playground with its default, as the kernel would send it."""
    names = set(Playground.class_trait_names(sync=True)) - set(anywidget.AnyWidget.class_trait_names(sync=True))
    defaults = {name: Playground.class_traits()[name].default() for name in names}
    return {
        **defaults,
        "_token_view_esm": esm("token_view.js"),
        "models": ["tiny <model>"],
        "model": "tiny <model>",
        "examples": {"json_schema": [{"title": "Person", "text": '{"type": "object"}', "message": "Invent a person."}]},
        "processor_choices": [["ban_strings", "forbid strings", "lines"], ["grammar", "a Lark grammar", "one text"]],
        "engines": ["auto", "llguidance", "xgrammar"],
    }


def test_playground_controls_set_traits(page, harness_url: str) -> None:
    _mount(page, harness_url, "playground", _playground_state())
    page.select_option("#mount select.sp-kind", "json_schema")
    page.select_option("#mount select.sp-example", "0")
    state = page.evaluate("window.model.state")
    assert state["constraint_kind"] == "json_schema" and state["constraint_text"] == '{"type": "object"}'
    assert page.locator("#mount textarea.sp-prompt").input_value() == "Invent a person."
    page.fill("#mount textarea.sp-prompt", "my own words")
    page.select_option("#mount select.sp-example", "")  # the placeholder loads nothing (it loaded example 0)
    assert page.evaluate("window.model.state.prompt") == "my own words"
    assert page.locator("#mount .sp-problem").inner_text() == "\u2713 constraint is valid"
    page.evaluate("window.model.set('constraint_problem', 'not a valid JSON Schema at (root)')")
    assert page.locator("#mount .sp-problem.sp-bad").inner_text() == "\u2717 not a valid JSON Schema at (root)"
    page.fill("#mount input.sp-max_new_tokens", "12")
    # a number the setting cannot take is marked on the box, and the setting keeps its value
    tokens_box = page.locator("#mount input.sp-max_new_tokens")
    tokens_box.fill("1.5")
    assert page.evaluate("window.model.state.max_new_tokens") == 12
    assert tokens_box.get_attribute("aria-invalid") == "true" and "sp-invalid" in tokens_box.get_attribute("class")
    assert tokens_box.get_attribute("title") == "not a valid max_new_tokens: it stays 12"
    tokens_box.fill("12")
    assert tokens_box.get_attribute("aria-invalid") == "false" and "sp-invalid" not in tokens_box.get_attribute("class")
    page.fill("#mount input.sp-seed", "")
    page.check("#mount input.sp-do_sample")
    assert "min_p (0 = off)" in page.locator("#mount fieldset.sp-parameters").inner_text()
    page.fill("#mount input.sp-min_p", "0.05")
    page.fill("#mount input.sp-top_k", "3")
    page.select_option("#mount select.sp-constraint_engine", "xgrammar")
    page.fill("#mount textarea.sp-processor-params", "the\nThe")
    page.click("#mount button.sp-add-processor")
    page.select_option("#mount select.sp-processor-name", "grammar")
    page.fill("#mount textarea.sp-processor-params", 'start: a\na: "x"')
    page.click("#mount button.sp-add-processor")  # one text: one parameter, lines and all
    page.click("#mount button.sp-run")
    state = page.evaluate("window.model.state")
    assert state["max_new_tokens"] == 12 and state["seed"] is None and state["do_sample"] is True
    assert state["min_p"] == 0.05 and state["top_k"] == 3 and state["constraint_engine"] == "xgrammar"
    assert state["logits_processors"] == [
        {"name": "ban_strings", "params": ["the", "The"]},
        {"name": "grammar", "params": ['start: a\na: "x"']},
    ]
    assert state["run_requested"] == 1
    assert page.evaluate("window.model.saved.at(-1).run_requested") == 1
    # the stop box writes a newline stop as \n, as the UI's does: it is kept when another line is typed
    page.evaluate("window.model.set('stop', ['\\n', 'END', 'a\\\\b'])")
    stop = page.locator("#mount textarea.sp-stop")
    assert stop.input_value() == "\\n\nEND\na\\\\b"
    stop.fill("\\n\nEND!\n\\t")
    assert page.evaluate("window.model.state.stop") == ["\n", "END!", "\t"]


def test_playground_shows_errors_answers_and_next_token_chart(page, harness_url: str) -> None:
    _mount(page, harness_url, "playground", _playground_state())
    assert page.locator("#mount .sp-error").is_hidden()
    page.evaluate("s => window.model.set('error', s)", f"invalid regex: {SCRIPT}")
    error = page.locator("#mount .sp-error")
    assert error.is_visible() and error.inner_text() == f"invalid regex: {SCRIPT}"
    assert error.evaluate("n => getComputedStyle(n).color") == "rgb(198, 40, 40)"
    page.evaluate("s => window.model.set('result_json', s)", result_payload(sample_result()))
    assert page.locator("#mount .sp-answer .sp-token").count() == 3
    distribution = next_token_payload(
        [
            {"id": 9, "text": SCRIPT, "raw_logprob": math.log(0.6), "logprob": None, "allowed": False},
            {"id": 1, "text": "{", "raw_logprob": math.log(0.2), "logprob": math.log(0.8), "allowed": True},
        ],
    )
    page.evaluate("d => window.model.set('next_token', d)", distribution)
    chart = page.locator("#mount .sp-chart")
    assert (
        "constraint keeps 25.0% of the model's probability mass" in chart.inner_text()
        and "2 of 100 tokens allowed" in chart.inner_text()
    )
    assert chart.locator(".sp-bar-row.sp-masked .sp-bar-label").inner_text() == f'"{SCRIPT}"'
    assert chart.locator(".sp-bar-row").nth(0).locator(".sp-num").inner_text() == "20.0% \u2192 80.0%"
    page.locator("#mount .sp-answer .sp-token").nth(1).click()
    assert page.evaluate("window.model.state.next_token_position") == 1
    assert page.evaluate("window.model.state.next_token_sequence") == 0
    assert "before token 1" in chart.inner_text()
    # a token of another best_of candidate: the view is asked for that candidate (it showed the chosen one's)
    page.locator("#mount .sp-candidate").nth(1).click()
    page.locator("#mount .sp-answer .sp-token").nth(0).click()
    state = page.evaluate("window.model.state")
    assert (state["next_token_sequence"], state["next_token_position"]) == (1, 0)
    assert f"before token 0 ({json.dumps(IMG)})" in chart.inner_text()
    assert page.locator("#mount script, #mount img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_playground_chat_history_and_clear(page, harness_url: str) -> None:
    _mount(page, harness_url, "playground", _playground_state())
    page.evaluate(
        "window.model.set('messages', [{role: 'user', content: 'hi <b>'}, {role: 'assistant', content: 'yo'}])"
    )
    assert page.locator("#mount .sp-message").all_inner_texts() == ["user: hi <b>", "assistant: yo"]
    page.click("#mount button.sp-clear")
    assert page.evaluate("window.model.state.messages") == []
    page.select_option("#mount select.sp-mode-select", "prompt")
    assert page.locator("#mount .sp-chat").is_hidden()
