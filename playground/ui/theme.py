"""The page's look as Gradio takes it: the theme's colours (readable: WCAG AA contrast), page CSS and keyboard script."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

_STATIC = Path(__file__).parent / "static"
PAGE_CSS = (_STATIC / "page.css").read_text(encoding="utf-8")
# Radio groups that move with the arrow keys, dropdown lists that close on blur (static/page.js).
PAGE_HEAD = f"<script>{(_STATIC / 'page.js').read_text(encoding='utf-8')}</script>"


def theme() -> gr.themes.Base:
    """Gradio's default theme with the colours that fall under 4.5:1 against their background darkened."""
    return gr.themes.Default().set(
        button_primary_background_fill="*primary_700",
        button_primary_background_fill_hover="*primary_800",
        button_primary_text_color="white",
        body_text_color_subdued="*neutral_600",
    )


def page_assets() -> dict[str, Any]:
    """Page-wide CSS, head script and theme for gr.mount_gradio_app (the panels' own sheet is scoped to each panel)."""
    return {"css": PAGE_CSS, "head": PAGE_HEAD, "theme": theme()}
