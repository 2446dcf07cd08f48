"""The Compare tab's reasoning view: the same constrained turn with and without reasoning, both judged.

A thinking model reasons as its template says and, without reasoning, has its end delimiter forced at once
(max_reasoning_tokens 0); a model with no reasoning of its own thinks first in a plain-text block (think_first).
What the constraint costs shows in each side's verdict, mass kept and overrides, for the answer alone.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground import client_scope, render
from playground.errors import ParameterError
from playground.providers.registry import Registry
from playground.ui.components import Components, ReasoningCompare, html
from playground.ui.handlers import _last_user, _without_last_exchange, error_message
from playground.ui.state import ChatState, Form, chat_inputs, params_of
from playground.wire import tools


def compare_reasoning(registry: Registry, form: Form, state: ChatState, user_text: str) -> tuple[str, str]:
    """(with reasoning, without) as two judged sides; never raises."""
    try:
        text = user_text.strip() or _last_user(state)
        if form.kind in ("none", "processor"):
            raise ParameterError("pick a constraint to compare answers with and without reasoning")
        provider, model_id = registry.resolve(form.model)
        thinking = provider.info(model_id).reasoning is not None
        system = tools.ui_system(form.kind, form.constraint_text, form.system_prompt)
        inputs = chat_inputs(system, _without_last_exchange(state.messages, user_text), text)
        params = params_of(form)
        with_it = params.model_copy(update={"think_first": params.think_first or not thinking})
        without = params.model_copy(update={"think_first": False, "max_reasoning_tokens": 0 if thinking else None})
    except Exception as exc:  # noqa: BLE001
        box = render.error_box(error_message(exc))
        return box, box
    with client_scope.scoped(state.cache_scope()):
        return _side(provider, model_id, inputs, with_it, "with reasoning"), _side(
            provider, model_id, inputs, without, "without reasoning"
        )


def _side(provider: Any, model_id: str, inputs: list, params: Any, title: str) -> str:
    try:
        result = provider.generate(model_id, inputs, params)
    except Exception as exc:  # noqa: BLE001 - a provider that cannot reason is one side's answer
        return render.error_box(f"{title}: {error_message(exc)}")
    return render.side_html(title, result, render.validation_html(result.best, result.constraint_kind))


def render_reasoning_compare() -> ReasoningCompare:
    """The reasoning row of the Compare tab: a button and the two sides."""
    run = gr.Button("Compare with and without reasoning", elem_id="compare-reasoning-btn")
    with gr.Row():
        with_it = html("compare-with-reasoning")
        without = html("compare-without-reasoning")
    return ReasoningCompare(run=run, with_reasoning=with_it, without_reasoning=without)


def setup_reasoning_compare_events(registry: Registry, c: Components) -> None:
    """Run the reasoning comparison from the tab's message box, the conversation and the form."""

    def on_click(text: str, state: ChatState, *values: Any) -> tuple[str, str]:
        try:
            parsed = Form.from_values(list(values))
        except Exception as exc:  # noqa: BLE001
            box = render.error_box(error_message(exc))
            return box, box
        return compare_reasoning(registry, parsed, state, text)

    row = c.compare.reasoning
    row.run.click(on_click, [c.compare.input, c.state, *c.form_inputs()], [row.with_reasoning, row.without_reasoning])
