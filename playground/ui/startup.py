"""While the operator's model loads (a Space's cold start), the page says so; a turn sent meanwhile waits for it."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground import render
from playground.providers.registry import Registry
from playground.ui.components import html

TICK_S = 2.0


def banner_html(registry: Registry) -> str:
    """Loading (with the seconds so far), failed (with why), or nothing once the model is ready."""
    if registry.startup is None:
        return ""
    status = registry.startup.status()
    if status["state"] == "failed":
        return render.error_box(f"the model {status['model']} failed to load: {status['error']}")
    if status["state"] == "ready":
        return ""
    return render.box(
        "warn",
        f"Loading {status['model']}: {status['elapsed_s']:.0f} s so far (a first start downloads or converts "
        "the weights). Write your constraint meanwhile: a message sent now is answered once the model is ready.",
        elem_class="pg-loading",
    )


def render_banner(demo: gr.Blocks, registry: Registry) -> None:
    """The banner, refreshed every TICK_S seconds until the load ends (and on every page load)."""
    if registry.startup is None:
        return
    banner = html("model-status", banner_html(registry))
    timer = gr.Timer(TICK_S)

    def tick() -> tuple[str, Any]:
        loading = registry.startup is not None and registry.startup.status()["state"] == "loading"
        return banner_html(registry), gr.Timer(active=loading)

    timer.tick(tick, None, [banner, timer], show_progress="hidden")
    demo.load(tick, None, [banner, timer], show_progress="hidden")
