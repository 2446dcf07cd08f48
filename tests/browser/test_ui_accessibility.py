"""Keyboard and screen readers: axe-core finds nothing serious, inputs are named, the token panel is one Tab stop."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import SLOW, open_app, send, serious_violations, set_parameter


def test_keyboard_names_and_axe_on_the_main_flow(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    assert serious_violations(page) == []
    expect(page.locator("h1")).to_have_count(1)
    named = {"#chat-input": "Message", "#branch-text": "Text to put at the clicked token"}
    for elem_id, name in named.items():
        expect(page.locator(elem_id).get_by_role("textbox", name=name, exact=True)).to_have_count(1)

    # a radio group moves with the arrow keys
    kinds = page.locator("#constraint-kind")
    kinds.get_by_label("none", exact=True).focus()
    page.keyboard.press("ArrowRight")
    expect(kinds.get_by_label("JSON schema", exact=True)).to_be_checked()
    expect(page.locator("#constraint-text .cm-content")).to_be_visible()

    # the model list closes when focus moves on
    picker = page.locator("#model-picker input")
    picker.click()
    expect(picker).to_have_attribute("aria-expanded", "true")
    page.keyboard.press("Tab")
    expect(picker).to_have_attribute("aria-expanded", "false")

    set_parameter(page, "param-max-new-tokens", "8")
    send(page, "Give me a person.")
    tokens = page.locator("#token-panel .tok[data-index]")
    expect(tokens).to_have_count(8, timeout=SLOW)
    # one Tab stop for the whole answer; the arrow keys move inside it
    expect(page.locator("#token-panel [tabindex='0']")).to_have_count(1)
    tokens.nth(0).focus()
    page.keyboard.press("ArrowRight")
    expect(tokens.nth(1)).to_be_focused()
    page.keyboard.press("End")
    expect(tokens.nth(7)).to_be_focused()
    expect(tokens.nth(7)).to_have_attribute("tabindex", "0")
    # the answer's own chart first: drawn after the answer, it would replace a token's chart asked for before it
    expect(page.locator("#next-token-panel")).to_contain_text("at the end of the prompt", timeout=SLOW)
    page.keyboard.press("Enter")
    expect(page.locator("#token-panel .pin-detail")).to_be_visible()
    expect(page.locator("#next-token-panel")).to_contain_text("at token #7", timeout=SLOW)
    page.keyboard.press("Escape")
    expect(page.locator("#token-panel .pin-detail")).to_have_count(0)
    expect(page.locator("#token-panel .tok.pinned")).to_have_count(0)
    # the chart's legend, the tokens and the verdict are readable too
    assert serious_violations(page) == []
