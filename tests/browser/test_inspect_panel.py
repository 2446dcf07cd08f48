"""The inspect panel beside the constraint editor, in headless Chromium: engines compared as you type."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import SLOW, open_app, paste_constraint, pick_kind


def test_the_panel_compares_engines_as_you_type_and_escapes_what_it_shows(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    pick_kind(page, "JSON schema")
    schema = {
        "type": "object",
        "properties": {"<b>tags</b>": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}},
    }
    paste_constraint(page, json.dumps(schema))
    panel = page.locator("#inspect-panel")
    summary = panel.locator(".pg-inspect-summary")
    expect(summary).to_have_text(
        "2/3 engines compile; llguidance refuses; xgrammar ignores uniqueItems; outlines_core ignores uniqueItems",
        timeout=SLOW,
    )
    expect(summary.locator("code").first).to_have_text("uniqueItems")
    expect(panel.locator(".pg-inspect-llguidance")).to_contain_text('Unimplemented keys: ["uniqueItems"]')
    xgrammar = panel.locator(".pg-inspect-xgrammar")
    expect(xgrammar).to_contain_text("✓")
    xgrammar.get_by_text("compiled form").click()
    expect(xgrammar.locator("pre")).to_contain_text("::=")
    outlines_form = panel.locator(".pg-inspect-outlines_core pre")
    assert "<b>tags</b>" in outlines_form.text_content()  # the property name shown as text, not markup
    assert panel.locator("b").count() == 0

    paste_constraint(page, json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}))
    expect(summary).to_have_text("3/3 engines compile", timeout=SLOW)

    pick_kind(page, "regex")
    paste_constraint(page, "[0-9]{3}")
    # the summary reads as it did for the schema, so wait for the regex itself (xgrammar compiles twice now:
    # in a worker under the limits, then in the server)
    expect(panel.locator(".pg-inspect-outlines_core pre")).to_have_text("[0-9]{3}", timeout=SLOW)
    expect(summary).to_have_text("3/3 engines compile")
