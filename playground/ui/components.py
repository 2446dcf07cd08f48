"""The page's components as typed attributes: layout.py builds them, the event wiring reads them.

A misspelt component is an AttributeError at build time (and a type checker's error), not a KeyError
at the first click; each section is built by one `_render_*` helper.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import gradio as gr

from playground.render import STYLESHEET
from playground.ui.state import FIELDS


def html(elem_id: str, value: str = "", **kwargs: object) -> gr.HTML:
    """An HTML panel styled by the playground's sheet, with no click behaviour unless asked."""
    kwargs.setdefault("js_on_load", None)
    return gr.HTML(value, elem_id=elem_id, css_template=STYLESHEET, **kwargs)


def insight(*, collapse_empty: bool = False) -> gr.Column:
    """A panel a turn fills: on a phone (page.css) collapsed before the first answer, so the model and
    constraint pickers follow the chat; with `collapse_empty`, also while it has nothing to show."""
    return gr.Column(elem_classes=["pg-insight", *(["pg-collapse-empty"] if collapse_empty else [])])


def text_and_button(
    label: str, text_id: str, button: str, button_id: str, *, text_scale: int = 4, **button_kwargs: Any
) -> tuple[gr.Textbox, gr.Button]:
    """A one-line input labelled by its placeholder (screen readers read the label), and its button beside it."""
    with gr.Row(equal_height=True):
        text = gr.Textbox(label=label, show_label=False, placeholder=label, scale=text_scale, elem_id=text_id)
        run = gr.Button(button, scale=1, elem_id=button_id, **button_kwargs)
    return text, run


@dataclass(frozen=True)
class ConstraintEditor:
    """The constraint picker and editor, its status line, the inspect panel and the custom processor."""

    kind: gr.Radio
    example: gr.Dropdown
    text: gr.Code
    status: gr.HTML
    inspect_panel: gr.HTML
    processor_group: gr.Group
    processor: gr.Dropdown
    processor_help: gr.HTML
    processor_params: gr.Textbox
    # The kind the editor's text was put there for, set in the same update as the text: the radio flips
    # first, so a text change sent in between would otherwise be filed under the new kind. A hidden component,
    # not a gr.State: a State's value is the server's, which changes before the browser shows the new text;
    # this one's travels from the browser with the text itself.
    text_kind: gr.Textbox

    @property
    def view(self) -> list[Any]:
        """What switching kinds updates (layout.kind_view's outputs)."""
        return [self.example, self.text, self.processor_group, self.text_kind]


@dataclass(frozen=True)
class Parameters:
    """TGI's parameters; each attribute is named as its Form field (sampling: one slider per table row)."""

    max_new_tokens: gr.Slider
    stop: gr.Textbox
    truncate: gr.Number
    do_sample: gr.Checkbox
    sampling: dict[str, gr.Slider]
    seed: gr.Textbox
    top_n_tokens: gr.Slider
    best_of: gr.Slider
    constraint_engine: gr.Dropdown
    watermark: gr.Checkbox
    adapter_id: gr.Textbox
    think_first: gr.Checkbox
    max_reasoning_tokens: gr.Textbox

    def by_field(self) -> dict[str, Any]:
        """Each control under its Form field's name."""
        named = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sampling"}
        return {**named, **self.sampling}


@dataclass(frozen=True)
class Session:
    """Export and import a session file, and the share link."""

    export: gr.Button
    file: gr.File
    upload: gr.UploadButton
    share: gr.Button
    share_link: gr.Textbox
    status: gr.HTML


@dataclass(frozen=True)
class Chat:
    """The chat tab: the conversation, its buttons and the insight panels a turn fills."""

    chatbot: gr.Chatbot
    input: gr.Textbox
    send: gr.Button
    stop: gr.Button
    stop_at: gr.Number  # hidden: the tokens on screen when Stop was clicked
    retry: gr.Button
    undo: gr.Button
    clear: gr.Button
    markdown: gr.Checkbox
    error: gr.HTML
    finish: gr.HTML
    verdict: gr.HTML
    mode: gr.Radio
    tokens: gr.HTML
    next_token: gr.HTML
    bestof: gr.HTML


class InstanceCheck(NamedTuple):
    """Test an instance: a candidate text, its button and the walk's result."""

    text: gr.Textbox
    button: gr.Button
    result: gr.HTML


@dataclass(frozen=True)
class Debugger:
    """Confidence per field, why a token was refused, branches from a token, testing an instance."""

    field_panel: gr.HTML
    reason_panel: gr.HTML
    branch_text: gr.Textbox
    branch_btn: gr.Button
    branch_picker: gr.Radio
    branch_panel: gr.HTML
    branches: gr.State
    check: InstanceCheck


@dataclass(frozen=True)
class EngineCompare:
    """The Compare tab's engines row: one column per constraint engine (and another model)."""

    run: gr.Button
    model: gr.Dropdown
    panel: gr.HTML


@dataclass(frozen=True)
class ReasoningCompare:
    """The Compare tab's reasoning row: the same constrained turn with and without reasoning."""

    run: gr.Button
    with_reasoning: gr.HTML
    without_reasoning: gr.HTML


@dataclass(frozen=True)
class Compare:
    """The Compare tab: the same turn without and with the constraint, once per engine, with and without reasoning."""

    input: gr.Textbox
    run: gr.Button
    left: gr.HTML
    right: gr.HTML
    engines: EngineCompare
    reasoning: ReasoningCompare


@dataclass(frozen=True)
class EvaluateView:
    """The Evaluate tab's components."""

    prompts: gr.Textbox
    upload: gr.UploadButton
    run: gr.Button
    stop: gr.Button
    progress: gr.HTML
    panel: gr.HTML
    row: gr.Dropdown
    row_panel: gr.HTML
    export: gr.File
    rows: gr.State


@dataclass(frozen=True)
class ScoreView:
    """The chat tab's score button and its ranked chart."""

    run: gr.Button
    panel: gr.HTML


@dataclass(frozen=True)
class Code:
    """The Code tab and its snippets, by the key of each in layout.CODE_TABS."""

    tab: gr.Tab
    snippets: dict[str, gr.Code]


@dataclass(frozen=True)
class Components:
    """Every component create_ui wires, and the per-user states."""

    model: gr.Dropdown
    model_status: gr.HTML
    constraint: ConstraintEditor
    system_prompt: gr.Textbox
    params: Parameters
    session: Session
    chat: Chat
    debugger: Debugger
    compare: Compare
    code: Code
    evaluate: EvaluateView
    score: ScoreView
    state: gr.State
    model_pick: gr.State
    drafts: gr.State

    def form_inputs(self) -> list[Any]:
        """The form's components in Form field order (the order handlers receive their values)."""
        c = self.constraint
        named = {
            "model": self.model,
            "kind": c.kind,
            "constraint_text": c.text,
            "processor": c.processor,
            "processor_params": c.processor_params,
            "system_prompt": self.system_prompt,
            **self.params.by_field(),
        }
        return [named[name] for name in FIELDS]
