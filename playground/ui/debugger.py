"""The constraint debugger in the UI: why a token was refused, branches from any token, testing an
instance (`check-text`) and confidence per JSON field (`field-panel`).

Plain handler functions over the library (tested without a browser), plus `render` and `setup`, which
layout and create_ui call to put the panels under the chat's insight panels.
"""

from __future__ import annotations

import re
from typing import Any

import gradio as gr
from pydantic import BaseModel, Field

from playground import client_scope, render
from playground.debug.check import check_text
from playground.debug.why import reasons_at
from playground.errors import ParameterError
from playground.providers.registry import Registry
from playground.types import FieldConfidence, GenerationResult
from playground.ui import stopped
from playground.ui.handlers import error_message
from playground.ui.panels import html
from playground.ui.state import ChatState, Form
from playground.wire import inbound

ORIGINAL = "original answer"
REASONS_EMPTY = '<div class="pg-reasons pg-empty">Click a token to see why the alternatives were refused.</div>'


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


def _engine(registry: Registry, model: str, what: str) -> Any:
    """The local engine behind `model`; a remote provider has no masks to explain, and the message says so."""
    provider, model_id = registry.resolve(model)
    engine_of = getattr(provider, "engine", None)
    if engine_of is None:
        raise ParameterError(f"{what} needs the local engine: provider {provider.provider_id!r} does not expose masks")
    return engine_of(model_id)


# --- test an instance ------------------------------------------------------------------------------


def check_instance(registry: Registry, form: Form, text: str) -> str:
    """The mask walk and final verdict for a pasted candidate, under the form's constraint."""
    try:
        grammar = inbound.grammar_for(form.kind, form.constraint_text)
        if grammar is None:
            raise ParameterError("pick a constraint first: there is nothing to check the text against")
        engine = _engine(registry, form.model, "checking an instance")
        result = check_text(engine, grammar, text, form.constraint_engine)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a message in the UI
        return render.error_box(error_message(exc))
    verdict = render.box(
        "ok" if result.validation.valid else "bad" if result.validation.valid is False else "muted",
        f"final verdict: {result.validation.message}",
    )
    if result.accepted:
        walk = render.box("ok", f"✓ accepted by the masks of {result.constraint_engine} ({len(result.tokens)} tokens)")
        shown = render.esc(text)
    else:
        refused = result.first_refused
        assert refused is not None
        where = "the end of text" if refused.position == len(result.tokens) else f"token #{refused.position}"
        walk = render.box("bad", f"✗ {where} {refused.text!r} refused: {refused.reason}")
        at = refused.offset
        shown = f'{render.esc(text[:at])}<mark class="refused">{render.esc(text[at:] or "⏎ end")}</mark>'
    agree = "" if result.agree else render.box("warn", "⚠ the masks and the final verdict disagree")
    return f'<div class="pg-check" data-accepted="{str(result.accepted).lower()}">{walk}{verdict}{agree}<pre>{shown}</pre></div>'


# --- confidence per field ----------------------------------------------------------------------------


def fields_html(state: ChatState) -> str:
    """One row per JSON value of the answer: model probability (min, product), mass kept, overrides, forced."""
    fields: list[FieldConfidence] | None = state.result.best.fields if state.result else None
    if not fields:
        return '<div class="pg-fields pg-empty">Confidence per field appears for JSON schema answers.</div>'
    rows = "".join(
        f'<tr data-path="{render.esc(f.path)}"><td><code>{render.esc(f.path)}</code></td>'
        f'<td class="cand-text"><pre>{render.esc(repr_value(f.value))}</pre></td>'
        f'<td class="num" style="background:{render.colour(f.prob_min)}">{render.pct(f.prob_min)}</td>'
        f'<td class="num">{render.pct(f.prob_product)}</td>'
        f'<td class="num">{"—" if f.mass_kept_min is None else render.pct(f.mass_kept_min)}</td>'
        f'<td>{"⚠ yes" if f.overridden else "no"}</td><td class="num">{f.forced}/{f.tokens}</td></tr>'
        for f in fields
    )
    head = (
        "<tr><th>field</th><th>value</th><th>model p (min token)</th><th>model p (value)</th>"
        "<th>mass kept (min)</th><th>overridden</th><th>forced/tokens</th></tr>"
    )
    return f'<div class="pg-fields"><table>{head}{rows}</table></div>'


