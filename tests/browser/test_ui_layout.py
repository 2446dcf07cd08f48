"""The page's layout: grouped parameters, one snippet at a time, the chat first on a phone, readable errors."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import PARAMETER_GROUP, PHONE, open_app, paste_constraint, pick_kind, poll, show_parameter


def test_parameters_come_in_four_groups_with_the_rare_ones_folded(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    show_parameter(page, "param-max-new-tokens")
    expect(page.locator("#param-seed")).to_be_visible()
    expect(page.locator("#param-best-of")).to_be_hidden()
    expect(page.locator("#param-engine")).to_be_hidden()
    for elem_id, group in PARAMETER_GROUP.items():
        show_parameter(page, elem_id)
        expect(page.locator(f"#{group} #{elem_id}")).to_be_visible()


def expect_only_shown(page: Page, editors: list[str], shown: str) -> None:
    """`shown` is visible and every other editor hidden (retried: the text is there before its tab shows)."""
    for editor in editors:
        if editor == shown:
            expect(page.locator(f"#{editor}")).to_be_visible()
        else:
            expect(page.locator(f"#{editor}")).to_be_hidden()


def test_code_tab_shows_one_snippet_at_a_time(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    page.get_by_role("tab", name="Code").click()
    editors = ["code-curl-generate", "code-curl-chat", "code-openai", "code-huggingface-hub", "code-outlines"]
    expect(page.locator("#code-curl-generate .cm-content")).to_contain_text("/generate")
    expect_only_shown(page, editors, "code-curl-generate")
    page.locator("#code-tabs").get_by_role("tab", name="openai").click()
    expect(page.locator("#code-openai .cm-content")).to_contain_text("from openai import OpenAI")
    expect_only_shown(page, editors, "code-openai")


def test_phone_shows_the_chat_input_on_the_first_screen(browser, server_url: str) -> None:
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    try:
        open_app(page, server_url)

        def boxes() -> tuple[dict, dict]:
            return page.locator("#chat-input textarea").bounding_box(), page.locator("#model-picker").bounding_box()

        # read until it holds: the page's other load events and panel styles may land after the model's status
        poll(
            page,
            boxes,
            lambda b: b[0]["y"] + b[0]["height"] <= PHONE["height"] and b[0]["y"] < b[1]["y"],
            what="the chat input on the first screen, above the model picker",
        )
    finally:
        context.close()


def test_constraint_errors_are_monospace_and_the_editor_wraps(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    pick_kind(page, "regex")
    paste_constraint(page, "[0-9]{4}-(" + "a" * 200)
    status = page.locator("#constraint-status .pg-bad")
    expect(status).to_contain_text("regex")
    # Retried: CI once read the computed style before the panel's sheet applied.
    expect(status).to_have_css("font-family", re.compile("monospace"))
    expect(page.locator("#constraint-text .cm-content.cm-lineWrapping")).to_have_count(1)
    editor = page.locator("#constraint-text .cm-scroller")
    poll(page, lambda: editor.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), bool, what="the editor wraps")


def test_opening_the_advanced_parameters_leaves_the_reasoning_budget_blank(page: Page, server_url: str) -> None:
    """Gradio's number box showed the blank budget as 0 once rendered and sent it: every later request asked for
    no reasoning, and the openai snippet passed `max_reasoning_tokens=0` outside extra_body (a TypeError)."""
    open_app(page, server_url)
    show_parameter(page, "param-max-reasoning-tokens")
    page.wait_for_timeout(500)
    expect(page.locator("#param-max-reasoning-tokens textarea, #param-max-reasoning-tokens input").first).to_have_value(
        ""
    )
    page.get_by_role("tab", name="Code").click()
    expect(page.locator("#code-curl-generate .cm-content")).to_contain_text("/generate")
    expect(page.locator("#code-curl-generate .cm-content")).not_to_contain_text("max_reasoning_tokens")
