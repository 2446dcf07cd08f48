"""The inspect panel beside the constraint editor: what every engine makes of the constraint, as you type."""

from __future__ import annotations

import logging
import threading
from typing import Any

from playground import render
from playground.constraints import Constraint
from playground.constraints.inspection import InspectResponse, inspect_constraint
from playground.providers.registry import Registry
from playground.render.inspection import inspect_html
from playground.ui import controls
from playground.ui.components import Components
from playground.ui.handlers import error_message
from playground.wire import tools

log = logging.getLogger(__name__)


def warm_engines(registry: Registry) -> threading.Thread:
    """At start-up, in the background: the default model's compile workers and every engine's tables, so
    neither the inspect panel nor the first turn waits for them."""

    def warm() -> None:
        try:
            registry.local_engine(None, "warming the engines").compiler.prepare()
        except Exception as exc:  # noqa: BLE001 - a remote default model has no local engine to warm
            log.info("engines not warmed at start-up: %s", exc)

    thread = threading.Thread(target=warm, daemon=True, name="warm-engines")
    thread.start()
    return thread


def inspect_report(registry: Registry, model: str | None, constraint: Constraint) -> InspectResponse:
    """Every engine's report, compiled with the tokenizer of the local engine serving `model`."""
    return inspect_constraint(registry.local_engine(model, "the inspect panel").compiler, constraint)


def inspect_panel(registry: Registry, kind: str, text: str | None, model: str | None) -> Any:
    """The panel's HTML; never raises (it runs as the editor's text changes)."""
    if kind in ("none", "processor") or not (text or "").strip():
        return ""
    try:
        constraint = _constraint(kind, text or "")
        if constraint.kind == "none":  # tools with tool_choice none
            return ""
        report = inspect_report(registry, model, constraint)
    except Exception as exc:  # noqa: BLE001 - the constraint's own status box explains a bad constraint
        return render.box("muted", f"engines not compared: {error_message(exc)}")
    return inspect_html(report)


def _constraint(kind: str, text: str) -> Constraint:
    """The constraint a turn decodes under (a schema's objects closed, as a request's are); for tools, the JSON
    schema of the calls they allow."""
    if kind == "tools":
        return Constraint.from_grammar(tools.ui_grammar(text))
    return Constraint.from_grammar(Constraint.parse(kind, text).to_grammar())


def setup_inspect_events(registry: Registry, c: Components) -> None:
    """Check the constraint and refresh the panel whenever its text changes (picking a kind or an example sets it),
    in one event: as two change events of the editor (the status, the panel) they set each other off again and
    again after a keystroke in Gradio 6, ~5 requests a second for as long as the page stayed open. One check at a
    time: the keystrokes made during one are checked together after it, with the editor's text then (a debounce
    that skipped superseded keystrokes in the browser could skip the last one too, and the panel stayed on an
    older text)."""
    ed = c.constraint

    def check_text(kind: str, text: str | None, model: str | None) -> tuple[Any, Any]:
        return controls.constraint_status(kind, text), inspect_panel(registry, kind, text, model)

    ed.text.change(
        check_text,
        [ed.kind, ed.text, c.model],
        [ed.status, ed.inspect_panel],
        show_progress="hidden",
        trigger_mode="always_last",
    )
