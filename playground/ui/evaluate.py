"""The Evaluate tab (one constraint over many prompts, with a progress bar, charts and rows that open their
tokens) and the chat tab's score panel (every answer the constraint allows for the last turn, ranked)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from playground import client_scope, render
from playground.constraints import Constraint
from playground.debug.alternatives import listed
from playground.debug.evaluation import EvalRow, read_prompts, run_rows, summary, to_csv, to_jsonl
from playground.debug.score import score
from playground.errors import ModelError, ParameterError, PlaygroundError
from playground.providers.base import local_engine
from playground.providers.registry import Registry
from playground.render.core import esc
from playground.types import GeneratedToken
from playground.ui import stopped
from playground.ui.components import Components, EvaluateView, ScoreView, html
from playground.ui.debugger import BranchState
from playground.ui.downloads import Downloads, client_of
from playground.ui.handlers import error_message
from playground.ui.state import ChatState, Form, chat_inputs, params_of
from playground.wire import tools

MAX_UPLOAD_CHARS = 2_000_000
JSON_TYPES = ("json", "json_schema")


def render_score_panel() -> ScoreView:
    """Under the chat's panels: every answer the constraint allows for the last message, ranked."""
    gr.Markdown(
        "**Every allowed answer**, ranked — after each choice or enum turn by itself; the button ranks a small "
        "regex's or grammar's language too, or the enum at the clicked token"
    )
    run = gr.Button("Rank the allowed answers", size="sm", elem_id="score-btn")
    return ScoreView(run=run, panel=html("score-panel", render.SCORE_EMPTY))


def render_evaluate_tab() -> EvaluateView:
    gr.Markdown(
        "Run the sidebar's constraint and settings over many prompts: paste one per line, or upload JSONL "
        '(`{"prompt", "expected"}` per line) or CSV (a `prompt` column, optionally `expected`).'
    )
    prompts = gr.Textbox(label="Prompts", lines=6, elem_id="eval-prompts", placeholder="one prompt per line")
    with gr.Row(equal_height=True):
        upload = gr.UploadButton("Upload JSONL or CSV", file_types=[".jsonl", ".csv"], size="sm", elem_id="eval-upload")
        run = gr.Button("Evaluate", variant="primary", elem_id="eval-run")
        stop = gr.Button("Stop", elem_id="eval-stop", interactive=False)
    progress = html("eval-progress")
    panel = html("eval-panel", render.EVAL_EMPTY)
    row = gr.Dropdown(label="Open a row", choices=[], value=None, elem_id="eval-row")
    row_panel = html("eval-row-panel")
    export = gr.File(label="Export (JSONL and CSV)", file_count="multiple", elem_id="eval-export", interactive=False)
    return EvaluateView(prompts, upload, run, stop, progress, panel, row, row_panel, export, gr.State([]))


def progress_html(done: int, total: int) -> str:
    """A progress bar that reads on a phone: the bar and the count."""
    return (
        f'<div class="pg-progress"><progress max="{total}" value="{done}"></progress> '
        f"<span>{done} of {total} prompts</span></div>"
    )


def evaluate(
    registry: Registry, form: Form, state: ChatState, text: str, file_text: str, filename: str
) -> Iterator[tuple[str, str, dict, list[dict]]]:
    """(progress, charts, row picker, rows) after each finished row."""
    try:
        prompts, expected = read_prompts(file_text or text, filename)
        if not prompts:
            raise ParameterError("paste prompts (one per line) or upload a JSONL or CSV file", field="prompts")
        system = tools.ui_system(form.kind, form.constraint_text, form.system_prompt)
        inputs = [chat_inputs(system, [], p) for p in prompts]
        params = params_of(form)
        provider, model_id = registry.resolve(form.model)
        engine = local_engine(provider, model_id, "") if provider.capabilities.local_engine else None
    except Exception as exc:  # noqa: BLE001
        yield "", render.error_box(error_message(exc)), gr.update(), []
        return
    rows: list[EvalRow] = []
    scope = state.cache_scope()

    def generate(prompt: Any, row_params: Any) -> Any:
        # each row enters the conversation's scope in its own thread: Gradio resumes this generator on
        # any thread, where a context entered before a yield could not be left after it
        with client_scope.scoped(scope):
            return provider.generate(model_id, prompt, row_params)

    for row in run_rows(generate, inputs, expected, params, engine):
        rows.append(row)
        yield _update(rows, len(prompts))


