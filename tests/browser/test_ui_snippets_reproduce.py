"""Each snippet of the Code tab, run as a user would, gets back exactly the greedy answer the chat showed."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from playground.ui.layout import CODE_TABS
from tests.browser.ui_helpers import SLOW, open_app, poll_equal, send, set_parameter
from tests.snippet_run import answer_of


def test_every_snippet_reproduces_the_shown_greedy_turn(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    set_parameter(page, "param-max-new-tokens", "16")
    send(page, "Name three colours.")

    page.get_by_role("tab", name="Code").click()
    answers = {}
    for key, tab, _ in CODE_TABS:
        page.locator("#code-tabs").get_by_role("tab", name=tab).click()
        editor = page.locator(f"#code-{key.replace('_', '-')} .cm-content")
        expect(editor).to_contain_text("Name three colours.", timeout=SLOW)
        # every snippet is filled at once: wait for this one's tab, as a hidden editor's text has no line breaks
        expect(editor).to_be_visible()
        answers[key] = answer_of(key, editor.inner_text())

    # the chatbot renders a message's content after the verdict of the same update: read until it shows
    page.get_by_role("tab", name="Chat", exact=True).click()
    answer = page.locator("#chatbot [data-testid=bot] .message-content")
    first = CODE_TABS[0][0]
    shown = poll_equal(page, lambda: answer.inner_text().strip("\n"), answers[first])
    assert len(shown) > 10
    for key, _, _ in CODE_TABS:
        assert answers[key] == shown, key
