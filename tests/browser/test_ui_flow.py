"""The whole UI flow in headless Chromium against app.py on the embedded model."""

from __future__ import annotations

import json
import re

import jsonschema
from playwright.sync_api import Page, expect

from playground.constraints.examples import PERSON_SCHEMA
from tests.browser.ui_helpers import (
    SLOW,
    is_json,
    open_app,
    paste_constraint,
    pick_kind,
    poll,
    send,
    set_parameter,
    use_constraint,
)


def test_schema_chat_shows_valid_json_tokens_alternatives_and_next_token_chart(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    page.locator("#model-picker input").click()
    options = page.get_by_role("option")
    expect(options).to_have_count(1)  # the embedded model, served as `embedded` and by its id, listed once
    options.filter(has_text="(embedded GGUF)").click()
    expect(page.locator("#model-status .pg-box")).to_contain_text("✓", timeout=SLOW)
    use_constraint(page, "JSON schema", PERSON_SCHEMA, max_new_tokens=40)
    send(page, "Invent a person and describe them as JSON.")

    expect(page.locator("#validation-status")).to_contain_text("✓ valid (json_schema)")
    # the chatbot renders the answer after the verdict of the same update: read until it is whole
    code = page.locator("#chatbot [data-testid=bot] code").last
    answer = json.loads(poll(page, code.inner_text, is_json, what="the answer parses as JSON"))
    jsonschema.validate(answer, json.loads(PERSON_SCHEMA))
    finish = page.locator("#finish-reason")
    expect(finish).to_contain_text("finish reason")
    assert re.search(r"finish reason\s+(eos_token|length)", finish.inner_text())
    assert int(re.search(r"(\d+) generated", finish.inner_text()).group(1)) <= 40

    token = page.locator("#token-panel .tok[data-index='1']")
    popover = token.locator(".pop")
    expect(popover).to_be_hidden()
    token.hover()
    expect(popover).to_be_visible()
    expect(popover).to_contain_text("raw model")
    expect(popover).to_contain_text("under the constraint")
    expect(popover).to_contain_text("mass kept")
    assert popover.locator("td.alt").count() >= 2

    chart = page.locator("#next-token-panel")
    expect(chart).to_contain_text("at the end of the prompt", timeout=SLOW)
    assert chart.locator(".bar-row").count() >= 2
    page.locator("#token-panel .tok[data-index='2']").click()
    expect(chart).to_contain_text("at token #2", timeout=SLOW)


def test_invalid_schema_is_explained_before_anything_is_sent(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    pick_kind(page, "JSON schema")
    expect(page.locator("#constraint-status")).to_contain_text("constraint is valid")
    paste_constraint(page, '{"type": "object", "properties": 5}')
    expect(page.locator("#constraint-status .pg-bad")).to_contain_text("not a valid JSON Schema at properties")
    paste_constraint(page, '{"type": "object",')
    expect(page.locator("#constraint-status .pg-bad")).to_contain_text("invalid JSON in JSON schema")
    page.locator("#chat-input textarea").fill("hello")
    page.locator("#send-btn").click()
    expect(page.locator("#chat-error .pg-error")).to_contain_text("invalid JSON in JSON schema")
    expect(page.locator("#chatbot [data-testid=user]")).to_have_count(0)
    expect(page.locator("#chat-input textarea")).to_have_value("hello")


def test_best_of_three_shows_three_candidates_and_marks_the_chosen(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    use_constraint(page, "choice", "red\ngreen\nblue")
    set_parameter(page, "param-best-of", "3")
    page.locator("#param-do-sample input").check()
    expect(page.locator("#param-do-sample input")).to_be_checked()
    set_parameter(page, "param-seed", "11")
    send(page, "Pick a colour.")
    expect(page.locator("#chat-error .pg-error")).to_have_count(0)
    rows = page.locator("#bestof-panel tr.cand")
    expect(rows).to_have_count(3)
    expect(page.locator("#bestof-panel tr.cand.chosen")).to_have_count(1)
    expect(rows.first).to_contain_text("★")
    seeds = {rows.nth(i).locator("td").nth(4).inner_text() for i in range(3)}
    assert seeds == {"11", "12", "13"}
    expect(page.locator("#validation-status")).to_contain_text("✓ valid (choice)")


def test_a_hub_id_in_the_model_picker_says_loading_is_off(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    picker = page.locator("#model-picker input")
    picker.fill("no-such-org/no-such-model")
    picker.press("Enter")
    status = page.locator("#model-status .pg-error")
    expect(status).to_contain_text("no-such-org/no-such-model", timeout=SLOW)
    expect(status).to_contain_text("loading other models is disabled")