def _update(rows: list[EvalRow], total: int) -> tuple[str, str, dict, list[dict]]:
    ordered = sorted(rows, key=lambda r: r.index)
    dumped = [r.model_dump() for r in ordered]
    charts = render.evaluation_html(summary(ordered, total), dumped)
    picker = gr.update(choices=[row_label(r.index, r.prompt) for r in ordered])
    return progress_html(len(rows), total), charts, picker, dumped


def export_files(dumped: list[dict], downloads: Downloads, client: str = "") -> list[str] | None:
    """The rows as JSONL and CSV files to download (`client`: whose export, for its share of the bound)."""
    if not dumped:
        return None
    rows = [EvalRow.model_validate(r) for r in dumped]
    return downloads.write({"evaluation.jsonl": to_jsonl(rows), "evaluation.csv": to_csv(rows)}, client)


def row_label(index: int, prompt: str) -> str:
    """A row as the picker lists it: `#7: the prompt`."""
    return f"#{index}: {prompt[:60]}"


def row_html(rows: list[dict], label: str | None) -> str:
    """One row's full token panel, with its prompt, answer and verdict."""
    row = next((r for r in rows if row_label(r["index"], r["prompt"]) == label), None)
    if row is None:
        return ""
    tokens = [GeneratedToken.model_validate(t) for t in row.get("tokens") or []]
    refusal = row.get("first_refusal") or {}
    head = (
        f"<div><b>#{row['index']}</b> {esc(row['prompt'])} → <code>{esc(row.get('text', ''))}</code> · "
        f"{esc(row.get('error') or row.get('validation') or '')}"
        + (f" · first refusal: {esc(refusal.get('reason') or '')}" if refusal else "")
        + "</div>"
    )
    return head + render.tokens_html(tokens)


def score_last_turn(registry: Registry, state: ChatState, pinned: int | None) -> str:
    """On demand: the last turn's allowed answers ranked (a small regex's or grammar's language too, which the
    turn's own ranking does not walk); under a JSON schema, the enum values at the pinned token."""
    try:
        request = state.request
        if request is None:
            raise ParameterError("send a message first: the ranking is for the last turn's prompt and constraint")
        prefix = request.params.continue_from or ""
        grammar = request.params.grammar
        if grammar is not None and grammar.type in JSON_TYPES:
            if pinned is not None:
                prefix += "".join(t.text for t in state.tokens[:pinned] if not t.special)
            # (the API's words ask for a prefix); too many values are named by the ranking itself
            if not listed(Constraint.from_grammar(grammar), prefix, at_most=math.inf):
                where = "at the clicked token" if pinned is not None else "at the answer's start"
                raise ParameterError(
                    f"the last turn's JSON schema lists no answers {where}: click a token where an enum or const "
                    "value starts, then rank"
                )
        return _ranked(registry, state, prefix)
    except Exception as exc:  # noqa: BLE001
        return render.error_box(error_message(exc))


def rank_turn(registry: Registry, state: ChatState) -> str:
    """After a turn: its answers ranked when the constraint lists them (a choice, a JSON enum answer); else the
    empty panel, with no error (a regex's or grammar's language is walked only on demand, by the button)."""
    request = state.request
    prefix = (request.params.continue_from or "") if request else ""
    if not _lists_answers(registry, state, prefix, ("choice", "json_schema")):
        return render.SCORE_EMPTY
    try:
        return _ranked(registry, state, prefix)
    except Exception as exc:  # noqa: BLE001
        return render.error_box(error_message(exc))


def enum_at_token(registry: Registry, state: ChatState, index: int | None) -> str:
    """Under a clicked token's next-token chart: the enum values ranked when the token starts a JSON value whose
    schema lists them (the answer before the token ends where the value starts); "" anywhere else."""
    if index is None or not 0 <= index < len(state.tokens) or state.request is None:
        return ""
    prefix = (state.request.params.continue_from or "") + stopped.answer_text(state.tokens[:index])
    if not _lists_answers(registry, state, prefix, ("json_schema",)):
        return ""
    try:
        return _ranked(registry, state, prefix)
    except Exception as exc:  # noqa: BLE001
        return render.error_box(error_message(exc))


