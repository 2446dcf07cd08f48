"""Stop: live only while a turn runs; a stopped answer keeps its popovers, chart, verdict and stored text."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import (
    SLOW,
    open_accordion,
    open_app,
    open_with_regex,
    paste_constraint,
    pick_kind,
    poll_equal,
    send,
)

# At least 251 numbers, more than 400 tokens: a turn runs to max_new_tokens (seconds of decoding, however fast the
# model) unless stopped, so it outlasts a screen that lags the decode (61 numbers once ended in ~3 s, before the
# page had shown the Stop button live).
LONG = r"[0-9]{1,3}(, [0-9]{1,3}){250,300}"
# At least 61 numbers, ending on its own (the lag test's answer ends whole, before the screen catches up; the hold
# starts at Playwright's next look after the 4th token, up to a second later: the answer must outlast that well).
WHOLE = r"[0-9]{1,3}(, [0-9]{1,3}){60,90}"


def exported_messages(page: Page) -> list[dict]:
    """The conversation as the server stores it (through the session export)."""
    if not page.locator("#session-export").is_visible():
        open_accordion(page, "session")
    page.locator("#session-export").click()
    link = page.locator("#session-file a[download]").first
    expect(link).to_be_visible(timeout=SLOW)
    return json.loads(page.request.get(link.get_attribute("href")).text())["messages"]


def test_stop_is_idle_until_a_turn_runs(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    stop, send_button = page.locator("#stop-btn"), page.locator("#send-btn")
    expect(stop).to_be_disabled()
    assert stop.bounding_box()["width"] < send_button.bounding_box()["width"]
    pick_kind(page, "choice")
    paste_constraint(page, "yes\nno")
    send(page, "Is water wet?")
    expect(page.locator("#validation-status .pg-ok")).to_be_visible()
    expect(stop).to_be_disabled()
    expect(page.locator("#finish-reason")).not_to_contain_text("stopped")


def test_a_stopped_answer_keeps_popovers_chart_verdict_and_matches_the_stored_turn(page: Page, server_url: str) -> None:
    open_with_regex(page, server_url, LONG, 400)
    page.locator("#chat-input textarea").fill("Count from 1 to 100.")
    page.locator("#send-btn").click()
    expect(page.locator("#token-panel .tok[data-index='3']")).to_be_visible(timeout=SLOW)
    expect(page.locator("#stop-btn")).to_be_enabled()
    # the tokens on screen and the click in one tick: the answer keeps exactly those
    shown = page.evaluate(
        """() => { const n = document.querySelectorAll('#token-panel .tok[data-index]').length;
                   document.querySelector('#stop-btn').click(); return n; }"""
    )

    verdict = page.locator("#validation-status .pg-verdict")
    expect(verdict).to_contain_text("stopped by the user", timeout=SLOW)
    expect(verdict).to_contain_text("not valid (yet)")
    expect(page.locator("#validation-status .pg-ok")).to_have_count(0)
    expect(page.locator("#finish-reason")).to_contain_text("stopped by the user")
    expect(page.locator("#stop-btn")).to_be_disabled()
    expect(page.locator(".toast-body")).to_have_count(0)  # the Stop's own second step, with nothing to cut, is quiet
    expect(page.locator("#chatbot").get_by_text("Error", exact=True)).to_have_count(0)
    tokens = page.locator("#token-panel .tok[data-index]")
    count = tokens.count()
    assert count == shown > 3
    expect(page.locator("#token-panel .tok[data-index] .pop")).to_have_count(count)

    stored = exported_messages(page)[-1]["content"]
    # the chatbot renders a message's content after the panels of the same update: read until it shows
    answer = page.locator("#chatbot [data-testid=bot] .message-content")
    poll_equal(page, lambda: answer.inner_text().strip("\n"), stored)

    tokens.nth(2).click()
    expect(page.locator("#next-token-panel")).to_contain_text("at token #2", timeout=SLOW)


# The page's thread held (as a slow device or link would) until the server has decoded the whole answer and
# sent every update, then the tokens on screen counted and Stop clicked in the same task.
LAGGING_CLICK = """() => {
    const decoding = () => {
        const get = new XMLHttpRequest();
        get.open('GET', '/metrics', false);
        get.send();
        return get.responseText.split('\\n').filter(line => line.startsWith('tgi_batch_current_size'))
            .reduce((rows, line) => rows + parseFloat(line.split(' ').pop()), 0);
    };
    const hold = ms => { const until = Date.now() + ms; while (Date.now() < until) {} };
    const gaveUp = Date.now() + 120000;
    while (decoding() > 0 && Date.now() < gaveUp) hold(100);
    hold(1500);
    const n = document.querySelectorAll('#token-panel .tok[data-index]').length;
    document.querySelector('#stop-btn').click();
    return n;
}"""


def test_a_stop_on_a_screen_that_lags_the_decode_keeps_what_the_screen_showed(page: Page, server_url: str) -> None:
    open_with_regex(page, server_url, WHOLE, 400)  # seconds of decoding after the hold starts
    page.locator("#chat-input textarea").fill("Count from 1 to 100.")
    page.locator("#send-btn").click()
    expect(page.locator("#token-panel .tok[data-index='3']")).to_be_visible(timeout=SLOW)
    shown = page.evaluate(LAGGING_CLICK)

    verdict = page.locator("#validation-status .pg-verdict")
    expect(verdict).to_contain_text("stopped by the user", timeout=SLOW)
    expect(page.locator("#finish-reason")).to_contain_text("stopped by the user")
    expect(page.locator("#stop-btn")).to_be_disabled()
    tokens = page.locator("#token-panel .tok[data-index]")
    expect(tokens).to_have_count(shown)
    stored = exported_messages(page)[-1]["content"]
    answer = page.locator("#chatbot [data-testid=bot] .message-content")
    poll_equal(page, lambda: answer.inner_text().strip("\n"), stored)
    expect(verdict).to_contain_text("not valid (yet)")  # cut: the whole answer has at least 61 numbers
