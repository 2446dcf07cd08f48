"""Examples: the picker names an example only while it is shown, each kind keeps the user's own text, and
the examples show the model at its best."""

from __future__ import annotations

import json
import time

from playwright.sync_api import Page, expect

from playground.constraints.examples import PERSON_SCHEMA
from tests.browser.ui_helpers import open_accordion, open_app, paste_constraint, pick_kind, poll_equal, send

OTHER_SCHEMA = '{"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]}'
OWN_SCHEMA = '{"type": "object", "properties": {"colour": {"enum": ["red", "blue"]}}, "required": ["colour"]}'


def editor_text(page: Page) -> str:
    return page.locator("#constraint-text .cm-content").inner_text()


def test_own_text_survives_switching_kinds_and_the_title_never_goes_stale(
    page: Page, server_url: str, tmp_path
) -> None:
    open_app(page, server_url)
    example = page.locator("#constraint-example input")
    pick_kind(page, "JSON schema")
    expect(example).to_have_value("Person")
    assert json.loads(editor_text(page)) == json.loads(PERSON_SCHEMA)
    paste_constraint(page, OWN_SCHEMA)
    expect(example).to_have_value("")
    pick_kind(page, "regex")
    expect(example).to_have_value("IPv4 address")
    pick_kind(page, "JSON schema")
    expect(page.locator("#constraint-text .cm-content")).to_contain_text('"colour"')
    assert json.loads(editor_text(page)) == json.loads(OWN_SCHEMA)
    expect(example).to_have_value("")
    paste_constraint(page, OTHER_SCHEMA)  # typed, then replaced by an import before any switch of kind

    session = {
        "format": "structured-playground-session",
        "version": 1,
        "settings": {"kind": "regex", "constraint_text": "[a-z]{3}"},
        "messages": [],
    }
    path = tmp_path / "session.json"
    path.write_text(json.dumps(session), encoding="utf-8")
    open_accordion(page, "session")
    with page.expect_file_chooser() as chooser:
        page.locator("#session-import").click()
    chooser.value.set_files(str(path))
    expect(page.locator("#session-status")).to_contain_text("imported")
    expect(page.locator("#constraint-text .cm-content")).to_have_text("[a-z]{3}")
    expect(example).to_have_value("")
    pick_kind(page, "JSON schema")
    expect(page.locator("#constraint-text .cm-content")).to_contain_text('"size"')
    assert json.loads(editor_text(page)) == json.loads(OTHER_SCHEMA)


def test_the_grammar_example_finishes_with_the_right_answer(page: Page, server_url: str, tmp_path) -> None:
    open_app(page, server_url)
    pick_kind(page, "grammar (Lark or GBNF)")
    page.locator("#constraint-example input").click()
    page.get_by_role("option", name="Calculation").click()
    expect(page.locator("#chat-input textarea")).to_have_value("What is 7 times 6? Answer with the calculation.")
    send(page)
    expect(page.locator("#validation-status")).to_contain_text("✓ valid (grammar)")
    answer = page.locator("#chatbot [data-testid=bot] .message-content")
    poll_equal(page, lambda: answer.inner_text().strip(), "7 * 6 = 42")  # the chatbot renders after the verdict
    expect(page.locator("#finish-reason")).to_contain_text("eos_token")

    # an imported session starts without the last turn's panels and share link (they stayed, describing another chat)
    open_accordion(page, "session")
    page.locator("#session-share").click()
    expect(page.locator("#share-link textarea")).not_to_have_value("")
    session = {
        "format": "structured-playground-session",
        "version": 1,
        "settings": {"kind": "regex", "constraint_text": "[a-z]{3}"},
        "messages": [{"role": "user", "content": "Three letters?"}, {"role": "assistant", "content": "abc"}],
    }
    path = tmp_path / "session.json"
    path.write_text(json.dumps(session), encoding="utf-8")
    with page.expect_file_chooser() as chooser:
        page.locator("#session-import").click()
    chooser.value.set_files(str(path))
    expect(page.locator("#session-status")).to_contain_text("imported 2 messages")
    expect(page.locator("#finish-reason")).to_have_text("")
    expect(page.locator("#validation-status")).to_have_text("")
    expect(page.locator("#token-panel")).not_to_contain_text("42")
    expect(page.locator("#chat-error")).to_contain_text("Retry to see the tokens of the last answer")
    expect(page.locator("#share-link")).to_be_hidden()


def test_typed_text_is_checked_once_and_the_page_then_goes_quiet(page: Page, server_url: str) -> None:
    """After a keystroke the editor's change events fired again and again in Gradio 6 (an event with outputs beside
    the status and the inspect panel re-triggered them; so did the status's and the panel's own two change events,
    in 3 runs of 4 here and once in a fresh-clone CI run): ~5 requests a second, each a compile, for as long as the
    page stayed open."""
    joined: list[float] = []
    page.on("request", lambda request: joined.append(time.monotonic()) if "queue/join" in request.url else None)
    open_app(page, server_url)
    pick_kind(page, "choice")
    page.wait_for_timeout(3000)  # the example's own checks are done: the editor is idle
    page.locator("#constraint-text .cm-content").click()
    page.keyboard.press("End")  # the first line's end: a choice inserted between two others
    page.keyboard.type("\nmaybe", delay=80)
    page.locator("h1").click()  # the editor loses the focus
    expect(page.locator("#constraint-example input")).to_have_value("")  # typing names no example
    expect(page.locator("#constraint-status")).to_contain_text("constraint is valid")
    typed, quiet = time.monotonic(), 3.0
    # the last keystroke's checks may wait behind each other on a busy machine; then nothing more is asked
    while time.monotonic() - max([typed, *joined]) < quiet:
        assert time.monotonic() - typed < 30, f"{len(joined)} requests and still asking"
        page.wait_for_timeout(250)
