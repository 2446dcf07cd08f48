"""The Compare tab's engines view: the same turn once per constraint engine (and with another model), side by side.

The engines disagree on the same constraint (a keyword one ignores, whitespace, key order); one column
each shows the text, the verdict, compile time, tokens/s, the share of the model's mass kept, and where
the tokens part from the first column's.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground import client_scope, render
from playground.constraints import backends
from playground.errors import ParameterError
from playground.providers.registry import Registry
from playground.render.panels import Column, columns_html
from playground.ui import controls
from playground.ui.components import Components, EngineCompare, html
from playground.ui.handlers import _last_user, _without_last_exchange, error_message
from playground.ui.state import ChatState, Form, chat_inputs, params_of
from playground.wire import tools


def compare_engines(registry: Registry, form: Form, state: ChatState, user_text: str, other_model: str | None) -> str:
    """One column per engine on the form's model, plus one for `other_model` (form's engine); never raises."""
    try:
        text = user_text.strip() or _last_user(state)
        if form.kind in ("none", "processor"):
            raise ParameterError("pick a constraint (JSON schema, regex, choice, grammar or tools) to compare engines")
        system = tools.ui_system(form.kind, form.constraint_text, form.system_prompt)
        inputs = chat_inputs(system, _without_last_exchange(state.messages, user_text), text)
        params = params_of(form)
    except Exception as exc:  # noqa: BLE001
        return render.error_box(error_message(exc))
    runs = [(form.model, engine, engine) for engine in backends.names()]
    if other_model and other_model != form.model:
        runs.append((other_model, form.constraint_engine, f"{other_model} ({form.constraint_engine})"))
    with client_scope.scoped(state.cache_scope()):
        columns = [
            _run(registry, model, inputs, params.model_copy(update={"constraint_engine": e}), label)
            for model, e, label in runs
        ]
    return columns_html(columns)


def _run(registry: Registry, model: str | None, inputs: list, params: Any, label: str) -> Column:
    try:
        provider, model_id = registry.resolve(model)
        return Column(label, result=provider.generate(model_id, inputs, params))
    except Exception as exc:  # noqa: BLE001 - an engine that refuses the constraint is one column's answer
        return Column(label, error=error_message(exc))


def render_engine_compare(registry: Registry) -> EngineCompare:
    """The engines row of the Compare tab: a button, an optional second model, the columns."""
    with gr.Row(equal_height=True):
        run = gr.Button("Compare engines", scale=1, elem_id="compare-engines-btn")
        model = gr.Dropdown(
            choices=controls.model_choices(registry),
            value=None,
            label="and another model (optional)",
            scale=3,
            elem_id="compare-model",
        )
    return EngineCompare(run=run, model=model, panel=html("compare-engines"))


def setup_engine_compare_events(registry: Registry, c: Components) -> None:
    """Run the engines comparison from the tab's message box, the conversation and the form."""

    def on_click(text: str, state: ChatState, other_model: str | None, *values: Any) -> str:
        try:
            parsed = Form.from_values(list(values))
        except Exception as exc:  # noqa: BLE001
            return render.error_box(error_message(exc))
        return compare_engines(registry, parsed, state, text, other_model)

    engines = c.compare.engines
    engines.run.click(on_click, [c.compare.input, c.state, engines.model, *c.form_inputs()], engines.panel)
