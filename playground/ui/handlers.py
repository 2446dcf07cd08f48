"""The chat and insight handlers: plain functions over provider calls, tested without a browser.

Each returns or yields `Panels`, the values of every output the chat drives; errors a user can cause
become an error box, never a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from playground import client_scope, render
from playground.constraints import Constraint
from playground.errors import ParameterError, PlaygroundError, UnenforcedKeywordError
from playground.providers.registry import Registry
from playground.render.chat import CONSTRAINT_KEY, chatbot_value
from playground.types import GenerationResult, TokenEvent
from playground.ui import stopped
from playground.ui.state import ChatState, Form, LastRequest, chat_inputs, params_of
from playground.wire import tool_formats, tools
from playground.wire.tool_formats import ToolFormat

log = logging.getLogger(__name__)

PENDING = "…"
Shown = str | None  # a component's next value: None leaves it as it is, "" clears it


@dataclass
class Panels:
    """Everything one chat step shows: the conversation, then each panel's `Shown` value."""

    state: ChatState
    chatbot: list[dict[str, Any]]
    tokens: Shown = None
    details: Shown = None
    verdict: Shown = None
    bestof: Shown = None
    error: Shown = None
    input_text: Shown = None
    running: bool | None = None  # the Stop button's state; None leaves it as it is

    @classmethod
    def failed(cls, state: ChatState, exc: BaseException, input_text: str | None = None) -> Panels:
        """The conversation as it was, the error's message in the error box, the other panels untouched."""
        box = render.error_box(error_message(exc))
        chatbot = chatbot_value(state.messages, state.markdown)
        return cls(state=state, chatbot=chatbot, error=box, input_text=input_text, running=False)

    @classmethod
    def empty(cls, state: ChatState, input_text: str | None = None, running: bool | None = None) -> Panels:
        """Every insight panel cleared (a new turn starts, or the conversation was undone or cleared)."""
        return cls(
            state=state,
            chatbot=chatbot_value(state.messages, state.markdown),
            tokens=render.tokens_html([]),
            details="",
            verdict="",
            bestof="",
            error="",
            input_text=input_text,
            running=running,
        )


def error_message(exc: BaseException) -> str:
    """The failure in the wording the widgets share (render.error_text); an unexpected one is logged in full."""
    _log_unexpected(exc)
    return render.error_text(exc)


def _log_unexpected(exc: BaseException) -> None:
    if not isinstance(exc, PlaygroundError):
        log.exception("unexpected error in a UI handler", exc_info=exc)


def result_panels(state: ChatState, result: GenerationResult) -> Panels:
    """Every panel for a finished result."""
    details = render.details_html(result)
    processors = state.request.params.logits_processors if state.request else []
    if processors:
        named = "; ".join(f"{p.name}({', '.join(map(repr, p.params))})" for p in processors)
        details += render.box("muted", f"custom processor: {named}", elem_class="pg-processor")
    if result.warnings:
        details += render.box("warn", "; ".join(result.warnings))
    return Panels(
        state=state,
        chatbot=chatbot_value(state.messages, state.markdown),
        tokens=render.tokens_html(result.best.tokens, state.mode),
        details=details,
        verdict=render.validation_html(result.best, result.constraint_kind),
        bestof=render.bestof_html(result),
        error="",
        running=False,
    )


def _run(registry: Registry, request: LastRequest) -> Iterator[TokenEvent | GenerationResult]:
    """Stream when the provider streams; a remote best_of runs to completion (TGI refuses to stream it). A local
    best_of streams its first candidate's tokens, so Stop ends the turn (and frees the CPU) when clicked."""
    provider, model_id = registry.resolve(request.model)
    remote_best_of = (request.params.best_of or 1) > 1 and not provider.capabilities.decodes_here
    if remote_best_of or not provider.capabilities.streaming:
        yield provider.generate(model_id, request.inputs, request.params)
        return
    yield from provider.stream(model_id, request.inputs, request.params)


def chat(
    registry: Registry, form: Form, state: ChatState, user_text: str, history: list[dict[str, str]] | None = None
) -> Iterator[Panels]:
    """Send one user message after `history` (default: the conversation) and stream the answer."""
    history = state.messages if history is None else history
    try:
        if not user_text.strip():
            raise ParameterError("type a message first", field="chat-input")
        fmt = tool_format(registry, form)
        system = tools.ui_system(form.kind, form.constraint_text, form.system_prompt, fmt)
        inputs = chat_inputs(system, history, user_text)
        typed = chat_inputs(form.system_prompt, history, user_text) if system != form.system_prompt else None
        request = LastRequest(model=form.model, inputs=inputs, params=params_of(form, fmt=fmt), typed=typed)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a message in the UI
        yield Panels.failed(state, exc)
        return
    yield from _turn(registry, state, request, user_text, history)


