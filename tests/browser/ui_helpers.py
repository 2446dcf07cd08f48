"""Steps the browser tests share: open the app, pick a constraint, set a parameter, send a message."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import TypeVar

from playwright.sync_api import Page, expect

from playground.ui.examples import KINDS
from tests.support import AXE_JS, EXPECT_TIMEOUT_MS

T = TypeVar("T")

SLOW = 120_000  # ms; the model decodes on one shared CPU thread
PHONE = {"width": 390, "height": 844}

# Which parameter group (an accordion inside "Parameters") holds each parameter.
PARAMETER_GROUP = {
    "param-max-new-tokens": "params-length",
    "param-stop": "params-length",
    "param-truncate": "params-length",
    "param-do-sample": "params-sampling",
    "param-temperature": "params-sampling",
    "param-top-k": "params-sampling",
    "param-top-p": "params-sampling",
    "param-typical-p": "params-sampling",
    "param-repetition-penalty": "params-sampling",
    "param-frequency-penalty": "params-sampling",
    "param-seed": "params-sampling",
    "param-top-n-tokens": "params-details",
    "param-best-of": "params-details",
    "param-engine": "params-advanced",
    "param-watermark": "params-advanced",
    "param-adapter-id": "params-advanced",
    "param-think-first": "params-advanced",
    "param-max-reasoning-tokens": "params-advanced",
}


def open_app(page: Page, url: str) -> None:
    page.goto(url)
    expect(page.locator("#model-status .pg-box")).to_contain_text("provider local", timeout=SLOW)
    # the autosave or share link restored and the kind's editor shown: a kind picked from now on stays
    expect(page.locator("html[data-session-restored]")).to_have_count(1)


def pick_kind(page: Page, label: str) -> None:
    """Check a constraint kind and wait until the server has answered with that kind's editor: its text
    (the kind's example or draft) arrives with the hidden kind box, and would overwrite a paste made before."""
    page.locator("#constraint-kind").get_by_label(label, exact=True).check()
    kind = dict(KINDS)[label]
    expect(page.locator("#constraint-text-kind textarea, #constraint-text-kind input").first).to_have_value(kind)
    expect(page.locator("#constraint-text .cm-content")).to_be_visible()


def paste_constraint(page: Page, text: str) -> None:
    """`text` in the constraint editor in place of what it held, as a user's paste puts it there.

    The editor is read back and the paste tried again when it did not arrive: under load CI once saw the
    selection deleted and the inserted text never reach the editor (the status then said the schema was empty).
    A long text is not read back: CodeMirror renders only the lines in view."""
    editor = page.locator("#constraint-text .cm-content")
    wanted = "".join(text.split())
    for _ in range(3):
        editor.click()
        page.keyboard.press("Control+A")
        page.keyboard.press("Delete")
        page.keyboard.insert_text(text)
        if len(text) > 2_000 or text.count("\n") > 20:
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if "".join(editor.inner_text().split()) == wanted:
                return
            page.wait_for_timeout(100)
    raise AssertionError(f"the constraint editor did not take the pasted text; it holds {editor.inner_text()!r}")


def use_constraint(page: Page, kind: str, text: str, max_new_tokens: int | None = None) -> None:
    """A valid constraint of the kind labelled `kind` in place (and max_new_tokens set, if given), ready for a
    message."""
    pick_kind(page, kind)
    paste_constraint(page, text)
    expect(page.locator("#constraint-status")).to_contain_text("constraint is valid")
    if max_new_tokens is not None:
        set_parameter(page, "param-max-new-tokens", str(max_new_tokens))


def open_with_regex(page: Page, url: str, pattern: str, max_new_tokens: int) -> None:
    """The app with a valid regex constraint in place and max_new_tokens set, ready for a message."""
    open_app(page, url)
    use_constraint(page, "regex", pattern, max_new_tokens)


def show_parameter(page: Page, elem_id: str) -> None:
    """Open the Parameters accordion and the group holding `elem_id`, unless it is already shown."""
    if page.locator(f"#{elem_id}").is_visible():
        return
    for accordion in ("parameters", PARAMETER_GROUP[elem_id]):
        open_accordion(page, accordion)
    expect(page.locator(f"#{elem_id}")).to_be_visible()


def open_accordion(page: Page, elem_id: str) -> None:
    """Click an accordion's toggle until it is open: a click that lands while the page re-renders after an
    event (the constraint's validation, say) can be lost, and CI once saw the Parameters accordion stay shut."""
    toggle = page.locator(f"#{elem_id} > button.label-wrap")
    expect(toggle).to_be_visible()
    for _ in range(3):
        if "open" in (toggle.get_attribute("class") or "").split():
            return
        toggle.click()
        try:
            expect(toggle).to_have_class(re.compile(r"(^|\s)open(\s|$)"), timeout=5000)
            return
        except AssertionError:
            continue
    expect(toggle).to_have_class(re.compile(r"(^|\s)open(\s|$)"))


def set_parameter(page: Page, elem_id: str, value: str) -> None:
    """Type a value into a parameter until the component holds it: an accordion that has just opened may
    still be mounting its sliders and drop the first value typed."""
    show_parameter(page, elem_id)
    slider = page.locator(f"#{elem_id} input[type=range]")
    box = page.locator(f"#{elem_id} input[type=number], #{elem_id} textarea, #{elem_id} input[type=text]").first
    held = slider if slider.count() else box
    for _ in range(5):
        box.fill(value)
        box.press("Tab")
        page.wait_for_timeout(300)
        if held.input_value() == value:
            return
    expect(held).to_have_value(value)


def send(page: Page, text: str | None = None) -> None:
    """Send a message and wait for its turn's verdict: the turn's first update (the new user message) is
    awaited first, as it clears the verdict a previous turn left on screen."""
    if text is not None:
        page.locator("#chat-input textarea").fill(text)
    users = page.locator("#chatbot [data-testid=user]")
    before = users.count()
    page.locator("#send-btn").click()
    expect(users).to_have_count(before + 1, timeout=SLOW)
    expect(page.locator("#validation-status .pg-verdict")).to_be_visible(timeout=SLOW)


def poll(
    page: Page, read: Callable[[], T], until: Callable[[T], bool], timeout: float = EXPECT_TIMEOUT_MS, what: str = ""
) -> T:
    """`read()` again until `until` holds of its value, and that value: a retrying assertion on what no
    `expect` matcher reads (the chatbot's texts, a parsed answer, layout boxes). Fails with the last value read."""
    deadline = time.monotonic() + timeout / 1000
    while True:
        value = read()
        if until(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what or 'condition'} not met in {timeout / 1000:g} s; last read: {value!r}")
        page.wait_for_timeout(100)


def poll_equal(page: Page, read: Callable[[], T], expected: T, timeout: float = EXPECT_TIMEOUT_MS) -> T:
    """`read()` again until it equals `expected` (see poll)."""
    return poll(page, read, lambda value: value == expected, timeout, f"== {expected!r}")


def is_json(text: str) -> bool:
    """Whether `text` parses as JSON: a streamed JSON object does only once it is whole."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def next_token_payload(candidates: list[dict]) -> dict:
    """A next-token distribution as the widgets receive it: two of 100 tokens allowed, 25% of the mass kept."""
    return {"prefix": "", "mass_kept": 0.25, "allowed_count": 2, "vocab_size": 100, "candidates": candidates}


# Gradio's CodeMirror editors colour syntax with a theme of their own: third-party markup, not ours.
AXE_EXCLUDE = [".cm-editor"]


def serious_violations(page: Page, settle_s: float = 6.0) -> list[str]:
    """axe-core's violations of impact serious or critical on the page once it has settled, one line each.

    A panel fading in (or dimmed while an event runs) shows its colours at part opacity for a moment, which
    axe reads as low contrast: what is still found after `settle_s` of asking again is what a user sees.
    """
    if not AXE_JS.is_file():
        raise RuntimeError(f"{AXE_JS} is missing: run `make test` (target `axe` fetches axe-core from npm)")
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=AXE_JS.read_text(encoding="utf-8"))
    deadline = time.monotonic() + settle_s
    while (found := _axe(page)) and time.monotonic() < deadline:
        page.wait_for_timeout(500)
    return found


def _axe(page: Page) -> list[str]:
    found = page.evaluate(
        """async (exclude) => (await axe.run({exclude: exclude.map((s) => [s])}, {resultTypes: ['violations']}))
            .violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
            .flatMap((v) => v.nodes.map((n) => `${v.id}: ${n.target.join(' ')}: ${n.failureSummary}`))""",
        AXE_EXCLUDE,
    )
    return list(found)
