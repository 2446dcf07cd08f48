"""Edit an earlier message and rerun from there; the session survives a reload; a share link opens it elsewhere."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from playground.ui.sharing import share_query
from playground.ui.state import ChatState, Form
from tests.browser.ui_helpers import (
    SLOW,
    open_accordion,
    open_app,
    paste_constraint,
    pick_kind,
    poll,
    poll_equal,
    send,
    set_parameter,
)

COLOURS = ("red", "blue", "green")


def texts(page: Page, role: str) -> list[str]:
    """The bubbles' texts; read through poll (the chatbot renders a message's content after the bubble)."""
    return [t.strip("\n") for t in page.locator(f"#chatbot [data-testid={role}] .message-content").all_inner_texts()]


def expect_texts(page: Page, user: list[str], bot: list[str] | None = None) -> None:
    """The user's bubbles (and the answers', if given) read `user` (and `bot`), retried until they do."""
    poll_equal(page, lambda: texts(page, "user"), user)
    if bot is not None:
        poll_equal(page, lambda: texts(page, "bot"), bot)


def wait_for_turn(page: Page, users: int) -> None:
    expect(page.locator("#chatbot [data-testid=bot]")).to_have_count(users, timeout=SLOW)
    expect(page.locator("#stop-btn")).to_be_disabled(timeout=SLOW)
    expect(page.locator("#validation-status .pg-verdict")).to_be_visible(timeout=SLOW)
    expect(page.locator("#next-token-panel")).to_contain_text("at the end of the prompt", timeout=SLOW)


def test_editing_an_earlier_message_reruns_from_there(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    set_parameter(page, "param-max-new-tokens", "6")
    send(page, "Say hi.")
    wait_for_turn(page, 1)
    send(page, "Say bye.")
    wait_for_turn(page, 2)
    page.locator("#chatbot [data-testid=user]").first.hover()
    page.locator("#chatbot button[aria-label=Edit]").first.click()
    page.locator("#chatbot textarea").fill("Name a colour.")
    page.locator("#chatbot").get_by_role("button", name="Submit").click()
    expect(page.locator("#chatbot [data-testid=user]")).to_have_count(1, timeout=SLOW)
    wait_for_turn(page, 1)
    expect_texts(page, ["Name a colour."])


def test_the_session_survives_a_reload_and_a_share_link_opens_the_same_setup(browser, server_url: str) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    open_app(page, server_url)
    pick_kind(page, "choice")
    paste_constraint(page, "red\nblue\ngreen")
    set_parameter(page, "param-max-new-tokens", "6")
    page.locator("#param-do-sample input").check()
    set_parameter(page, "param-seed", "7")
    send(page, "Pick a colour <b>now</b>.")
    answer = poll(page, lambda: texts(page, "bot"), lambda bot: bot[0] in COLOURS, what=f"first answer in {COLOURS}")
    expect(page.locator("#next-token-panel")).to_contain_text("at the end of the prompt", timeout=SLOW)

    page.reload()
    open_app_again(page)
    expect_texts(page, ["Pick a colour <b>now</b>."], answer)
    expect(page.locator("#constraint-kind").get_by_label("choice", exact=True)).to_be_checked()
    expect(page.locator("#constraint-text .cm-content")).to_contain_text("green")

    open_accordion(page, "session")
    page.locator("#session-share").click()
    link = page.locator("#share-link textarea, #share-link input").first
    expect(link).to_have_value(lambda_free_prefix(server_url), timeout=SLOW)
    url = link.input_value()
    context.close()

    fresh = browser.new_context(viewport={"width": 1400, "height": 1000})
    shared = fresh.new_page()
    try:
        shared.goto(url)
        expect(shared.locator("#model-status .pg-box")).to_contain_text("provider local", timeout=SLOW)
        expect(shared.locator("#chatbot [data-testid=bot]")).to_have_count(1, timeout=SLOW)
        expect_texts(shared, ["Pick a colour <b>now</b>."], answer)
        expect(shared.locator("#constraint-kind").get_by_label("choice", exact=True)).to_be_checked()
        set_parameter(shared, "param-seed", "7")
        expect(shared.locator("#param-max-new-tokens input[type=number]")).to_have_value("6")
        expect(shared.locator("#param-do-sample input")).to_be_checked()
        shared.locator("#retry-btn").click()
        wait_for_turn(shared, 1)
        poll_equal(shared, lambda: texts(shared, "bot"), answer)
    finally:
        fresh.close()


def open_app_again(page: Page) -> None:
    expect(page.locator("#model-status .pg-box")).to_contain_text("provider local", timeout=SLOW)
    expect(page.locator("#chatbot [data-testid=bot]")).to_have_count(1, timeout=SLOW)


def lambda_free_prefix(server_url: str):
    return re.compile("^" + re.escape(server_url.rstrip("/") + "/?session="))


def shared_link(server_url: str) -> str:
    """A share link of a one-turn choice conversation, as the Share button writes it."""
    form = Form(model="embedded", kind="choice", constraint_text="red\nblue\ngreen", max_new_tokens=6)
    messages = [
        {"role": "user", "content": "Pick a colour."},
        {"role": "assistant", "content": "red", "constraint": "choice"},
    ]
    return server_url.rstrip("/") + "/" + share_query(form, ChatState(messages=messages))


def test_a_reload_after_a_share_link_keeps_the_shared_and_the_later_turns(page: Page, server_url: str) -> None:
    page.goto(shared_link(server_url))
    expect(page.locator("#chatbot [data-testid=bot]")).to_have_count(1, timeout=SLOW)
    expect(page).not_to_have_url(re.compile(r"[?&]session="), timeout=SLOW)
    page.reload()  # before any turn: the shared conversation, not an older autosave
    open_app_again(page)
    expect_texts(page, ["Pick a colour."])
    send(page, "Pick another colour.")
    wait_for_turn(page, 2)

    page.reload()
    expect(page.locator("#model-status .pg-box")).to_contain_text("provider local", timeout=SLOW)
    expect(page.locator("#chatbot [data-testid=bot]")).to_have_count(2, timeout=SLOW)
    expect_texts(page, ["Pick a colour.", "Pick another colour."])


def test_a_share_link_says_under_the_chat_what_it_opened(page: Page, server_url: str) -> None:
    page.goto(shared_link(server_url))
    expect(page.locator("#chat-error .pg-shared")).to_be_visible(timeout=SLOW)
    expect(page.locator("#chat-error")).to_contain_text("opened a shared session (2 messages)")


def test_a_damaged_share_link_says_so_under_the_chat(page: Page, server_url: str) -> None:
    page.goto(shared_link(server_url)[:-12])  # cut off when copied
    expect(page.locator("#chat-error .pg-error")).to_be_visible(timeout=SLOW)
    expect(page.locator("#chat-error")).to_contain_text("the share link is damaged")


def test_a_share_link_past_this_servers_limits_opens_fitted_and_sends(page: Page, server_url: str) -> None:
    """A link from a server with other limits (or edited by hand): each setting this page cannot hold is
    brought into range and named, and Send works; before, every Send failed with Gradio's bare "Error"."""
    form = Form(
        model="embedded", kind="choice", constraint_text="red\nblue", do_sample=True, best_of=9, max_new_tokens=4
    )
    form = form.model_copy(update={"constraint_engine": "no-such-engine"})
    page.goto(server_url.rstrip("/") + "/" + share_query(form, ChatState()))
    shared = page.locator("#chat-error .pg-shared")
    expect(shared).to_contain_text("best_of 9 is out of this server's range", timeout=SLOW)
    expect(page.locator("#chat-error")).to_contain_text("constraint_engine 'no-such-engine' is not offered here")
    send(page, "Pick a colour.")
    expect(page.locator("#chat-error .pg-error")).to_have_count(0)
    poll(page, lambda: texts(page, "bot"), lambda bot: bot in (["red"], ["blue"]))


def test_a_share_link_naming_a_model_not_served_here_opens_on_the_default_and_says_so(
    page: Page, server_url: str
) -> None:
    """The picker fell back to the default model without a word."""
    form = Form(model="org/elsewhere", kind="choice", constraint_text="red\nblue", max_new_tokens=4)
    page.goto(server_url.rstrip("/") + "/" + share_query(form, ChatState()))
    shared = page.locator("#chat-error .pg-shared")
    expect(shared).to_contain_text("model 'org/elsewhere' is not served here: opened on ", timeout=SLOW)
    expect(page.locator("#model-status .pg-box")).to_contain_text("provider local", timeout=SLOW)
