"""The chat shows what was written: no Markdown, no HTML, every space kept; Markdown only as a toggle."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import open_app, paste_constraint, pick_kind, send, set_parameter

ANSWER = "# x *a* ~~s~~ <b>&amp;</b> 12*12*12*1"
PATTERN = r"# x \*a\* ~~s~~ <b>&amp;</b> 12\*12\*12\*1"
MESSAGE = "# Title *a* <i>b</i>\n1. item\n    indented `c`"


def bubbles(page: Page, role: str) -> list[str]:
    return page.locator(f"#chatbot [data-testid={role}] .message-content").all_inner_texts()


def test_answers_and_user_messages_show_exactly_what_was_written(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    pick_kind(page, "regex")
    paste_constraint(page, PATTERN)
    expect(page.locator("#constraint-status")).to_contain_text("constraint is valid")
    set_parameter(page, "param-max-new-tokens", "40")
    send(page, MESSAGE)
    expect(page.locator("#validation-status")).to_contain_text("✓ valid (regex)")
    assert [text.strip("\n") for text in bubbles(page, "user")] == [MESSAGE]
    assert [text.strip("\n") for text in bubbles(page, "bot")] == [ANSWER]
    expect(page.locator("#chatbot h1, #chatbot em, #chatbot del, #chatbot b, #chatbot i, #chatbot ol")).to_have_count(0)

    page.locator("#chat-markdown input").check()
    expect(page.locator("#chatbot [data-testid=bot] pre code")).to_have_count(1)
    assert [text.strip("\n") for text in bubbles(page, "bot")] == [ANSWER]
    assert [text.strip("\n") for text in bubbles(page, "user")] == [MESSAGE]
    expect(page.locator("#chatbot h1, #chatbot em, #chatbot del, #chatbot b, #chatbot i, #chatbot ol")).to_have_count(0)
