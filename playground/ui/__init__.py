"""The playground UI: `create_ui(registry)` builds the Gradio Blocks; the API mounts it at "/"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gradio as gr

from playground import render
from playground.providers.registry import Registry
from playground.render.chat import chatbot_value
from playground.ui import controls, debugger, drafts, evaluate, handlers, layout, sharing, startup
from playground.ui.compare_engines import setup_engine_compare_events
from playground.ui.compare_reasoning import setup_reasoning_compare_events
from playground.ui.components import Components
from playground.ui.downloads import Downloads, client_of
from playground.ui.evaluate import setup_evaluate_events
from playground.ui.handlers import Panels
from playground.ui.inspect import setup_inspect_events, warm_engines
from playground.ui.state import ChatState, Form, ModelPick, UISettings
from playground.ui.theme import page_assets

__all__ = ["create_ui", "page_assets", "UISettings"]

# The tokens on screen at the Stop's click (static/page.js counts them in the click's own task), else now.
STOP_JS = """(state, shown) => {
    const counted = window.pgStopShown;
    window.pgStopShown = undefined;
    return [state, counted ?? document.querySelectorAll('#token-panel .tok[data-index]').length];
}"""


def create_ui(registry: Registry, *, settings: UISettings | None = None) -> gr.Blocks:
    """Build the playground's Blocks for the models `registry` serves."""
    settings = settings or UISettings()
    # uploads (session files) are read at once: Gradio deletes them after 10 minutes, checking every 5; exports
    # (Downloads) go after as long, written into its cache
    with gr.Blocks(title=settings.title, analytics_enabled=False, delete_cache=(300, 600)) as demo:
        gr.Markdown(
            f"# {render.esc(settings.title)}\n"
            "Constrain a model with a JSON schema, a regex, a choice list or a grammar, then see what the "
            "constraint did to every token."
        )
        startup.render_banner(demo, registry)
        _setup_events(demo, registry, settings, layout.render_all(registry, settings), Downloads(demo.GRADIO_CACHE))
    warm_engines(registry)
    return demo


def _panel_outputs(c: Components) -> list[Any]:
    ch = c.chat
    return [c.state, ch.chatbot, ch.tokens, ch.finish, ch.verdict, ch.bestof, ch.error, ch.input, ch.stop]


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


def _streamed(state: ChatState, values: tuple, turn: Callable[[Form], Iterator[Panels]]) -> Iterator[tuple]:
    """One streamed chat step: read the form (a bad one is an error box), then every Panels `turn` yields."""
    try:
        form = _form(values)
    except Exception as exc:  # noqa: BLE001
        yield _panel_values(Panels.failed(state, exc))
        return
    for panels in turn(form):
        yield _panel_values(panels)


def _panels_of(step: Callable[[ChatState], Panels]) -> Callable[[ChatState], tuple]:
    """A one-shot chat step (undo, clear) as a handler of the chat's outputs."""
    return lambda state: _panel_values(step(state))


def _setup_events(
    demo: gr.Blocks, registry: Registry, settings: UISettings, c: Components, downloads: Downloads
) -> None:
    """Response every event; each handler is a plain function from handlers.py or controls.py."""
    _setup_constraint_events(demo, c)
    setup_inspect_events(registry, c)
    _setup_model_events(demo, registry, settings, c)
    saved, autosave = sharing.autosaver(c)
    _setup_chat_events(registry, c, autosave)
    _setup_tab_events(registry, settings, c, downloads)
    _setup_session_events(c, downloads)
    sharing.setup(demo, c, saved, lambda name: sharing.unserved(registry, settings, name))
    debugger.setup(registry, c)


def _setup_constraint_events(demo: gr.Blocks, c: Components) -> None:
    ed = c.constraint

    def on_kind(kind: str, message: str, saved: dict[str, str], old_text: str | None, old_kind: str) -> tuple:
        # the text being left is kept under the kind it was written for: switching back restores it
        saved = drafts.remember(saved, old_kind, old_text)
        text, example_message = drafts.text_for(saved, kind)
        examples, editor, processor_group, text_kind = layout.kind_view(kind, text)
        chat_text = controls.suggested_message(message, example_message)
        return examples, {**editor, "value": text}, processor_group, text_kind, chat_text, saved

    def on_example(kind: str, title: str | None, message: str) -> tuple:
        text, example_message = controls.example_for(kind, title)
        return text, kind, controls.suggested_message(message, example_message)

    def on_text(kind: str, text_kind: str, text: str | None) -> Any:
        # Typing sent after the kind's radio flipped but before the editor got the new kind's text is the old
        # kind's text: it names no example of the new one.
        return gr.update(value=drafts.example_title(kind, text)) if text_kind == kind else gr.skip()

    status = (controls.constraint_status, [ed.kind, ed.text], ed.status)
    # The kind, the example and typing run one at a time, in the order they came (one queue): each listener with a
    # queue of its own let a kind's answer overtake the typing just before it, whose blank title (the user's own
    # text) then landed on the new kind's example (CI: the regex kind showed no title after a pasted schema).
    in_order = {"concurrency_id": "constraint-editor", "concurrency_limit": 1}
    ed.kind.input(
        on_kind,
        [ed.kind, c.chat.input, c.drafts, ed.text, ed.text_kind],
        [*ed.view, c.chat.input, c.drafts],
        **in_order,
    ).then(*status, show_progress="hidden")
    ed.example.input(
        on_example, [ed.kind, ed.example, c.chat.input], [ed.text, ed.text_kind, c.chat.input], **in_order
    ).then(*status, show_progress="hidden")
    # Typing, not every change: an editor change event with outputs beside the status and the panel made Gradio 6
    # fire the editor's change events again and again after a keystroke, ~5 requests a second for as long as the
    # page stayed open (an example, a kind or a restored session sets the title itself).
    ed.text.input(
        on_text,
        [ed.kind, ed.text_kind, ed.text],
        ed.example,
        show_progress="hidden",
        trigger_mode="always_last",
        **in_order,
    )
    ed.processor.input(controls.processor_help, ed.processor, [ed.processor_help, ed.processor_params])
    demo.load(lambda: gr.update(choices=controls.processor_choices()), None, ed.processor)


