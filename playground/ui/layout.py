"""The Gradio layout: small `_render_*` helpers that build each section of the typed `Components`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from playground.constraints import backends
from playground.constraints.examples import example_titles
from playground.providers.registry import Registry
from playground.render import NEXT_TOKEN_EMPTY, tokens_html
from playground.types.sizes import MAX_BEST_OF, MAX_TOP_N_TOKENS
from playground.ui import controls, debugger, evaluate
from playground.ui.compare_engines import render_engine_compare
from playground.ui.compare_reasoning import render_reasoning_compare
from playground.ui.components import (
    Chat,
    Code,
    Compare,
    Components,
    ConstraintEditor,
    Parameters,
    Session,
    html,
    insight,
    text_and_button,
)
from playground.ui.drafts import example_title
from playground.ui.examples import KINDS, LANGUAGES, SYSTEM_PROMPT
from playground.ui.state import ChatState, ModelPick, UISettings
from playground.wire.controls import SAMPLING

# Clicking a token pins its popover and asks the server for the next-token chart at that position.
TOKEN_CLICK_JS = (Path(__file__).parent / "static" / "tokens.js").read_text(encoding="utf-8")
# The chatbot's class while it shows messages exactly (no Markdown): page.css keeps their whitespace.
EXACT_CLASS = "pg-exact"
# (key, tab label, editor label) of each snippet in the Code tab.
CODE_TABS = [
    ("curl_generate", "curl /generate", "curl: POST /generate (TGI)"),
    ("curl_chat", "curl /v1/chat", "curl: POST /v1/chat/completions (OpenAI)"),
    ("openai", "openai", "openai SDK"),
    ("huggingface_hub", "huggingface_hub", "huggingface_hub.InferenceClient"),
    ("outlines", "Outlines", "Outlines"),
]


@dataclass(frozen=True)
class Limits:
    """Slider ranges from the default model's /info, so the UI offers what the server accepts."""

    max_best_of: int = MAX_BEST_OF
    max_top_n_tokens: int = MAX_TOP_N_TOKENS
    max_new_tokens: int = 1024


