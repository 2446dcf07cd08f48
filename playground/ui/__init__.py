"""The playground UI: `create_ui(registry)` builds the Gradio Blocks; the API mounts it at "/"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr

from playground import render
from playground.providers.registry import Registry
from playground.ui import controls, debugger, drafts, handlers, layout, sharing
from playground.ui.chat_view import chatbot_value
from playground.ui.compare_engines import setup_engine_compare_events
from playground.ui.handlers import Panels
from playground.ui.inspect import setup_inspect_events
from playground.ui.state import ChatState, Form, ModelPick, UISettings

__all__ = ["create_ui", "page_assets", "UISettings"]

Comps = dict[str, Any]


def page_assets() -> dict[str, str]:
    """Page-wide CSS for gr.mount_gradio_app (the panels' own sheet is scoped to each panel)."""
    return {"css": layout.PAGE_CSS}


def create_ui(registry: Registry, *, settings: UISettings | None = None) -> gr.Blocks:
    """Build the playground's Blocks for the models `registry` serves."""
    settings = settings or UISettings()
    # uploads (session files) are read at once: Gradio deletes them after 10 minutes, checking every 5
    with gr.Blocks(title=settings.title, analytics_enabled=False, delete_cache=(300, 600)) as demo:
        gr.Markdown(
            f"## {render.esc(settings.title)}\n"
            "Constrain a model with a JSON schema, a regex, a choice list or a grammar, then see what the "
            "constraint did to every token."
        )
        comps = layout.render_all(registry)
        comps["state"] = gr.State(ChatState())
        comps["model_pick"] = gr.State(ModelPick())
        comps["drafts"] = gr.State({})
        _setup_events(demo, registry, settings, comps)
    return demo


def _panel_outputs(c: Comps) -> list[Any]:
    return [
        c["state"],
        c["chatbot"],
        c["tokens"],
        c["finish"],
        c["verdict"],
        c["bestof"],
        c["error"],
        c["chat_input"],
        c["stop_btn"],
    ]


def _stop_button(running: bool | None) -> Any:
    """Stop is live (and red) only while a turn runs."""
    if running is None:
        return gr.skip()
    return gr.update(interactive=running, variant="stop" if running else "secondary")


def _panel_values(panels: Panels) -> tuple:
    """Panels as output values; a None field leaves its component as it is."""
    values = (panels.tokens, panels.details, panels.verdict, panels.bestof, panels.error, panels.input_text)
    return (
        panels.state,
        panels.chatbot,
        *(gr.skip() if value is None else value for value in values),
        _stop_button(panels.running),
    )


def _form(values: tuple) -> Form:
    return Form.from_values(list(values))


def _chat_fn(registry: Registry) -> Callable[..., Iterator[tuple]]:
    def chat(user_text: str, state: ChatState, *values: Any) -> Iterator[tuple]:
        try:
            form = _form(values)
        except Exception as exc:  # noqa: BLE001
            yield _panel_values(Panels.failed(state, exc))
            return
        for panels in handlers.chat(registry, form, state, user_text):
            yield _panel_values(panels)

    return chat


def _retry_fn(registry: Registry) -> Callable[..., Iterator[tuple]]:
    def retry(state: ChatState, *values: Any) -> Iterator[tuple]:
        try:
            form = _form(values)
        except Exception as exc:  # noqa: BLE001
            yield _panel_values(Panels.failed(state, exc))
            return
        for panels in handlers.retry(registry, form, state):
            yield _panel_values(panels)

    return retry


def _setup_events(demo: gr.Blocks, registry: Registry, settings: UISettings, c: Comps) -> None:
    """Wire every event; each handler is a plain function from handlers.py or controls.py."""
    _setup_constraint_events(demo, c)
    setup_inspect_events(registry, c)
    _setup_model_events(demo, registry, settings, c)
    saved, autosave = sharing.autosaver(c, layout.form_inputs(c))
    _setup_chat_events(registry, c, autosave)
    _setup_tab_events(registry, settings, c)
    _setup_session_events(c)
    sharing.setup(demo, c, layout.form_inputs(c), saved)
    debugger.setup(registry, c, layout.form_inputs(c))


def _setup_constraint_events(demo: gr.Blocks, c: Comps) -> None:
    def on_kind(kind: str, message: str, saved: dict[str, str]) -> tuple:
        text, example_message = drafts.text_for(saved, kind)
        examples, editor, processor_group = layout.kind_view(kind, text)
        chat_text = controls.suggested_message(message, example_message)
        return examples, {**editor, "value": text}, processor_group, chat_text

    def on_example(kind: str, title: str | None, message: str) -> tuple:
        text, example_message = controls.example_for(kind, title)
        return text, controls.suggested_message(message, example_message)

    def on_text(kind: str, text: str | None, saved: dict[str, str]) -> tuple:
        return drafts.remember(saved, kind, text), gr.update(value=drafts.example_title(kind, text))

    status = (controls.constraint_status, [c["kind"], c["constraint_text"]], c["constraint_status"])
    c["kind"].input(
        on_kind,
        [c["kind"], c["chat_input"], c["drafts"]],
        [c["example"], c["constraint_text"], c["processor_group"], c["chat_input"]],
    ).then(*status, show_progress="hidden")
    c["example"].input(
        on_example, [c["kind"], c["example"], c["chat_input"]], [c["constraint_text"], c["chat_input"]]
    ).then(*status, show_progress="hidden")
    c["constraint_text"].change(*status, show_progress="hidden", trigger_mode="always_last")
    c["constraint_text"].change(
        on_text,
        [c["kind"], c["constraint_text"], c["drafts"]],
        [c["drafts"], c["example"]],
        show_progress="hidden",
        trigger_mode="always_last",
    )
    c["processor"].input(controls.processor_help, c["processor"], [c["processor_help"], c["processor_params"]])
    demo.load(lambda: gr.update(choices=controls.processor_choices()), None, c["processor"])


def _setup_model_events(demo: gr.Blocks, registry: Registry, settings: UISettings, c: Comps) -> None:
    def on_model(name: str, picked: ModelPick, progress: gr.Progress = gr.Progress(track_tqdm=True)) -> tuple:
        if picked.reverting and name == picked.good:  # the picker going back after a failure: keep its message
            return gr.skip(), gr.skip(), ModelPick(good=picked.good)
        try:
            status = controls.choose_model(registry, name, settings, progress)
        except Exception as exc:  # noqa: BLE001
            message = handlers.error_message(exc)
            if not picked.good or picked.good == name:
                return gr.skip(), render.error_box(message), picked
            box = render.error_box(f"{message}\nstill using {picked.good}")
            return gr.update(value=picked.good), box, ModelPick(good=picked.good, reverting=True)
        return gr.update(choices=controls.model_choices(registry), value=name), status, ModelPick(good=name)

    outputs = [c["model"], c["model_status"], c["model_pick"]]
    c["model"].change(on_model, [c["model"], c["model_pick"]], outputs, trigger_mode="always_last")
    demo.load(on_model, [c["model"], c["model_pick"]], outputs)


def _edit_fn(registry: Registry) -> Callable[..., Iterator[tuple]]:
    def edit(evt: gr.EditData, state: ChatState, *values: Any) -> Iterator[tuple]:
        try:
            form = _form(values)
        except Exception as exc:  # noqa: BLE001
            yield _panel_values(Panels.failed(state, exc))
            return
        index = evt.index if isinstance(evt.index, int) else evt.index[0]
        for panels in handlers.edit(registry, form, state, index, str(evt.value)):
            yield _panel_values(panels)

    return edit


def _setup_chat_events(registry: Registry, c: Comps, autosave: Callable[[Any], Any]) -> None:
    """The chat's events; every one that changes the conversation is autosaved before the chart updates."""
    form = layout.form_inputs(c)
    outputs = _panel_outputs(c)
    next_token = lambda state: handlers.next_token(registry, state)  # noqa: E731
    for trigger in (c["chat_input"].submit, c["send"].click):
        event = trigger(_chat_fn(registry), [c["chat_input"], c["state"], *form], outputs, show_progress="minimal")
        autosave(event).then(next_token, c["state"], c["next_token"], show_progress="hidden")
    for trigger in (c["retry"].click, c["chatbot"].retry):
        event = trigger(_retry_fn(registry), [c["state"], *form], outputs, show_progress="minimal")
        autosave(event).then(next_token, c["state"], c["next_token"], show_progress="hidden")
    event = c["chatbot"].edit(_edit_fn(registry), [c["state"], *form], outputs, show_progress="minimal")
    autosave(event).then(next_token, c["state"], c["next_token"], show_progress="hidden")
    # Not `cancels=`: killing the handler mid-step would leave the stored turn out of step with the screen.
    c["stop_btn"].click(handlers.request_stop, c["state"], None, show_progress="hidden", queue=False)
    for trigger in (c["undo"].click, c["chatbot"].undo):
        event = trigger(lambda state: _panel_values(handlers.undo(state)), c["state"], outputs)
        autosave(event).then(lambda: "", None, c["next_token"])
    for trigger in (c["clear"].click, c["chatbot"].clear):
        event = trigger(lambda state: _panel_values(handlers.clear(state)), c["state"], outputs)
        autosave(event).then(lambda: "", None, c["next_token"])
    c["mode"].change(handlers.set_mode, [c["state"], c["mode"]], [c["state"], c["tokens"]], show_progress="hidden")

    def on_markdown(state: ChatState, markdown: bool) -> tuple:
        state, view = handlers.set_markdown(state, markdown)
        return state, gr.update(**view, elem_classes=[] if state.markdown else [layout.EXACT_CLASS])

    c["markdown"].change(on_markdown, [c["state"], c["markdown"]], [c["state"], c["chatbot"]], show_progress="hidden")

    def on_token_click(state: ChatState, evt: gr.EventData) -> str:
        index = getattr(evt, "index", None)
        return handlers.next_token(registry, state, int(index) if isinstance(index, (int, float)) else None)

    c["tokens"].click(on_token_click, c["state"], c["next_token"], show_progress="minimal")


def _setup_tab_events(registry: Registry, settings: UISettings, c: Comps) -> None:
    form = layout.form_inputs(c)

    def on_compare(text: str, state: ChatState, *values: Any) -> tuple[str, str]:
        try:
            return handlers.compare(registry, _form(values), state, text)
        except Exception as exc:  # noqa: BLE001
            box = render.error_box(handlers.error_message(exc))
            return box, box

    c["compare"].click(on_compare, [c["compare_input"], c["state"], *form], [c["compare_left"], c["compare_right"]])
    setup_engine_compare_events(registry, c, form)
    code_outputs = [c[f"code_{key}"] for key, _, _ in layout.CODE_TABS]

    def on_code(state: ChatState, *values: Any) -> list[str]:
        try:
            code = controls.code_snippets(registry, _form(values), state, settings)
        except Exception as exc:  # noqa: BLE001
            message = f"# cannot build the request: {handlers.error_message(exc)}"
            return [message] * len(code_outputs)
        return [code[key] for key, _, _ in layout.CODE_TABS]

    c["code_tab"].select(on_code, [c["state"], *form], code_outputs)


def _setup_session_events(c: Comps) -> None:
    form = layout.form_inputs(c)

    def on_export(state: ChatState, *values: Any) -> tuple:
        try:
            path = controls.export_file(_form(values), state)
        except Exception as exc:  # noqa: BLE001
            return gr.update(visible=False), render.error_box(handlers.error_message(exc))
        return gr.update(value=path, visible=True), render.box("ok", "✓ exported: download the file above")

    def on_import(path: str | None, state: ChatState) -> tuple:
        try:
            loaded, fresh = controls.import_file(path, state.mode)
        except Exception as exc:  # noqa: BLE001
            return (*[gr.skip()] * len(form), gr.skip(), gr.skip(), render.error_box(handlers.error_message(exc)))
        fresh.markdown = state.markdown
        note = render.box("ok", f"✓ imported {len(fresh.messages)} messages and the settings")
        return (*loaded.values(), fresh, chatbot_value(fresh.messages, state.markdown), note)

    c["session_export"].click(on_export, [c["state"], *form], [c["session_file"], c["session_status"]])
    c["session_import"].upload(
        on_import, [c["session_import"], c["state"]], [*form, c["state"], c["chatbot"], c["session_status"]]
    ).then(
        layout.kind_view, [c["kind"], c["constraint_text"]], [c["example"], c["constraint_text"], c["processor_group"]]
    ).then(controls.constraint_status, [c["kind"], c["constraint_text"]], c["constraint_status"])