def _setup_model_events(demo: gr.Blocks, registry: Registry, settings: UISettings, c: Components) -> None:
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
        return gr.update(choices=controls.model_choices(registry, name), value=name), status, ModelPick(good=name)

    outputs = [c.model, c.model_status, c.model_pick]
    c.model.change(on_model, [c.model, c.model_pick], outputs, trigger_mode="always_last")
    demo.load(on_model, [c.model, c.model_pick], outputs)


def _setup_chat_events(registry: Registry, c: Components, autosave: Callable[..., Any]) -> None:
    """The chat's events; every one that changes the conversation is autosaved before the chart updates."""
    ch, form, outputs = c.chat, c.form_inputs(), _panel_outputs(c)

    def next_token(state: ChatState) -> Any:
        chart = handlers.answer_chart(registry, state)
        return gr.skip() if chart is None else chart  # a chart the user asked for stays

    def chat(user_text: str, state: ChatState, *values: Any) -> Iterator[tuple]:
        yield from _streamed(state, values, lambda form: handlers.chat(registry, form, state, user_text))

    def retry(state: ChatState, *values: Any) -> Iterator[tuple]:
        yield from _streamed(state, values, lambda form: handlers.retry(registry, form, state))

    def edit(evt: gr.EditData, state: ChatState, *values: Any) -> Iterator[tuple]:
        index = evt.index if isinstance(evt.index, int) else evt.index[0]
        yield from _streamed(state, values, lambda form: handlers.edit(registry, form, state, index, str(evt.value)))

    turns = [
        ([ch.input.submit, ch.send.click], chat, [ch.input, c.state, *form]),
        ([ch.retry.click, ch.chatbot.retry], retry, [c.state, *form]),
        ([ch.chatbot.edit], edit, [c.state, *form]),
    ]
    rank = lambda state: evaluate.rank_turn(registry, state)  # noqa: E731

    def after_answer(event: Any, on: str = "then") -> None:
        """Once an answer is on screen (`on`: the event's trigger that says so): saved, its next-token chart, its
        ranking."""
        autosave(event, on).then(next_token, c.state, ch.next_token, show_progress="hidden").then(
            rank, c.state, c.score.panel, show_progress="minimal"
        )

    for triggers, fn, inputs in turns:
        # the last turn's ranking goes as its turn starts; the new one fills in once the answer has streamed
        gr.on(triggers, lambda: render.SCORE_EMPTY, None, c.score.panel, queue=False, show_progress="hidden")
        after_answer(gr.on(triggers, fn, inputs, outputs, show_progress="minimal"))

    cuts = gr.State(0)  # answers a Stop cut after their turn had ended: a change saves and charts the cut answer

    async def finish_stop(state: ChatState, cut: int) -> tuple:
        panels = await handlers.finish_stop(state)
        if panels is None:  # the turn honoured the Stop, or there was nothing to cut
            return (gr.skip(),) * (len(outputs) + 1)
        return (*_panel_values(panels), cut + 1)

    # Not `cancels=`: killing the handler mid-step would leave the stored turn out of step with the screen.
    # The click says how many tokens the user sees: the answer ends there, not at the server's (later) token,
    # even when the screen lagged so far behind that the turn had ended (then finish_stop cuts it).
    ch.stop.click(
        handlers.request_stop, [c.state, ch.stop_at], None, js=STOP_JS, show_progress="hidden", queue=False
    ).then(finish_stop, [c.state, cuts], [*outputs, cuts], show_progress="hidden", concurrency_limit=None)
    after_answer(cuts, on="change")
    resets = [([ch.undo.click, ch.chatbot.undo], handlers.undo), ([ch.clear.click, ch.chatbot.clear], handlers.clear)]
    for triggers, reset in resets:
        event = gr.on(triggers, _panels_of(reset), c.state, outputs)
        autosave(event).then(
            lambda: (render.NEXT_TOKEN_EMPTY, render.SCORE_EMPTY), None, [ch.next_token, c.score.panel]
        )
    ch.mode.change(handlers.set_mode, [c.state, ch.mode], [c.state, ch.tokens], show_progress="hidden")

    def on_markdown(state: ChatState, markdown: bool) -> tuple:
        state, view = handlers.set_markdown(state, markdown)
        return state, gr.update(**view, elem_classes=[] if state.markdown else [layout.EXACT_CLASS])

    ch.markdown.change(on_markdown, [c.state, ch.markdown], [c.state, ch.chatbot], show_progress="hidden")

    def on_token_click(state: ChatState, evt: gr.EventData) -> str:
        index = getattr(evt, "index", None)
        at = int(index) if isinstance(index, (int, float)) else None
        # where the token starts a JSON value the schema enumerates, that value's alternatives ranked under its chart
        return handlers.token_chart(registry, state, at) + evaluate.enum_at_token(registry, state, at)

    ch.tokens.click(on_token_click, c.state, ch.next_token, show_progress="minimal")