def tool_format(registry: Registry, form: Form) -> ToolFormat | None:
    """The model's tool-call envelope, for the tools kind: its template then describes the tools and the calls."""
    provider, model_id = registry.resolve(form.model)
    return tool_formats.by_name(provider.info(model_id).tool_format) if form.kind == "tools" else None


def _turn(
    registry: Registry, state: ChatState, request: LastRequest, user_text: str, history: list[dict[str, str]]
) -> Iterator[Panels]:
    """Stream one answer; Stop (state.stop_requested) ends it after the token on screen, never one later."""
    before = (list(state.messages), state.result, state.request, state.tokens)
    answer = {"role": "assistant", "content": PENDING, CONSTRAINT_KEY: _kind_of(request)}
    state.messages = list(history) + [{"role": "user", "content": user_text}, answer]
    state.result, state.request, state.tokens = None, request, []
    state.stop_requested, state.stop_after, state.running, state.answered = False, None, True, False
    state.chart_asked = False
    yield Panels.empty(state, input_text="", running=True)
    try:
        yield from _stream_answer(registry, state, request, answer)
    except UnenforcedKeywordError as exc:
        if state.tokens:  # the engine ended an answer that broke the schema: show it, judged
            answer["content"] = stopped.answer_text(state.tokens)  # (not the placeholder, even with no answer yet)
            yield _unenforced_panels(state, request, exc)
            return
        state.messages, state.result, state.request, state.tokens = before
        yield Panels.failed(state, exc, input_text=user_text)
    except Exception as exc:  # noqa: BLE001 - the conversation is restored and the message shown
        state.messages, state.result, state.request, state.tokens = before
        yield Panels.failed(state, exc, input_text=user_text)
    finally:
        state.running = False  # a Stop it did not honour is finish_stop's


# Each streamed update sends the whole token panel and conversation again, so sending one per token grew
# quadratic: a 1,024-token answer sent ~64 MB of HTML and the page froze for seconds re-reading it (the turn ran
# 2.5x slower than the same request through the API). An update goes out when the answer has grown by a sixteenth
# since the last one, or STREAM_UPDATE_S after it: every token of a short answer, a few a second of a long one.
STREAM_UPDATE_S = 0.5