def _lists_answers(registry: Registry, state: ChatState, prefix: str, kinds: tuple[str, ...]) -> bool:
    """Whether the last turn's constraint (of one of `kinds`) lists its answers after `prefix`, and a local model
    can rank them."""
    request = state.request
    if request is None or request.params.grammar is None or request.params.logits_processors:
        return False
    constraint = Constraint.from_grammar(request.params.grammar)
    if constraint.kind not in kinds or not listed(constraint, prefix):
        return False
    try:
        provider, _ = registry.resolve(request.model)
    except ModelError:  # the turn's model is gone since: nothing to rank with
        return False
    return provider.capabilities.local_engine


def _ranked(registry: Registry, state: ChatState, prefix: str) -> str:
    """The last turn's alternatives after `prefix`, scored in one batched forward on the turn's cached prompt."""
    request = state.request
    if request is None:
        raise ParameterError("send a message first: the ranking is for the last turn's prompt and constraint")
    params = request.params.model_copy(update={"best_of": None, "continue_from": prefix or None})
    provider, model_id = registry.resolve(request.model)
    with client_scope.scoped(state.cache_scope()):
        result = score(local_engine(provider, model_id, "scoring alternatives"), request.inputs, params)
    return render.score_html(result.model_dump())


def setup_evaluate_events(
    registry: Registry, c: Components, view: EvaluateView, scored: ScoreView, downloads: Downloads
) -> None:
    """Evaluate (stoppable), open a row, rank the last turn's answers."""

    def on_run(text: str, state: ChatState, *values: Any) -> Iterator[tuple]:
        try:
            form = Form.from_values(list(values))
        except Exception as exc:  # noqa: BLE001
            yield "", render.error_box(error_message(exc)), gr.update(), []
            return
        yield from evaluate(registry, form, state, text, "", "")

    def on_upload(file: Any) -> tuple[Any, str]:
        """The file's prompts in the box (JSONL when a prompt spans lines or has an expected answer); a file that
        cannot be read is said beside it, and the box keeps what it held."""
        if file is None:  # the file was cleared (or a direct call sent none): nothing to read
            return gr.skip(), ""
        path = Path(file if isinstance(file, str) else file.name)
        content = path.read_text(encoding="utf-8", errors="replace")[:MAX_UPLOAD_CHARS]
        try:
            prompts, expected = read_prompts(content, path.name)
        except PlaygroundError as exc:
            return gr.skip(), render.error_box(f"{path.name}: {exc.message}")
        if any(e is not None for e in expected) or any("\n" in p for p in prompts):
            rows = [EvalRow(index=i, prompt=p, expected=e) for i, (p, e) in enumerate(zip(prompts, expected))]
            return to_jsonl(rows), ""
        return "\n".join(prompts), ""

    outputs = [view.progress, view.panel, view.row, view.rows]
    running = view.run.click(
        lambda: (gr.update(interactive=False), gr.update(interactive=True)), None, [view.run, view.stop]
    ).then(on_run, [view.prompts, c.state, *c.form_inputs()], outputs)
    running.then(lambda: (gr.update(interactive=True), gr.update(interactive=False)), None, [view.run, view.stop])

    def on_rows(dumped: list[dict], request: gr.Request) -> list[str] | None:
        return export_files(dumped, downloads, client_of(request))

    running.then(on_rows, view.rows, view.export)
    view.stop.click(
        lambda: (gr.update(interactive=True), gr.update(interactive=False)),
        None,
        [view.run, view.stop],
        cancels=[running],
    )
    view.upload.upload(on_upload, view.upload, [view.prompts, view.panel])
    view.row.input(row_html, [view.rows, view.row], view.row_panel)

    def on_score(state: ChatState, branches: BranchState) -> str:
        return score_last_turn(registry, state, branches.pinned)

    scored.run.click(on_score, [c.state, c.debugger.branches], scored.panel)
