"""HTML panels styled by the playground's sheet: the one component every part of the page builds."""

from __future__ import annotations

import gradio as gr

from playground.render import STYLESHEET


def html(elem_id: str, value: str = "", **kwargs: object) -> gr.HTML:
    """An HTML panel styled by the playground's sheet, with no click behaviour unless asked."""
    kwargs.setdefault("js_on_load", None)
    return gr.HTML(value, elem_id=elem_id, css_template=STYLESHEET, **kwargs)
