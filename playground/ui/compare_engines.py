"""The Compare tab's engines view: the same turn once per constraint engine (and with another model), side by side.

The engines disagree on the same constraint (a keyword one ignores, whitespace, key order); one column
each shows the text, the verdict, compile time, tokens/s, the share of the model's mass kept, and where
the tokens part from the first column's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from playground import client_scope, render
from playground.compiler import ENGINES
from playground.debug import tools
from playground.errors import ParameterError
from playground.providers.registry import Registry
from playground.types import GeneratedToken, GenerationResult
from playground.ui import controls
from playground.ui.handlers import _last_user, _without_last_exchange, error_message
from playground.ui.panels import html
from playground.ui.state import ChatState, Form, chat_inputs, params_of


@dataclass
class Column:
    """One run of the turn: its label and its result, or the error that stopped it."""

    label: str
    result: GenerationResult | None = None
    error: str | None = None


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
    runs = [(form.model, engine, engine) for engine in ENGINES]
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


def columns_html(columns: list[Column]) -> str:
    """The columns side by side; token differences are counted against the first column that ran."""
    first = next((c.result for c in columns if c.result is not None), None)
    cells = "".join(_column(c, first) for c in columns)
    return f'<div class="pg-engine-compare" style="display:flex;gap:12px;align-items:flex-start">{cells}</div>'


def _column(column: Column, first: GenerationResult | None) -> str:
    head = f"<h4>{render.esc(column.label)}</h4>"
    if column.result is None:
        return f'<div class="pg-side pg-engine-col" style="flex:1">{head}{render.error_box(column.error or "")}</div>'
    result = column.result
    return (
        f'<div class="pg-side pg-engine-col" style="flex:1">{head}'
        f'<pre class="answer">{render.esc(result.generated_text)}</pre>'
        f"{render.validation_html(result.best, result.constraint_kind)}"
        f'<div class="pg-details">{_figures(result)}</div>'
        f'<div class="pg-engine-diff">{render.esc(_difference(result, first))}</div>'
        f"{render.tokens_html(result.best.tokens)}</div>"
    )


def _figures(result: GenerationResult) -> str:
    timings = result.timings
    compile_ms = f"{timings.compile_s * 1000:.1f} ms" + (" (cached)" if timings.compile_cached else "")
    kept = _mean_mass_kept(result.best.tokens)
    pairs = [
        ("engine", result.constraint_engine or "none"),
        ("compile", compile_ms),
        ("tokens/s", f"{timings.tokens_per_s:.1f}"),
        ("mass kept", "—" if kept is None else f"{kept:.0%}"),
    ]
    return render.kv_cells(pairs)


def _mean_mass_kept(tokens: list[GeneratedToken]) -> float | None:
    kept = [t.mass_kept for t in tokens if t.mass_kept is not None]
    return sum(kept) / len(kept) if kept else None


def _difference(result: GenerationResult, first: GenerationResult | None) -> str:
    """Where this column's tokens part from the first column's, or that they are the same."""
    if first is None or result is first:
        return "reference for the token differences"
    ours, theirs = result.best.tokens, first.best.tokens
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if a.id != b.id:
            return f"differs from token {k}: {a.text!r} here, {b.text!r} in the first column"
    if len(ours) != len(theirs):
        return f"same first {min(len(ours), len(theirs))} tokens, then {len(ours)} against {len(theirs)}"
    return "same tokens as the first column"


def render_engine_compare(registry: Registry) -> dict[str, Any]:
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
    return {"compare_engines_btn": run, "compare_model": model, "compare_engines": html("compare-engines")}


def setup_engine_compare_events(registry: Registry, c: dict[str, Any], form: list[Any]) -> None:
    """Run the engines comparison from the tab's message box, the conversation and the form."""

    def on_click(text: str, state: ChatState, other_model: str | None, *values: Any) -> str:
        try:
            parsed = Form.from_values(list(values))
        except Exception as exc:  # noqa: BLE001
            return render.error_box(error_message(exc))
        return compare_engines(registry, parsed, state, text, other_model)

    inputs = [c["compare_input"], c["state"], c["compare_model"], *form]
    c["compare_engines_btn"].click(on_click, inputs, c["compare_engines"])