def repr_value(value: object) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


# --- why a token was refused -------------------------------------------------------------------------


def reasons_html(registry: Registry, state: ChatState, index: int | None, top_k: int = 20) -> str:
    """At a pinned answer position: each refused candidate of the next-token chart, and why."""
    if state.request is None or index is None:
        return REASONS_EMPTY
    try:
        if not 0 <= index < len(state.tokens):
            raise ParameterError(f"token index {index} is out of range (the answer has {len(state.tokens)} tokens)")
        prefix = stopped.answer_text(state.tokens[:index])
        params = state.request.params
        if params.grammar is None:
            return render.box("muted", "no constraint: nothing was refused")
        engine = _engine(registry, state.request.model, "explaining a refused token")
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
    rows = "".join(
        f'<tr class="{"ok" if r.allowed else "refused"}"><td>{render.token_label(r.text)}</td>'
        f'<td class="num">{render.pct(render.prob(raw[r.id])) if r.id in raw else "—"}</td>'
        f'<td class="reason">{reason_html(r.reason)}</td></tr>'
        for r in result.reasons
    )
    where = f"before token #{index} ({state.tokens[index].text!r})"
    head = "<tr><th>token</th><th>model p</th><th>why</th></tr>"
    return f'<div class="pg-reasons"><div class="legend">{render.esc(where)}</div><table>{head}{rows}</table></div>'


def reason_html(reason: str) -> str:
    """A reason with its `quoted` parts as code, everything escaped."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", render.esc(reason))


# --- branches ------------------------------------------------------------------------------------------


def pin(state: ChatState, branches: BranchState, index: int | None) -> tuple[BranchState, str]:
    """Remember the clicked position; offer its most likely allowed alternative as the branch text."""
    if branches.turn != _turn_key(state):
        branches = BranchState(turn=_turn_key(state))
    branches.pinned = index
    if index is None or not 0 <= index < len(state.tokens):
        return branches, ""
    token = state.tokens[index]
    others = [t.text for t in token.top_tokens if t.id != token.id and t.logprob is not None and not t.special]
    return branches, others[0] if others else token.text


def branch(registry: Registry, state: ChatState, branches: BranchState, text: str) -> tuple[BranchState, Any, str]:
    """Continue the turn from the pinned position with `text` forced there; the new branch is shown."""
    try:
        if state.request is None or branches.pinned is None or branches.turn != _turn_key(state):
            raise ParameterError("click a token of the answer first: the branch starts at that token")
        position = branches.pinned
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


def branch_labels(branches: BranchState) -> list[str]:
    return [ORIGINAL] + [f"branch {i} at #{b.position}: {b.text!r}" for i, b in enumerate(branches.branches, 1)]


def branch_html(state: ChatState, branches: BranchState, label: str | None) -> str:
    """The chosen branch: the kept prefix, the forced text, the continuation's tokens, verdict and logprob."""
    labels = branch_labels(branches)
    if label not in labels or label == ORIGINAL or state.result is None:
        if state.result is None:
            return '<div class="pg-branch pg-empty">Click a token, then continue from there.</div>'
        seq = state.result.best
        return _branch_view(render.tokens_html(seq.tokens, state.mode), seq, state.result.constraint_kind)
    chosen = branches.branches[labels.index(label) - 1]
    seq = chosen.result.best
    kept = render.esc(stopped.answer_text(state.tokens[: chosen.position]))
    forced = f'<mark class="forced" title="forced through the constraint">{render.esc(chosen.text)}</mark>'
    body = f'<pre class="answer">{kept}{forced}{render.esc(seq.generated_text)}</pre>'
    return _branch_view(body + render.tokens_html(seq.tokens, state.mode), seq, chosen.result.constraint_kind)


