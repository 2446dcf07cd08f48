"""A phone (390x844, touch): the pickers right under the chat, one popover per tap, side-by-side panels stacked."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.browser.ui_helpers import PHONE, SLOW, open_app, paste_constraint, pick_kind, send, set_parameter


def test_phone_pickers_under_the_chat_one_popover_per_tap_and_stacked_columns(
    browser: Browser, server_url: str
) -> None:
    context = browser.new_context(viewport=PHONE, has_touch=True)
    page = context.new_page()
    try:
        open_app(page, server_url)
        # before the first turn the empty panels are collapsed: the pickers are less than a screen below the chat
        chat_input = page.locator("#chat-input textarea").bounding_box()
        for picker in ("#model-picker", "#constraint-kind"):
            top = page.locator(picker).bounding_box()["y"]
            assert chat_input["y"] < top < chat_input["y"] + chat_input["height"] + PHONE["height"], picker
        for panel in ("#token-panel", "#next-token-panel", "#bestof-panel", "#field-panel", "#debugger"):
            expect(page.locator(panel)).to_be_hidden()

        pick_kind(page, "regex")
        paste_constraint(page, "(red|green|blue)(, (red|green|blue)){2}")
        set_parameter(page, "param-max-new-tokens", "6")
        send(page, "Name three colours.")
        tokens = page.locator("#token-panel .tok[data-index]")
        for index in (tokens.count() - 1, 0):  # the last token sits near the right edge
            tokens.nth(index).tap()
            shown = page.locator("#token-panel .pop:visible, #token-panel .pin-detail:visible")
            expect(shown).to_have_count(1)
            box = shown.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
        cells = page.locator("#bestof-panel tr.cand td")
        assert {cells.nth(i).bounding_box()["x"] for i in range(cells.count())} == {cells.first.bounding_box()["x"]}

        page.get_by_role("tab", name="Compare").click()
        page.locator("#compare-engines-btn").click()
        columns = page.locator("#compare-engines .pg-engine-col")
        expect(columns).to_have_count(3, timeout=SLOW)
        boxes = [columns.nth(i).bounding_box() for i in range(3)]
        assert all(b["x"] + b["width"] <= PHONE["width"] for b in boxes), boxes
        assert boxes[0]["y"] < boxes[1]["y"] < boxes[2]["y"], boxes
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    finally:
        context.close()