def _due(shown: int, decoded: int, since_s: float) -> bool:
    """Whether a streamed update goes out now: `shown` tokens on screen, `decoded` so far."""
    return decoded - shown >= max(1, shown // 16) or since_s >= STREAM_UPDATE_S


def _stream_answer(registry: Registry, state: ChatState, request: LastRequest, answer: dict) -> Iterator[Panels]:
    client_scope.enter(state.cache_scope())  # this step starts the decode, which keeps the scope
    events = _run(registry, request)
    shown, sent_at = 0, time.monotonic()
    try:
        for event in events:
            if state.stop_requested and not isinstance(event, GenerationResult):
                state.stop_requested = False
                _cut_to_screen(state)
                # the answer as it stands: "" when none came (a thinking model stopped in its reasoning), never the
                # placeholder, which the next turn would send as the assistant's words
                answer["content"] = stopped.answer_text(state.tokens)
                yield _stopped_panels(state, request)
                return
            if isinstance(event, GenerationResult):
                answer["content"] = event.best.answer  # a thinking model's reasoning stays in the token panel
                state.result, state.tokens, state.answered = event, event.best.tokens, True
                yield result_panels(state, event)
            elif event.index == 0:
                state.tokens.append(event.token)
                answer["content"] = stopped.answer_text(state.tokens) or PENDING
                if not _due(shown, len(state.tokens), time.monotonic() - sent_at):
                    continue
                shown, sent_at = len(state.tokens), time.monotonic()
                tokens_html = render.tokens_html(state.tokens, state.mode, popovers=False)
                # Stop stays live with every update, not only from the turn's first one (a stream's later updates
                # repeat it at no cost: an output that does not change sends nothing)
                chatbot = chatbot_value(state.messages, state.markdown)
                yield Panels(state=state, chatbot=chatbot, tokens=tokens_html, running=True)
    finally:
        events.close()


# How long a Stop's second step waits for a turn that has not honoured it yet (a best_of run or a slow provider's
# first token has no event to honour it at); after that, the turn ends as it would have.
STOP_WAIT_S = 600.0


def _cut_to_screen(state: ChatState) -> bool:
    """Drop the answer's tokens decoded after those on the user's screen at the Stop; whether any were."""
    if state.stop_after is None or state.stop_after >= len(state.tokens):
        return False
    state.tokens = state.tokens[: state.stop_after]
    state.messages[-1]["content"] = stopped.answer_text(state.tokens)
    return True


def _stopped_panels(state: ChatState, request: LastRequest) -> Panels:
    """The answer as far as the screen showed it, with popovers, details and a verdict on the partial text."""
    return Panels(
        state=state,
        chatbot=chatbot_value(state.messages, state.markdown),
        tokens=render.tokens_html(state.tokens, state.mode),
        details=stopped.details_html(request.model, state.tokens),
        verdict=stopped.verdict_html(request.params, state.tokens),
        bestof="",
        error="",
        running=False,
    )


def _unenforced_panels(state: ChatState, request: LastRequest, exc: UnenforcedKeywordError) -> Panels:
    """The answer as far as the engine got, its tokens and a red verdict; the engine's message as a note."""
    return Panels(
        state=state,
        chatbot=chatbot_value(state.messages, state.markdown),
        tokens=render.tokens_html(state.tokens, state.mode),
        details=stopped.unenforced_details_html(request.model, state.tokens, error_message(exc)),
        verdict=stopped.unenforced_verdict_html(request.params, state.tokens),
        bestof="",
        error="",
        running=False,
    )


def request_stop(state: ChatState, shown: float | None = None) -> None:
    """Ask the turn on the user's screen to end after its tokens there (`shown` at the click: those decoded since
    are dropped; None: not known). The screen can lag behind the decode (a slow device or link): the turn may be
    over already."""
    state.stop_after = None if shown is None else int(shown)
    state.stop_requested = True


async def finish_stop(state: ChatState, poll_s: float = 0.02, wait_s: float = STOP_WAIT_S) -> Panels | None:
    """After a Stop, once the turn is over: where the turn ended with its whole answer before it could honour
    the Stop, the answer cut to the tokens the screen showed (stopped, as if the Stop had come in time); None
    where the turn honoured it, nothing ran, the screen showed every token, or the turn outlived `wait_s`.

    It waits on the event loop, holding no worker thread: a turn waiting for a slow first token or a best_of
    run cannot make many clicks starve the server."""
    give_up = time.monotonic() + wait_s
    while state.running:  # the turn honours the Stop at its next event
        if time.monotonic() > give_up:
            return None
        await asyncio.sleep(poll_s)
    late, state.stop_requested = state.stop_requested and state.answered, False
    if not late or state.request is None or not _cut_to_screen(state):
        return None
    state.result, state.answered = None, False
    return _stopped_panels(state, state.request)


def _kind_of(request: LastRequest) -> str:
    """The constraint kind a request decodes under ("processor" for a custom processor, "none" without)."""
    if request.params.grammar is not None:
        return request.params.grammar.type
    return "processor" if request.params.logits_processors else "none"


def retry(registry: Registry, form: Form, state: ChatState) -> Iterator[Panels]:
    """Answer the last user message again, with the current settings."""
    history = list(state.messages)
    while history and history[-1]["role"] == "assistant":
        history.pop()
    if not history:
        yield Panels.failed(state, ParameterError("nothing to retry yet"))
        return
    user_text = history.pop()["content"]
    yield from chat(registry, form, state, user_text, history)


def edit(registry: Registry, form: Form, state: ChatState, index: int, user_text: str) -> Iterator[Panels]:
    """Replace user message `index` and answer it again; what followed it is dropped."""
    if not (0 <= index < len(state.messages)) or state.messages[index]["role"] != "user":
        yield Panels.failed(state, ParameterError("only a user message can be edited"))
        return
    yield from chat(registry, form, state, user_text, state.messages[:index])


def undo(state: ChatState) -> Panels:
    """Remove the last exchange and give its user message back to the input box."""
    messages = list(state.messages)
    while messages and messages[-1]["role"] == "assistant":
        messages.pop()
    restored = messages.pop()["content"] if messages else ""
    state.messages, state.result, state.request, state.tokens = messages, None, None, []
    return Panels.empty(state, input_text=restored)


def clear(state: ChatState) -> Panels:
    """An empty conversation; the settings stay."""
    return Panels.empty(ChatState(mode=state.mode, markdown=state.markdown), input_text="")


def set_markdown(state: ChatState, markdown: bool) -> tuple[ChatState, dict]:
    """Render unconstrained answers as Markdown, or (the default) show every message exactly."""
    state.markdown = bool(markdown)
    return state, {"value": chatbot_value(state.messages, state.markdown), "render_markdown": state.markdown}


def set_mode(state: ChatState, mode: str) -> tuple[ChatState, str]:
    """Recolour the token panel by raw or constrained probability."""
    state.mode = "raw" if mode == "raw" else "constrained"
    return state, render.tokens_html(state.tokens, state.mode)


def next_token(registry: Registry, state: ChatState, index: int | None = None, top_k: int = 20) -> str:
    """The next-token chart at the end of the prompt (index None) or just before answer token `index`."""
    if state.request is None:
        return render.NEXT_TOKEN_EMPTY
    tokens = state.tokens
    try:
        first = next((k for k, t in enumerate(tokens) if t.segment == "answer"), None)
        if index is None and first:  # a thinking model's turn: the answer starts after its reasoning
            prefix, where = (
                stopped.row_text(tokens[:first]),
                f"at token #{first}, the answer's first (after the reasoning)",
            )
        elif index is None:
            reasoning = bool(tokens) and tokens[0].segment == "reasoning"
            prefix, where = "", f"at the end of the prompt (the {'reasoning' if reasoning else 'answer'}'s first token)"
        else:
            if not 0 <= index < len(tokens):
                raise ParameterError(f"token index {index} is out of range (the answer has {len(tokens)} tokens)")
            prefix = stopped.row_text(tokens[:index])
            where = f"at token #{index} ({render.quoted(tokens[index].text)})"
        provider, model_id = registry.resolve(state.request.model)
        params = state.request.params.model_copy(update={"best_of": None})
        with client_scope.scoped(state.cache_scope()):
            dist = provider.next_token(model_id, state.request.inputs, params, prefix=prefix, top_k=top_k)
    except Exception as exc:  # noqa: BLE001
        return render.error_box(error_message(exc))
    return render.next_token_html(dist, where)


def token_chart(registry: Registry, state: ChatState, index: int | None) -> str:
    """The chart the user asked for (a token clicked: just before it; None: at the end of the prompt)."""
    state.chart_asked = True
    return next_token(registry, state, index)


def answer_chart(registry: Registry, state: ChatState) -> str | None:
    """The answer's own chart (at the end of the prompt), drawn once the answer is on screen; None where the user
    has asked for a chart since the turn started, before or while this one was computed: theirs stays."""
    if state.chart_asked:
        return None
    chart = next_token(registry, state)
    return None if state.chart_asked else chart


def compare(registry: Registry, form: Form, state: ChatState, user_text: str) -> tuple[str, str]:
    """The same turn without and with the constraint; the unconstrained answer is judged by it too."""
    try:
        text = user_text.strip() or _last_user(state)
        if form.kind == "none":
            raise ParameterError("pick a constraint (or a custom processor) to compare against")
        provider, model_id = registry.resolve(form.model)
        fmt = tool_format(registry, form)
        system = tools.ui_system(form.kind, form.constraint_text, form.system_prompt, fmt)
        inputs = chat_inputs(system, _without_last_exchange(state.messages, user_text), text)
        free = provider.generate(model_id, inputs, params_of(form, constrained=False, fmt=fmt))
        constrained = params_of(form, fmt=fmt)
        bound = provider.generate(model_id, inputs, constrained)
    except Exception as exc:  # noqa: BLE001
        box = render.error_box(error_message(exc))
        return box, box
    if form.kind == "processor":
        judged = render.box("muted", "custom processors have no verdict")
    else:
        # the constraint as sent (the tools kind's is the calls' grammar, or the template's envelope), on the answer
        verdict = Constraint.from_grammar(constrained.grammar).validate(free.best.answer)
        judged = render.validation_html(free.best.model_copy(update={"validation": verdict}), bound.constraint_kind)
    return render.side_html("unconstrained", free, judged), render.side_html(
        "constrained", bound, render.validation_html(bound.best, bound.constraint_kind)
    )


def _last_user(state: ChatState) -> str:
    for message in reversed(state.messages):
        if message["role"] == "user":
            return message["content"]
    raise ParameterError("type a message to compare (the conversation has none yet)")


def _without_last_exchange(messages: list[dict[str, str]], user_text: str) -> list[dict[str, str]]:
    """History before the compared turn: when re-running the last user message, drop that exchange."""
    if user_text.strip():
        return messages
    history = list(messages)
    while history and history[-1]["role"] == "assistant":
        history.pop()
    return history[:-1]
