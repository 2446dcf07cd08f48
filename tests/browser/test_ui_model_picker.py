"""A model that fails to load leaves the picker on the last good model; offline, a hub id fails at once."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import SLOW, open_app, send, set_parameter
from tests.support import free_port


def test_a_failed_load_puts_the_picker_back_and_chat_keeps_working(page: Page, start_server) -> None:
    # A hub nobody answers for (HF_HUB_OFFLINE unset): only the local cache may be searched.
    offline = {"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    url = start_server("--model", "embedded", "--allow-model-loading", env=offline)
    open_app(page, url)
    picker = page.locator("#model-picker input")
    good = picker.input_value()
    picker.fill("no-such-org/no-such-model")
    picker.press("Enter")

    status = page.locator("#model-status .pg-error")
    expect(status).to_contain_text("no-such-org/no-such-model", timeout=SLOW)
    expect(status).to_contain_text(re.compile("hub (was not asked|cannot be reached)"))
    expect(status).to_contain_text("still using")
    expect(picker).to_have_value(good)
    set_parameter(page, "param-max-new-tokens", "4")
    send(page, "Say hi.")
    expect(page.locator("#chat-error .pg-error")).to_have_count(0)
    expect(page.locator("#chatbot [data-testid=bot]")).to_have_count(1)
