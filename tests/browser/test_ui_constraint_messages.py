"""What the editor and the details say: a hint for single-quoted Lark literals, the processor a turn used."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import open_app, paste_constraint, pick_kind, send, set_parameter


def test_single_quoted_lark_literals_get_a_hint(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    pick_kind(page, "grammar (Lark or GBNF)")
    paste_constraint(page, "start: 'yes' | 'no'")
    status = page.locator("#constraint-status .pg-bad")
    expect(status).to_contain_text("invalid grammar")
    expect(status).to_contain_text("Lark literals take double quotes")


def test_a_custom_processor_turn_names_the_processor(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    page.locator("#constraint-kind").get_by_label("custom processor", exact=True).check()
    page.locator("#processor-name input").click()
    page.get_by_role("option", name="ban_strings (built-in)").click()
    expect(page.locator("#processor-params textarea")).to_have_value("the\nThe")
    set_parameter(page, "param-max-new-tokens", "4")
    send(page, "Say hi.")
    expect(page.locator("#finish-reason .pg-processor")).to_contain_text("custom processor: ban_strings('the', 'The')")
