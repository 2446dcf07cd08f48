"""The constraint debugger in the UI: why a token was refused, branches from any token, testing an
instance (`check-text`) and confidence per JSON field (`field-panel`).

Plain handler functions over the library (tested without a browser), plus `render` and `setup`, which
layout and create_ui call to put the panels under the chat's insight panels.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
from pydantic import BaseModel, Field

from playground import client_scope, render
from playground.debug.check import check_text
from playground.debug.why import reasons_at
from playground.errors import ParameterError
from playground.providers.registry import Registry
from playground.render.debugger import BRANCH_EMPTY, REASONS_EMPTY, check_html
from playground.render.debugger import branch_html as render_branch
from playground.render.debugger import fields_html as render_fields
from playground.render.debugger import reasons_html as render_reasons
from playground.types import GenerationResult
from playground.types.pieces import is_byte_piece
from playground.ui import stopped
from playground.ui.components import Components, Debugger, InstanceCheck, html, insight, text_and_button
from playground.ui.handlers import error_message
from playground.ui.state import ChatState, Form
from playground.wire import inbound

ORIGINAL = "original answer"


class Branch(BaseModel):
    """One continuation of the turn from a token position."""

    position: int
    text: str
    result: GenerationResult


class BranchState(BaseModel):
    """The pinned position and the branches of the turn on screen (cleared when the turn changes)."""

    turn: str = ""
    pinned: int | None = None
    branches: list[Branch] = Field(default_factory=list)


def _turn_key(state: ChatState) -> str:
    return f"{len(state.messages)}:{stopped.answer_text(state.tokens)}"


# --- test an instance ------------------------------------------------------------------------------


def check_instance(registry: Registry, form: Form, text: str) -> str:
    """The mask walk and final verdict for a pasted candidate, under the form's constraint."""
    try:
        grammar = inbound.grammar_for(form.kind, form.constraint_text)
        if grammar is None:
            raise ParameterError("pick a constraint first: there is nothing to check the text against")
        engine = registry.local_engine(form.model, "checking an instance")
        result = check_text(engine, grammar, text, form.constraint_engine)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a message in the UI
        return render.error_box(error_message(exc))
    return check_html(result, text)


# --- confidence per field ----------------------------------------------------------------------------


def fields_html(state: ChatState) -> str:
    """Confidence per JSON field of the answer on screen."""
    return render_fields(state.result.best.fields if state.result else None)


# --- why a token was refused -------------------------------------------------------------------------


def reasons_html(registry: Registry, state: ChatState, index: int | None, top_k: int = 20) -> str:
    """At a pinned answer position: each refused candidate of the next-token chart, and why."""
    if state.request is None or index is None:
        return REASONS_EMPTY
    try:
        if not 0 <= index < len(state.tokens):
            raise ParameterError(f"token index {index} is out of range (the answer has {len(state.tokens)} tokens)")
        if state.tokens[index].segment == "reasoning":
            return render.box(
                "muted", f"token #{index} is in the reasoning, {_answer_starts(state)}: nothing is refused there"
            )
        prefix = stopped.answer_text(state.tokens[:index])
        params = state.request.params
        if params.grammar is None:
            return render.box("muted", "no constraint: nothing was refused")
        engine = registry.local_engine(state.request.model, "explaining a refused token")
        provider, model_id = registry.resolve(state.request.model)
        with client_scope.scoped(state.cache_scope()):
            dist = provider.next_token(
                model_id, state.request.inputs, params.model_copy(update={"best_of": None}), prefix=prefix, top_k=top_k
            )
        refused = [c.id for c in dist.candidates if not c.allowed]
        eos = min(engine.runner.eos_ids)
        ids = refused + ([eos] if eos not in refused else [])
        result = reasons_at(engine, params.grammar, prefix, ids, params.constraint_engine)
    except Exception as exc:  # noqa: BLE001
        return render.error_box(error_message(exc))
    raw = {c.id: c.raw_logprob for c in dist.candidates}
    return render_reasons(f"before token #{index} ({state.tokens[index].text!r})", result.reasons, raw)


# --- branches ------------------------------------------------------------------------------------------


def pin(state: ChatState, branches: BranchState, index: int | None) -> tuple[BranchState, str]:
    """Remember the clicked position; offer its most likely allowed alternative as the branch text."""
    if branches.turn != _turn_key(state):
        branches = BranchState(turn=_turn_key(state))
    branches.pinned = index
    if index is None or not 0 <= index < len(state.tokens):
        return branches, ""
    token = state.tokens[index]
    others = [
        t.text
        for t in token.top_tokens
        if t.id != token.id and t.logprob is not None and not t.special and not is_byte_piece(t.text)
    ]
    return branches, others[0] if others else token.text


