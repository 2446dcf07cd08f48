"""The chat shows what was written: no Markdown, no HTML, every space kept; Markdown only as a toggle."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import (
    SLOW,
    open_app,
    open_with_regex,
    paste_constraint,
    pick_kind,
    poll,
    poll_equal,
    send,
    set_parameter,
)
from tests.snippet_run import answer_of

ANSWER = "# x *a* ~~s~~ <b>&amp;</b> 12*12*12*1"
PATTERN = r"# x \*a\* ~~s~~ <b>&amp;</b> 12\*12\*12\*1"
MESSAGE = "# Title *a* <i>b</i>\n1. item\n    indented `c`"


def bubbles(page: Page, role: str) -> list[str]:
    """Each bubble's text as shown, less the newlines around it (read through poll: the chatbot renders a
    message's content after the bubble, and after the panels of the same update)."""
    return [
        text.strip("\n") for text in page.locator(f"#chatbot [data-testid={role}] .message-content").all_inner_texts()
    ]


def test_answers_and_user_messages_show_exactly_what_was_written(page: Page, server_url: str) -> None:
    open_with_regex(page, server_url, PATTERN, 40)
    send(page, MESSAGE)
    expect(page.locator("#validation-status")).to_contain_text("✓ valid (regex)")
    poll_equal(page, lambda: bubbles(page, "user"), [MESSAGE])
    poll_equal(page, lambda: bubbles(page, "bot"), [ANSWER])
    expect(page.locator("#chatbot h1, #chatbot em, #chatbot del, #chatbot b, #chatbot i, #chatbot ol")).to_have_count(0)

    page.locator("#chat-markdown input").check()
    expect(page.locator("#chatbot [data-testid=bot] pre code")).to_have_count(1)
    poll_equal(page, lambda: bubbles(page, "bot"), [ANSWER])
    poll_equal(page, lambda: bubbles(page, "user"), [MESSAGE])
    expect(page.locator("#chatbot h1, #chatbot em, #chatbot del, #chatbot b, #chatbot i, #chatbot ol")).to_have_count(0)


# Indents, a leading indent on the first line and tabs: what Gradio's own dedent (inspect.cleandoc) would eat.
INDENTED = "  first line indented\n\tx\ty\n    four spaces"
CHOICES = '["def f():\\n    return 1", "\\tx = 1\\n\\t\\ty = 2"]'
CITY_SCHEMA = '{"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}'


def generated_text(page: Page, marker: str) -> str:
    """What POST /generate answers for the last turn, run from the Code tab's curl snippet once it shows
    `marker` (a piece of the turn's constraint: the tab still holds the previous turn's snippet until then)."""
    page.get_by_role("tab", name="Code").click()
    editor = page.locator("#code-curl-generate .cm-content")
    expect(editor).to_contain_text(marker, timeout=SLOW)
    text = answer_of("curl_generate", editor.inner_text())
    page.get_by_role("tab", name="Chat", exact=True).click()
    return text


def bubble_texts(page: Page, role: str) -> list[str]:
    """Each bubble's text as the DOM holds it (textContent: every space and tab), less the newlines around it;
    read through poll, as `bubbles`."""
    texts = page.locator(f"#chatbot [data-testid={role}] .message-content").evaluate_all(
        "nodes => nodes.map(n => n.textContent)"
    )
    return [text.strip("\n") for text in texts]


def test_bubbles_keep_indentation_and_tabs_byte_for_byte(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    pick_kind(page, "choice")
    paste_constraint(page, CHOICES)
    expect(page.locator("#constraint-status")).to_contain_text("constraint is valid")
    send(page, INDENTED)
    expect(page.locator("#validation-status")).to_contain_text("✓ valid (choice)")
    poll_equal(page, lambda: bubble_texts(page, "user"), [INDENTED])
    choices = ("def f():\n    return 1", "\tx = 1\n\t\ty = 2")
    answer = poll(page, lambda: bubble_texts(page, "bot")[-1], lambda text: text in choices, what=f"in {choices!r}")
    assert answer == generated_text(page, "return 1")

    pick_kind(page, "JSON schema")
    paste_constraint(page, CITY_SCHEMA)
    expect(page.locator("#constraint-status")).to_contain_text("constraint is valid")
    set_parameter(page, "param-max-new-tokens", "40")
    send(page, "Name a city as JSON.")
    expect(page.locator("#validation-status")).to_contain_text("✓ valid (json_schema)", timeout=SLOW)
    generated = generated_text(page, "maxLength")
    # the indentation kept (which key the model writes first is the model's: other keys are allowed)
    assert generated.startswith('{\n  "')
    poll_equal(page, lambda: bubble_texts(page, "bot")[-1], generated)
