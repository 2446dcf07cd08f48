"""The token panel: keyboard access, popovers that stay on screen, a readable next-token chart nothing covers."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import PHONE, SLOW, open_app, poll, send, set_parameter


def overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and (b["y"] < a["y"] + a["height"])
    )


def test_enter_on_a_focused_token_pins_it_and_the_chart_is_wide_and_uncovered(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    set_parameter(page, "param-max-new-tokens", "8")
    send(page, "Name three colours.")
    chart = page.locator("#next-token-panel")
    expect(chart).to_contain_text("at the end of the prompt", timeout=SLOW)

    token = page.locator("#token-panel .tok[data-index='2']")
    token.focus()
    page.keyboard.press("Enter")
    expect(token).to_have_class("tok pinned")
    detail = page.locator("#token-panel .pin-detail")
    expect(detail).to_contain_text("raw model")
    expect(chart).to_contain_text("at token #2", timeout=SLOW)
    page.mouse.move(0, 0)
    # layout read until it holds: the chart has just been redrawn
    bars = chart.locator(".bars").first
    poll(page, lambda: bars.bounding_box()["width"], lambda width: width >= 300, what="chart bars 300 px wide")
    poll(
        page,
        lambda: (detail.bounding_box(), chart.bounding_box()),
        lambda boxes: not overlap(*boxes),
        what="the pinned detail clear of the chart",
    )
    for pop in page.locator("#token-panel .pop").all():
        assert not pop.is_visible()


def test_popovers_stay_inside_a_phone_screen(browser, server_url: str) -> None:
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    try:
        open_app(page, server_url)
        set_parameter(page, "param-max-new-tokens", "8")
        page.locator("#chat-input textarea").scroll_into_view_if_needed()
        send(page, "Name three colours.")
        poll(
            page,
            lambda: page.evaluate("document.documentElement.scrollWidth"),
            lambda width: width <= PHONE["width"],
            what="no horizontal scroll",
        )
        tokens = page.locator("#token-panel .tok[data-index]")
        for index in (0, tokens.count() - 1):
            tokens.nth(index).hover()
            pop = tokens.nth(index).locator(".pop")
            expect(pop).to_be_visible()
            box = pop.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    finally:
        context.close()