def branch(registry: Registry, state: ChatState, branches: BranchState, text: str) -> tuple[BranchState, Any, str]:
    """Continue the turn from the pinned position with `text` forced there; the new branch is shown."""
    try:
        if state.request is None or branches.pinned is None or branches.turn != _turn_key(state):
            raise ParameterError("click a token of the answer first: the branch starts at that token")
        position = branches.pinned
        if 0 <= position < len(state.tokens) and state.tokens[position].segment == "reasoning":
            raise ParameterError(
                f"token #{position} is in the reasoning, {_answer_starts(state)}: a branch starts at a token of the "
                "answer (continue_from forces the answer's start, not the reasoning's)"
            )
        prefix = stopped.answer_text(state.tokens[:position]) + text
        if not prefix:
            raise ParameterError("type the text to put at that position (or pick a later token)")
        provider, model_id = registry.resolve(state.request.model)
        params = state.request.params.model_copy(update={"best_of": None, "continue_from": prefix})
        with client_scope.scoped(state.cache_scope()):
            result = provider.generate(model_id, state.request.inputs, params)
    except Exception as exc:  # noqa: BLE001
        return branches, gr.skip(), render.error_box(error_message(exc))
    branches.branches.append(Branch(position=position, text=text, result=result))
    labels = branch_labels(branches)
    return branches, gr.update(choices=labels, value=labels[-1], visible=True), branch_html(state, branches, labels[-1])


def _answer_starts(state: ChatState) -> str:
    """Where a thinking model's answer starts, in words: the constraint waits for it."""
    first = next((k for k, t in enumerate(state.tokens) if t.segment == "answer"), None)
    where = "the answer has not begun" if first is None else f"the answer starts at token #{first}"
    return f"which the constraint does not judge ({where})"


def branch_labels(branches: BranchState) -> list[str]:
    return [ORIGINAL] + [f"branch {i} at #{b.position}: {b.text!r}" for i, b in enumerate(branches.branches, 1)]


def branch_html(state: ChatState, branches: BranchState, label: str | None) -> str:
    """The chosen branch: the kept prefix, the forced text, the continuation's tokens, verdict and logprob."""
    labels = branch_labels(branches)
    if label not in labels or label == ORIGINAL or state.result is None:
        return BRANCH_EMPTY if state.result is None else render_branch(state.result, state.mode)
    chosen = branches.branches[labels.index(label) - 1]
    kept = stopped.answer_text(state.tokens[: chosen.position])
    return render_branch(chosen.result, state.mode, kept, chosen.text)


# --- layout and events ---------------------------------------------------------------------------------


def render_panels() -> Debugger:
    """The debugger's components, placed under the chat's insight panels."""
    with insight(collapse_empty=True):
        gr.Markdown("**Confidence per field** — the model's own probability of each JSON value")
        field_panel = html("field-panel", fields_html(ChatState()))
    with insight(), gr.Accordion("Why refused · branch from a token", open=True, elem_id="debugger"):
        gr.Markdown("Click a token above: the alternatives the constraint refused there, and why.")
        reason_panel = html("reason-panel", REASONS_EMPTY)
        branch_text, branch_btn = text_and_button(
            "Text to put at the clicked token", "branch-text", "Continue from here", "branch-btn"
        )
        branch_picker = gr.Radio(
            [ORIGINAL], value=ORIGINAL, label="Branches of this turn", visible=False, elem_id="branch-picker"
        )
        branch_panel = html("branch-panel")
    with gr.Accordion("Test an instance", open=False, elem_id="check"):
        candidate = gr.Textbox(
            lines=4, label="Candidate output, tokenized as the model would write it", elem_id="check-text"
        )
        check = InstanceCheck(
            candidate, gr.Button("Check against the constraint", elem_id="check-btn"), html("check-result")
        )
    branches = gr.State(BranchState())
    # Positional, in the dataclass's field order: each local is named as its field.
    return Debugger(field_panel, reason_panel, branch_text, branch_btn, branch_picker, branch_panel, branches, check)


def setup(registry: Registry, c: Components) -> None:
    """Wire the debugger's events next to the chat's (token clicks, finished turns)."""
    d, chat = c.debugger, c.chat

    def on_click(state: ChatState, branches: BranchState, evt: gr.EventData) -> tuple:
        index = getattr(evt, "index", None)
        return pin(state, branches, int(index) if isinstance(index, (int, float)) else None)

    chat.tokens.click(on_click, [c.state, d.branches], [d.branches, d.branch_text]).then(
        lambda state, branches: reasons_html(registry, state, branches.pinned),
        [c.state, d.branches],
        d.reason_panel,
        show_progress="minimal",
    )
    gr.on(
        [d.branch_btn.click, d.branch_text.submit],
        lambda state, branches, text: branch(registry, state, branches, text),
        [c.state, d.branches, d.branch_text],
        [d.branches, d.branch_picker, d.branch_panel],
    )
    d.branch_picker.input(branch_html, [c.state, d.branches, d.branch_picker], d.branch_panel)

    def on_turn(state: ChatState) -> tuple:
        fresh = BranchState(turn=_turn_key(state))
        picker = gr.update(choices=[ORIGINAL], value=ORIGINAL, visible=False)
        # (the text offered at the last turn's token too; a checked instance's result, which names the constraint it
        # was checked against, goes with its turn: the instance stays, to check again)
        return fields_html(state), fresh, picker, "", "", "", ""

    chat.verdict.change(
        on_turn,
        c.state,
        [d.field_panel, d.branches, d.branch_picker, d.branch_panel, d.reason_panel, d.branch_text, d.check.result],
        show_progress="hidden",
    )

    def on_check(text: str, *values: Any) -> str:
        try:
            parsed = Form.from_values(list(values))
        except Exception as exc:  # noqa: BLE001
            return render.error_box(error_message(exc))
        return check_instance(registry, parsed, text)

    d.check.button.click(on_check, [d.check.text, *c.form_inputs()], d.check.result)
