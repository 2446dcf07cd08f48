"""In Chromium: a choice turn's answers ranked by themselves after it, and 50 prompts evaluated with a progress bar, charts and a row opened."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.ui_helpers import SLOW, open_app, send, use_constraint


def test_choice_turn_ranks_its_answers_and_fifty_prompts_evaluate(page: Page, server_url: str) -> None:
    open_app(page, server_url)
    use_constraint(page, "choice", "red\ngreen\n<b>blue</b>", max_new_tokens=4)
    send(page, "The color of grass is")
    expect(page.locator("#validation-status")).to_contain_text("valid", timeout=SLOW)

    # no click: the ranking fills in by itself once the turn has streamed
    chart = page.locator("#score-panel .pg-score")
    expect(chart.locator(".bar-row")).to_have_count(3, timeout=SLOW)
    expect(chart).to_contain_text("<b>blue</b>")  # escaped: shown as text, never markup
    expect(page.locator("#score-panel b", has_text="blue")).to_have_count(0)

    page.get_by_role("tab", name="Evaluate").click()
    page.locator("#eval-prompts textarea").fill("\n".join(f"Name a color ({i}):" for i in range(50)))
    page.locator("#eval-run").click()
    progress = page.locator("#eval-progress progress")
    expect(progress).to_be_visible(timeout=SLOW)
    expect(page.locator("#eval-progress")).to_contain_text("50 of 50 prompts", timeout=SLOW * 3)
    panel = page.locator("#eval-panel")
    expect(panel).to_contain_text("Mass kept per prompt")
    expect(panel.locator(".bar-row")).to_have_count(50 + panel.locator(".pg-chart").nth(1).locator(".bar-row").count())
    expect(panel).to_contain_text("valid 100.0%")

    expect(page.locator(".toast-body")).to_have_count(0)  # no event failed
    page.locator("#eval-row input").click()
    page.get_by_role("option", name="#7: Name a color (7):").click()
    row = page.locator("#eval-row-panel")
    expect(row).to_contain_text("#7", timeout=SLOW)
    expect(row.locator(".tok").first).to_be_visible()
    expect(page.locator("#eval-export")).to_contain_text(".csv")
    expect(page.locator("#eval-export")).to_contain_text(".jsonl")


def test_an_upload_keeps_multi_line_prompts_whole_and_says_what_it_cannot_read(
    page: Page, server_url: str, tmp_path
) -> None:
    """A quoted prompt over two lines was split into two prompts; an unreadable file's error became a prompt."""
    open_app(page, server_url)
    page.get_by_role("tab", name="Evaluate").click()
    good = tmp_path / "set.csv"
    good.write_text('\ufeffprompt\n"Line one\nline two: is it hot?"\nIs ice hot?\n', encoding="utf-8")
    with page.expect_file_chooser() as chooser:
        page.locator("#eval-upload").click()
    chooser.value.set_files(str(good))
    box = page.locator("#eval-prompts textarea")
    two = re.compile(r'^\{.*"prompt": "Line one\\nline two: is it hot\?".*\n\{.*"prompt": "Is ice hot\?"')
    expect(box).to_have_value(two, timeout=SLOW)
    bad = tmp_path / "other.csv"
    bad.write_text("question\nx\n", encoding="utf-8")
    with page.expect_file_chooser() as chooser:
        page.locator("#eval-upload").click()
    chooser.value.set_files(str(bad))
    expect(page.locator("#eval-panel .pg-error")).to_contain_text("other.csv: the CSV needs a `prompt` column")
    expect(box).not_to_have_value(re.compile("CSV needs"))
