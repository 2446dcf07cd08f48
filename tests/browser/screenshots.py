"""The README's screenshots of the ranked answers under a choice turn and of the Evaluate tab, remade on the
embedded model in Debian's Chromium: `python -m tests.browser.screenshots` (writes docs/*.png)."""

from __future__ import annotations

import json
import os

from playwright.sync_api import Locator, Page, expect, sync_playwright

from tests.browser.ui_helpers import SLOW, open_app, paste_constraint, pick_kind, send, set_parameter
from tests.support import CHROMIUM, CHROMIUM_ARGS, REPO_ROOT, TEST_ENV, start_app

DOCS = REPO_ROOT / "docs"
CHOICES = "positive\nnegative\nneutral\n<mixed>"
REVIEWS = [  # (review, the expected label)
    ("I loved every minute of this film.", "positive"),
    ("The food was cold and the waiter rude.", "negative"),
    ("It arrived on Tuesday.", "neutral"),
    ("Great battery, terrible screen.", "<mixed>"),
    ("Best concert of my life!", "positive"),
    ("The manual is 40 pages long.", "neutral"),
    ("I want my money back.", "negative"),
    ("Not bad at all, would buy again.", "positive"),
    ("The hotel was fine, nothing special.", "neutral"),
    ("Absolutely dreadful customer service.", "negative"),
    ("The package weighs two kilos.", "neutral"),
    ("What a delightful surprise this book was.", "positive"),
]
PROMPT = "Classify the sentiment of this review: {}"


def shot(page: Page, top: Locator, bottom: Locator, name: str) -> None:
    """The page from `top`'s upper edge to `bottom`'s lower edge, the main column's width."""
    column, first, last = (x.bounding_box() for x in (page.locator("#main-column"), top, bottom))
    assert column and first and last
    scroll = page.evaluate("[window.scrollX, window.scrollY]")  # boxes are in the viewport, the clip in the page
    height = last["y"] + last["height"] - first["y"]
    clip = {"x": column["x"] + scroll[0], "y": first["y"] + scroll[1], "width": column["width"], "height": height}
    page.screenshot(path=str(DOCS / name), clip=clip, full_page=True)


def ranked_choice_turn(page: Page, url: str) -> None:
    """A sentiment choice turn and the ranking that fills in under it by itself."""
    open_app(page, url)
    pick_kind(page, "choice")
    paste_constraint(page, CHOICES)
    set_parameter(page, "param-max-new-tokens", "4")
    send(page, PROMPT.format(REVIEWS[0][0]))
    expect(page.locator("#score-panel .pg-score .bar-row")).to_have_count(4, timeout=SLOW)
    heading = page.locator("#main-column").get_by_text("Every allowed answer")
    shot(page, heading, page.locator("#score-panel"), "ranked-answers.png")


def evaluate_tab(page: Page) -> None:
    """The same constraint over the labelled reviews (JSONL): the summary, mass kept per prompt, the refusal
    reasons, a row opened."""
    page.get_by_role("tab", name="Evaluate").click()
    prompts = "\n".join(json.dumps({"prompt": PROMPT.format(r), "expected": e}) for r, e in REVIEWS)
    page.locator("#eval-prompts textarea").fill(prompts)
    page.locator("#eval-run").click()
    expect(page.locator("#eval-progress")).to_contain_text(f"{len(REVIEWS)} of {len(REVIEWS)} prompts", timeout=SLOW)
    page.locator("#eval-row input").click()
    page.get_by_role("option", name="#3: Classify").click()
    expect(page.locator("#eval-row-panel .tok").first).to_be_visible(timeout=SLOW)
    shot(page, page.locator("#eval-prompts"), page.locator("#eval-row-panel"), "evaluate-tab.png")


def main() -> None:
    for key, value in TEST_ENV.items():
        os.environ.setdefault(key, value)
    server = start_app("--model", "embedded")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_ARGS))
            page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
            ranked_choice_turn(page, server.url)
            evaluate_tab(page)
            browser.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