def _setup_tab_events(registry: Registry, settings: UISettings, c: Components, downloads: Downloads) -> None:
    form, compare = c.form_inputs(), c.compare

    def on_compare(text: str, state: ChatState, *values: Any) -> tuple[str, str]:
        try:
            return handlers.compare(registry, _form(values), state, text)
        except Exception as exc:  # noqa: BLE001
            box = render.error_box(handlers.error_message(exc))
            return box, box

    compare.run.click(on_compare, [compare.input, c.state, *form], [compare.left, compare.right])
    setup_engine_compare_events(registry, c)
    setup_reasoning_compare_events(registry, c)
    setup_evaluate_events(registry, c, c.evaluate, c.score, downloads)
    code_outputs = [c.code.snippets[key] for key, _, _ in layout.CODE_TABS]

    def on_code(state: ChatState, *values: Any) -> list[str]:
        try:
            code = controls.code_snippets(registry, _form(values), state, settings)
        except Exception as exc:  # noqa: BLE001
            message = f"# cannot build the request: {handlers.error_message(exc)}"
            return [message] * len(code_outputs)
        return [code[key] for key, _, _ in layout.CODE_TABS]

    c.code.tab.select(on_code, [c.state, *form], code_outputs)


def _setup_session_events(c: Components, downloads: Downloads) -> None:
    form, session, ed = c.form_inputs(), c.session, c.constraint

    def on_export(request: gr.Request, state: ChatState, *values: Any) -> tuple:
        try:
            path = controls.export_file(_form(values), state, downloads, client_of(request))
        except Exception as exc:  # noqa: BLE001
            return gr.update(visible=False), render.error_box(handlers.error_message(exc))
        return gr.update(value=path, visible=True), render.box("ok", "✓ exported: download the file above")

    ch = c.chat
    # the last turn's panels and share link: an imported session starts without them, as an opened link does
    turn_panels = [ch.tokens, ch.finish, ch.verdict, ch.bestof, ch.error, ch.next_token, c.score.panel]

    def on_import(path: str | None, state: ChatState, saved: dict[str, str], text: str | None, text_kind: str) -> tuple:
        try:
            loaded, fresh = controls.import_file(path, state.mode)
        except Exception as exc:  # noqa: BLE001
            skipped = [gr.skip()] * (len(form) + 3 + len(turn_panels) + 2)
            return (*skipped, render.error_box(handlers.error_message(exc)))
        fresh.markdown = state.markdown
        loaded, changed = sharing.fitted(loaded, form)
        count = len(fresh.messages)
        imported = f"✓ imported {count} message{'' if count == 1 else 's'} and the settings"
        note = render.box("ok", " · ".join([imported, *changed]))
        answered = any(message.get("role") == "assistant" for message in fresh.messages)
        hint = render.box("muted", sharing.RETRY_HINT, elem_class="pg-shared") if answered else ""
        cleared = (render.tokens_html([]), "", "", "", hint, render.NEXT_TOKEN_EMPTY, render.SCORE_EMPTY)
        chat = chatbot_value(fresh.messages, state.markdown)
        saved = drafts.remember(saved, text_kind, text)  # the text the import replaces: switching back restores it
        hidden_link = gr.update(value="", visible=False)
        return (*loaded.values(), loaded.kind, fresh, chat, *cleared, saved, hidden_link, note)

    session.export.click(on_export, [c.state, *form], [session.file, session.status])
    imported = [*form, ed.text_kind, c.state, ch.chatbot, *turn_panels, c.drafts, session.share_link, session.status]
    session.upload.upload(on_import, [session.upload, c.state, c.drafts, ed.text, ed.text_kind], imported).then(
        layout.kind_view, [ed.kind, ed.text], ed.view
    ).then(controls.constraint_status, [ed.kind, ed.text], ed.status)