def _branch_view(body: str, seq: Any, kind: str) -> str:
    total = f'<div class="legend">total logprob {seq.total_logprob:.3f} · {seq.generated_tokens} tokens</div>'
    return f'<div class="pg-branch">{body}{render.validation_html(seq, kind)}{total}</div>'


# --- layout and events ---------------------------------------------------------------------------------


def render_panels() -> dict[str, Any]:
    """The debugger's components, placed under the chat's insight panels."""
    gr.Markdown("**Confidence per field** — the model's own probability of each JSON value")
    fields = html("field-panel", fields_html(ChatState()))
    with gr.Accordion("Why refused · branch from a token", open=True, elem_id="debugger"):
        gr.Markdown("Click a token above: the alternatives the constraint refused there, and why.")
        reasons = html("reason-panel", REASONS_EMPTY)
        with gr.Row(equal_height=True):
            text = gr.Textbox(
                show_label=False, placeholder="Text to put at the clicked token", scale=4, elem_id="branch-text"
            )
            run = gr.Button("Continue from here", scale=1, elem_id="branch-btn")
        picker = gr.Radio(
            [ORIGINAL], value=ORIGINAL, label="Branches of this turn", visible=False, elem_id="branch-picker"
        )
        panel = html("branch-panel")
    with gr.Accordion("Test an instance", open=False, elem_id="check"):
        candidate = gr.Textbox(
            lines=4, label="Candidate output, tokenized as the model would write it", elem_id="check-text"
        )
        check = gr.Button("Check against the constraint", elem_id="check-btn")
        result = html("check-result")
    return {
        "field_panel": fields,
        "reason_panel": reasons,
        "branch_text": text,
        "branch_btn": run,
        "branch_picker": picker,
        "branch_panel": panel,
        "check_text": candidate,
        "check_btn": check,
        "check_result": result,
        "branch_state": gr.State(BranchState()),
    }


def setup(registry: Registry, c: dict[str, Any], form: list[Any]) -> None:
    """Wire the debugger's events next to the chat's (token clicks, finished turns)."""

    def on_click(state: ChatState, branches: BranchState, evt: gr.EventData) -> tuple:
        index = getattr(evt, "index", None)
        return pin(state, branches, int(index) if isinstance(index, (int, float)) else None)

    c["tokens"].click(on_click, [c["state"], c["branch_state"]], [c["branch_state"], c["branch_text"]]).then(
        lambda state, branches: reasons_html(registry, state, branches.pinned),
        [c["state"], c["branch_state"]],
        c["reason_panel"],
        show_progress="minimal",
    )
    for trigger in (c["branch_btn"].click, c["branch_text"].submit):
        trigger(
            lambda state, branches, text: branch(registry, state, branches, text),
            [c["state"], c["branch_state"], c["branch_text"]],
            [c["branch_state"], c["branch_picker"], c["branch_panel"]],
        )
    c["branch_picker"].input(branch_html, [c["state"], c["branch_state"], c["branch_picker"]], c["branch_panel"])

    def on_turn(state: ChatState) -> tuple:
        fresh = BranchState(turn=_turn_key(state))
        return fields_html(state), fresh, gr.update(choices=[ORIGINAL], value=ORIGINAL, visible=False), "", ""

    c["verdict"].change(
        on_turn,
        c["state"],
        [c["field_panel"], c["branch_state"], c["branch_picker"], c["branch_panel"], c["reason_panel"]],
        show_progress="hidden",
    )

    def on_check(text: str, *values: Any) -> str:
        try:
            parsed = Form.from_values(list(values))
        except Exception as exc:  # noqa: BLE001
            return render.error_box(error_message(exc))
        return check_instance(registry, parsed, text)

    c["check_btn"].click(on_check, [c["check_text"], *form], c["check_result"])
