"""A phone (390x844, touch): the pickers right under the chat, one popover per tap, side-by-side panels stacked."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, expect

from tests.browser.ui_helpers import PHONE, SLOW, open_app, paste_constraint, pick_kind, poll, send, set_parameter

PINNED = re.compile(r"(^|\s)pinned(\s|$)")


def test_phone_pickers_under_the_chat_one_popover_per_tap_and_stacked_columns(
    browser: Browser, server_url: str
) -> None:
    context = browser.new_context(viewport=PHONE, has_touch=True)
    page = context.new_page()
    try:
        open_app(page, server_url)
        # before the first turn the empty panels are collapsed: the pickers are less than a screen below the chat
        # (read until it holds: the page's other load events and panel styles may land after the model's status)
        for picker in ("#model-picker", "#constraint-kind"):

            def boxes(picker: str = picker) -> tuple[dict, float]:
                return page.locator("#chat-input textarea").bounding_box(), page.locator(picker).bounding_box()["y"]

            poll(
                page,
                boxes,
                lambda b: b[0]["y"] < b[1] < b[0]["y"] + b[0]["height"] + PHONE["height"],
                what=f"{picker} less than a screen below the chat input",
            )
        for panel in ("#token-panel", "#next-token-panel", "#bestof-panel", "#field-panel", "#debugger"):
            expect(page.locator(panel)).to_be_hidden()

        pick_kind(page, "regex")
        paste_constraint(page, "(red|green|blue)(, (red|green|blue)){2}")
        set_parameter(page, "param-max-new-tokens", "6")
        send(page, "Name three colours.")
        tokens = page.locator("#token-panel .tok[data-index]")
        for index in (tokens.count() - 1, 0):  # the last token sits near the right edge
            tokens.nth(index).tap()
            # the tap's click pins the token; until it lands, the token before's detail (or the tapped one's
            # popover, shown on focus) is what shows
            expect(tokens.nth(index)).to_have_class(PINNED)
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
        # layout read until it holds: the columns have just been filled in
        poll(
            page,
            lambda: [columns.nth(i).bounding_box() for i in range(3)],
            lambda boxes: (
                all(b["x"] + b["width"] <= PHONE["width"] for b in boxes)
                and boxes[0]["y"] < boxes[1]["y"] < boxes[2]["y"]
            ),
            what="three columns inside the screen, one under another",
        )
        poll(
            page,
            lambda: page.evaluate("document.documentElement.scrollWidth"),
            lambda width: width <= PHONE["width"],
            what="no horizontal scroll",
        )
    finally:
        context.close()
