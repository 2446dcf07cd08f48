"""The constraint debugger in Chromium: confidence per field, why a token was refused, a branch, a checked instance."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import (
    SLOW,
    is_json,
    open_accordion,
    open_app,
    paste_constraint,
    pick_kind,
    poll,
    send,
    set_parameter,
    use_constraint,
)
from tests.support import PET_SCHEMA


def ask_for_a_pet(page: Page, url: str) -> dict:
    open_app(page, url)
    use_constraint(page, "JSON schema", json.dumps(PET_SCHEMA), max_new_tokens=30)
    send(page, "A pet as JSON.")
    expect(page.locator("#validation-status")).to_contain_text("✓ valid (json_schema)")
    return json.loads(last_code(page))


def last_code(page: Page) -> str:
    """The last answer's code block, once the chatbot shows it whole (it renders a message's content after
    the panels of the same update): a JSON answer parses only then."""
    code = page.locator("#chatbot [data-testid=bot] code").last
    return poll(page, code.inner_text, is_json, what="the answer parses as JSON")


def test_fields_reasons_and_a_branch(page: Page, server_url: str) -> None:
    answer = ask_for_a_pet(page, server_url)
    fields = page.locator("#field-panel")
    for key in answer:
        expect(fields.locator(f"tr[data-path='{key}']")).to_be_visible(timeout=SLOW)

    page.locator("#token-panel .tok[data-index='1']").click()
    reasons = page.locator("#reason-panel")
    expect(reasons).to_contain_text("before token #1", timeout=SLOW)
    expect(reasons.locator("tr.refused").first).to_be_visible()
    expect(reasons).to_contain_text("end of text not allowed")

    box = page.locator("#branch-text textarea, #branch-text input").first
    expect(box).not_to_have_value("", timeout=SLOW)  # the most likely allowed alternative, offered
    offered = box.input_value()
    page.locator("#branch-btn").click()
    panel = page.locator("#branch-panel")
    expect(panel.locator("mark.forced")).to_have_text(offered, timeout=SLOW)
    expect(panel).to_contain_text("total logprob")
    expect(panel.locator(".pg-verdict")).to_be_visible()
    picker = page.locator("#branch-picker")
    expect(picker).to_contain_text("branch 1 at #1")
    picker.get_by_label("original answer").check()
    expect(panel.locator("mark.forced")).to_have_count(0)
    send(page, "Another pet as JSON.")  # a new turn: the last one's reasons and offered text go with it
    expect(reasons).not_to_contain_text("before token #1", timeout=SLOW)
    expect(box).to_have_value("")


def test_check_an_instance_names_the_refused_token(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    pick_kind(page, "JSON schema")
    paste_constraint(page, json.dumps(PET_SCHEMA))
    open_accordion(page, "check")
    page.locator("#check-text textarea").fill('{"kind": "cow", "name": "<script>x</script>"}')
    page.locator("#check-btn").click()
    result = page.locator("#check-result")
    expect(result).to_contain_text("refused: kind must be one of `cat`, `dog`", timeout=SLOW)
    expect(result.locator("mark.refused")).to_be_visible()
    expect(result).to_contain_text("<script>x</script>")  # shown as text, never run
    assert result.locator("script").count() == 0
    # a turn, here under another constraint: the result was the last one's, and goes (it stayed, reading as this one's)
    use_constraint(page, "regex", "[0-9]{3}", max_new_tokens=5)
    send(page, "Three digits.")
    expect(page.locator("#validation-status")).to_contain_text("✓ valid", timeout=SLOW)
    expect(result).not_to_contain_text("refused", timeout=SLOW)
    expect(page.locator("#check-text textarea")).to_have_value('{"kind": "cow", "name": "<script>x</script>"}')


def test_tools_kind_gives_a_call_with_its_tokens_and_verdict(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    pick_kind(page, "tools (function calls)")
    expect(page.locator("#constraint-status")).to_contain_text("constraint is valid")
    set_parameter(page, "param-max-new-tokens", "40")
    send(page, "What's the weather in Paris?")
    expect(page.locator("#validation-status")).to_contain_text("✓ valid", timeout=SLOW)
    call = json.loads(last_code(page))
    assert call["name"] in {"get_weather", "get_time"}
    assert page.locator("#token-panel .tok").count() > 5
    expect(page.locator("#field-panel tr[data-path^='arguments']").first).to_be_visible(timeout=SLOW)