def limits_for(registry: Registry) -> Limits:
    """The default model's limits, or TGI's usual ones when it has none (or is still loading: the page waits for nobody)."""
    if registry.startup is not None and not registry.startup.ready():
        return Limits()
    try:
        provider, model = registry.resolve(None)
        info = provider.info(model)
    except Exception:  # noqa: BLE001 - the UI still opens; choosing a model reports the problem
        return Limits()
    return Limits(info.max_best_of, info.max_top_n_tokens, max(16, min(1024, info.max_total_tokens // 2)))


def model_label(settings: UISettings) -> str:
    """What the picker takes: a served model, and a hub id or local path where the operator allows loading them."""
    if not settings.allow_model_loading:
        return "Model (pick one of the served models)"
    typed = "a hub id / local path" if settings.allow_local_paths else "a hub id"
    return f"Model (pick one, or type {typed} and press Enter)"


def _render_model(registry: Registry, settings: UISettings) -> gr.Dropdown:
    return gr.Dropdown(
        choices=controls.model_choices(registry),
        value=registry.default_model,
        label=model_label(settings),
        allow_custom_value=True,
        filterable=True,
        elem_id="model-picker",
    )


def _render_constraint() -> ConstraintEditor:
    kind = gr.Radio(choices=KINDS, value="none", label="Constraint", elem_id="constraint-kind")
    example = gr.Dropdown(
        choices=[], value=None, label="Ready examples", elem_id="constraint-example", interactive=True, visible=False
    )
    text = gr.Code(
        value="",
        language=None,
        lines=8,
        wrap_lines=True,
        label="Constraint text",
        interactive=True,
        elem_id="constraint-text",
        visible=False,
    )
    status = html("constraint-status")
    inspect_panel = html("inspect-panel")  # what every engine compiles the constraint into (ui/inspect.py)
    with gr.Group(visible=False) as processor_group:
        processor = gr.Dropdown(
            choices=controls.processor_choices(), value=None, label="Processor", elem_id="processor-name"
        )
        processor_help = html("processor-help")
        params = gr.Textbox(label="Params (one per line)", lines=3, elem_id="processor-params")
    return ConstraintEditor(
        kind=kind,
        example=example,
        text=text,
        status=status,
        inspect_panel=inspect_panel,
        processor_group=processor_group,
        processor=processor,
        processor_help=processor_help,
        processor_params=params,
        text_kind=gr.Textbox(value="none", visible="hidden", elem_id="constraint-text-kind", interactive=False),
    )


# The parameter groups, in the order they appear; each is an accordion, the first two open.
PARAMETER_GROUPS: list[tuple[str, str, bool]] = [
    ("params-length", "Length and stops", True),
    ("params-sampling", "Sampling", True),
    ("params-details", "Details", False),
    ("params-advanced", "Engine and advanced", False),
]


def _group(index: int) -> gr.Accordion:
    elem_id, label, is_open = PARAMETER_GROUPS[index]
    return gr.Accordion(label, open=is_open, elem_id=elem_id)


def _render_parameters(limits: Limits) -> Parameters:
    """TGI's parameters in four groups, so the common ones are not buried under the rare ones."""
    with gr.Accordion("Parameters (TGI names)", open=False, elem_id="parameters"):
        with _group(0):
            max_new_tokens = gr.Slider(
                1, limits.max_new_tokens, value=64, step=1, label="max_new_tokens", elem_id="param-max-new-tokens"
            )
            stop = gr.Textbox(
                label="stop (one sequence per line, at most 4; \\n is a newline, \\t a tab)",
                lines=2,
                elem_id="param-stop",
            )
            # no minimum: Gradio would refuse a negative before the handler, unnamed ("Error" over every output)
            truncate = gr.Number(
                value=0,
                precision=0,
                label="truncate (keep the last N prompt tokens; 0 = off)",
                elem_id="param-truncate",
            )
        with _group(1):
            do_sample = gr.Checkbox(value=False, label="do_sample (off = greedy)", elem_id="param-do-sample")
            sampling = _sampling_sliders()
            seed = gr.Textbox(value="", label="seed (blank = random)", placeholder="random", elem_id="param-seed")
        with _group(2):
            top_n_tokens = gr.Slider(
                0,
                limits.max_top_n_tokens,
                value=5,
                step=1,
                label="top_n_tokens (alternatives per token)",
                elem_id="param-top-n-tokens",
            )
            best_of = gr.Slider(
                1, limits.max_best_of, value=1, step=1, label="best_of (needs sampling)", elem_id="param-best-of"
            )
        with _group(3):
            constraint_engine = gr.Dropdown(
                choices=["auto", *backends.names()], value="auto", label="constraint engine", elem_id="param-engine"
            )
            watermark = gr.Checkbox(value=False, label="watermark", elem_id="param-watermark")
            adapter_id = gr.Textbox(
                value="",
                label="adapter_id (PEFT adapter; blank = none)",
                placeholder="none",
                elem_id="param-adapter-id",
            )
            think_first = gr.Checkbox(
                value=False,
                label="think_first (reason before the answer, then the constraint)",
                elem_id="param-think-first",
            )
            max_reasoning_tokens = gr.Textbox(
                value="",
                label="max_reasoning_tokens (reasoning budget; blank = none)",
                placeholder="none",
                elem_id="param-max-reasoning-tokens",
            )
    return Parameters(
        max_new_tokens=max_new_tokens,
        stop=stop,
        truncate=truncate,
        do_sample=do_sample,
        sampling=sampling,
        seed=seed,
        top_n_tokens=top_n_tokens,
        best_of=best_of,
        constraint_engine=constraint_engine,
        watermark=watermark,
        adapter_id=adapter_id,
        think_first=think_first,
        max_reasoning_tokens=max_reasoning_tokens,
    )


def _sampling_sliders() -> dict[str, gr.Slider]:
    """One slider per sampling control of the wire layer's table, by the control's name."""
    return {
        c.name: gr.Slider(
            c.low, c.high, value=c.neutral, step=c.step, label=c.label, elem_id="param-" + c.name.replace("_", "-")
        )
        for c in SAMPLING
    }


def _render_session() -> Session:
    with gr.Accordion("Session", open=False, elem_id="session"):
        export = gr.Button("Export conversation + settings (JSON)", elem_id="session-export", size="sm")
        file = gr.File(label="Session file", visible=False, elem_id="session-file", interactive=False)
        upload = gr.UploadButton(
            "Import session JSON", file_types=[".json"], type="filepath", elem_id="session-import", size="sm"
        )
        share = gr.Button("Share link (settings, seed and conversation)", elem_id="session-share", size="sm")
        share_link = gr.Textbox(
            label="Share link", elem_id="share-link", visible=False, interactive=False, buttons=["copy"]
        )
        status = html("session-status")
    return Session(export=export, file=file, upload=upload, share=share, share_link=share_link, status=status)


def _render_chat_tab() -> Chat:
    chatbot = gr.Chatbot(
        label="Chat",
        height=360,
        elem_id="chatbot",
        buttons=["copy"],
        render_markdown=False,
        editable="user",
        elem_classes=[EXACT_CLASS],
    )
    with gr.Row(equal_height=True):
        text = gr.Textbox(
            label="Message",
            placeholder="Type a message and press Enter",
            show_label=False,
            scale=5,
            elem_id="chat-input",
        )
        send = gr.Button("Send", variant="primary", scale=1, elem_id="send-btn")
        stop = gr.Button("Stop", variant="secondary", scale=0, min_width=80, interactive=False, elem_id="stop-btn")
        stop_at = gr.Number(visible=False, precision=0, elem_id="stop-at")
    with gr.Row(equal_height=True, elem_id="chat-actions"):
        retry = gr.Button("Retry", size="sm", elem_id="retry-btn")
        undo = gr.Button("Undo", size="sm", elem_id="undo-btn")
        clear = gr.Button("Clear", size="sm", elem_id="clear-btn")
        markdown = gr.Checkbox(
            value=False, label="Markdown for unconstrained answers", elem_id="chat-markdown", container=False
        )
    error, finish, verdict = html("chat-error"), html("finish-reason"), html("validation-status")
    with insight():
        gr.Markdown(
            "**Tokens** — hover or focus for alternatives; click or press Enter to pin one and chart its position; "
            "arrow keys move between tokens, Escape unpins"
        )
        mode = gr.Radio(
            ["constrained", "raw"], value="constrained", label="Colour by probability", elem_id="token-mode"
        )
        tokens = html("token-panel", tokens_html([]), js_on_load=TOKEN_CLICK_JS)
    with insight(collapse_empty=True):
        gr.Markdown("**Next token** — raw model against the constraint (before temperature, top-k and top-p)")
        next_token = html("next-token-panel", NEXT_TOKEN_EMPTY)
    with insight():
        gr.Markdown("**Best-of candidates**")
        bestof = html("bestof-panel")
    return Chat(
        chatbot=chatbot,
        input=text,
        send=send,
        stop=stop,
        stop_at=stop_at,
        retry=retry,
        undo=undo,
        clear=clear,
        markdown=markdown,
        error=error,
        finish=finish,
        verdict=verdict,
        mode=mode,
        tokens=tokens,
        next_token=next_token,
        bestof=bestof,
    )


def _render_compare_tab(registry: Registry) -> Compare:
    gr.Markdown(
        "The same turn twice: without the constraint and with it; or once per constraint engine (and with "
        "another model). Blank input re-runs your last message."
    )
    text, run = text_and_button(
        "Message to compare", "compare-input", "Compare", "compare-btn", text_scale=5, variant="primary"
    )
    with gr.Row():
        left = html("compare-unconstrained")
        right = html("compare-constrained")
    # the same turn once per engine (ui/compare_engines.py), and with and without reasoning (ui/compare_reasoning.py)
    engines = render_engine_compare(registry)
    return Compare(input=text, run=run, left=left, right=right, engines=engines, reasoning=render_reasoning_compare())


def _render_code_snippets() -> dict[str, gr.Code]:
    gr.Markdown("Reproduce the last turn against this server: your settings, with the last turn's conversation.")
    snippets: dict[str, gr.Code] = {}
    with gr.Tabs(elem_id="code-tabs"):
        for key, tab, label in CODE_TABS:
            with gr.Tab(tab, id=f"code-{key}"):
                snippets[key] = gr.Code(
                    label=label,
                    language="shell" if key.startswith("curl") else "python",
                    interactive=False,
                    wrap_lines=True,
                    elem_id=f"code-{key.replace('_', '-')}",
                )
    return snippets


def render_all(registry: Registry, settings: UISettings) -> Components:
    """Build every component inside the current Blocks, and the per-user states."""
    limits = limits_for(registry)
    with gr.Row(elem_id="layout-row"):
        with gr.Column(scale=2, min_width=320, elem_id="sidebar"):
            model = _render_model(registry, settings)
            model_status = html("model-status")
            constraint = _render_constraint()
            system_prompt = gr.Textbox(value=SYSTEM_PROMPT, label="System prompt", lines=2, elem_id="system-prompt")
            params = _render_parameters(limits)
            session = _render_session()
        with gr.Column(scale=5, elem_id="main-column"):
            with gr.Tabs():
                with gr.Tab("Chat", id="chat"):
                    chat = _render_chat_tab()
                    score = evaluate.render_score_panel()
                    debug = debugger.render_panels()
                with gr.Tab("Compare", id="compare"):
                    compare = _render_compare_tab(registry)
                with gr.Tab("Evaluate", id="evaluate"):
                    evaluation = evaluate.render_evaluate_tab()
                with gr.Tab("Code", id="code") as code_tab:
                    code = Code(tab=code_tab, snippets=_render_code_snippets())
    return Components(
        model=model,
        model_status=model_status,
        constraint=constraint,
        system_prompt=system_prompt,
        params=params,
        session=session,
        chat=chat,
        debugger=debug,
        compare=compare,
        code=code,
        evaluate=evaluation,
        score=score,
        state=gr.State(ChatState()),
        model_pick=gr.State(ModelPick()),
        drafts=gr.State({}),
    )


def kind_view(kind: str, text: str | None = None) -> tuple[dict, dict, dict, str]:
    """What a constraint kind shows (ConstraintEditor.view): its examples (the one `text` is, if any), the
    editor, the processor group, and the kind the editor is now for."""
    titles = example_titles(kind)
    return (
        gr.update(choices=titles, value=example_title(kind, text), visible=bool(titles)),
        gr.update(language=LANGUAGES.get(kind), visible=kind not in ("none", "processor")),
        gr.update(visible=kind == "processor"),
        kind,
    )
