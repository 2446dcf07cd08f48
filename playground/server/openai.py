"""OpenAI-compatible routes: /v1/models (list, register) and /v1/chat/completions (stream too)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from playground.providers.base import Provider
from playground.server import chat
from playground.server.answers import Chunk, Job, answer
from playground.server.docs import JSON_OR_STREAM
from playground.server.streaming import StreamedIds, decoded, started
from playground.server.tgi import echoed_model, registry_of, resolve_with_adapter, with_adapter
from playground.server.tool_stream import ToolStream
from playground.types import GenerateParameters, GenerationResult, Name, Strict, TokenEvent
from playground.types.sizes import nth_seed
from playground.wire import chat_fields, checks, inbound, tool_formats, tools
from playground.wire.inbound import ChatRequest
from playground.wire.tool_formats import ToolFormat

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])


class RegisterModel(Strict):
    """Body of POST /v1/models: serve `id` through the configured provider `provider_id` (a local one loads it)."""

    id: Name
    provider_id: Name


def _model_card(model: str, provider_id: str, max_model_len: int | None = None) -> dict[str, Any]:
    """OpenAI's model object; vLLM's `max_model_len` where the model is loaded here (clients size prompts by it)."""
    card = {"id": model, "object": "model", "created": int(time.time()), "owned_by": provider_id}
    return card if max_model_len is None else {**card, "max_model_len": max_model_len}


def _adapter_card(adapter: str, model: str, provider_id: str) -> dict[str, Any]:
    """A listed adapter, as vLLM lists a LoRA: its base model as `parent`, the adapter's own id as `root`."""
    return {**_model_card(adapter, provider_id), "root": adapter, "parent": model}


@router.get("/models", summary="Served models, by provider, then the adapters they list")
async def list_models(request: Request) -> dict[str, Any]:
    registry = registry_of(request)
    lengths = registry.context_lengths()
    models = [_model_card(m, pid, lengths.get(m)) for pid, m in registry.models()]
    return {"object": "list", "data": models + [_adapter_card(a, m, pid) for pid, m, a in registry.adapters()]}


@router.get("/models/{model:path}", summary="One served model (OpenAI's models.retrieve)")
async def retrieve_model(request: Request, model: str) -> dict[str, Any]:
    if not model:  # /v1/models/ is the list
        return await list_models(request)
    provider, name, adapter = resolve_with_adapter(request, model)  # 404 in OpenAI's shape: a model nobody serves
    return (
        _model_card(name, provider.provider_id, registry_of(request).context_lengths().get(name))
        if adapter is None
        else _adapter_card(adapter, name, provider.provider_id)
    )


@router.post("/models", summary="Serve a model through a configured provider, at run time")
async def register_model(request: Request, body: RegisterModel) -> dict[str, Any]:
    name = await run_in_threadpool(registry_of(request).load, body.id, body.provider_id)
    return _model_card(name, body.provider_id)


async def chat_jobs(request: Request, req: ChatRequest) -> tuple[Provider, str, ToolFormat | None, list[Job]]:
    """The provider and model asked for, the envelope its chat template writes tool calls in (if one), and the
    choices: the same messages, seeded base+i, checked against the model's limits."""
    provider, model_id, adapter = resolve_with_adapter(request, req.model)
    info = await run_in_threadpool(provider.info, model_id)
    fmt = tool_formats.by_name(info.tool_format)
    seed = inbound.base_seed(req)
    params = [with_adapter(inbound.chat_parameters(req, nth_seed(seed, i), fmt), adapter) for i in range(req.n)]
    checks.check_lengths(params[0], info, field="max_completion_tokens" if req.max_completion_tokens else "max_tokens")
    checks.check_top_n(params[0], info.max_top_n_tokens, field="top_logprobs")
    checks.check_token_ids(req.return_tokens_as_token_ids, provider.capabilities.local_engine)
    messages = inbound.prompt_messages(req, fmt)
    return provider, model_id, fmt, [(messages, choice_params) for choice_params in params]


@router.post(
    "/chat/completions",
    summary="Chat completion with guided decoding (OpenAI, vLLM and TGI forms)",
    responses=JSON_OR_STREAM,
)
async def chat_completions(request: Request, body: ChatRequest) -> Any:
    """n choices are n independent samples with seeds seed, seed+1, ...; `validation` on each choice."""
    provider, model_id, fmt, jobs = await chat_jobs(request, body)
    shown = echoed_model(model_id, jobs[0][1])
    base = chat.envelope(shown, "chat.completion.chunk")
    choice = partial(choice_chunks, req=body, fmt=fmt)
    return await answer(
        request,
        provider,
        model_id,
        jobs,
        body,
        base=base,
        choice_chunks=choice,
        usage=chat.usage,
        respond=lambda results: chat.completion_response(shown, results, body, fmt),
        names={
            "inputs": "messages",
            **chat.length_field(body),
            "truncate": "truncate_prompt_tokens",
            "grammar": inbound.constraint_field(body),
            # a budget that came by name: the error names reasoning_effort, the field the client sent
            "max_reasoning_tokens": "reasoning_effort" if body.max_reasoning_tokens is None else None,
            # vLLM's fields read as ours: a provider that cannot carry ours names the client's
            "min_tokens": "ignore_eos" if body.ignore_eos else None,
            "decoder_input_details": "prompt_logprobs" if body.prompt_logprobs is not None else None,
            # the final message continued: what a remote provider cannot take, or the constraint refuses in it
            "continue_from": "continue_final_message",
        },
    )


async def choice_chunks(
    events: AsyncIterator[TokenEvent | GenerationResult],
    job: Job,
    chunk: Chunk,
    *,
    req: ChatRequest,
    fmt: ToolFormat | None,
) -> AsyncIterator[str | GenerationResult]:
    """The chunks of one choice (content, or each tool call's head then its arguments), then its result."""
    params = job[1]
    ids = StreamedIds() if req.return_token_ids else None
    if ids is not None:  # the prompt's ids come with the first token, for the first chunk
        events = await started(ids.watch(events))

    def new_ids() -> dict[str, Any]:
        return {"token_ids": ids.new()} if ids is not None else {}

    # a forced call has no content: null, as OpenAI streams it (the SDK's stream helper then ends with None, as the
    # unstreamed answer does, not ""); an answer that may be text opens with "", as vLLM's does
    opening = {"role": "assistant", "content": None if tools.mode(req) in ("required", "named") else ""}
    yield chunk(delta=opening, root={"prompt_token_ids": ids.prompt} if ids is not None else None)
    feed, ending = _tool_deltas(req, params, fmt) if tools.mode(req) is not None else _content_deltas(req, params)
    thought = _ReasoningDeltas(params.stop, params.include_stop_str_in_output)
    async for deltas, tokens, result in decoded(events, feed, thought.feed):
        if result is not None:
            deltas, finish, notes = ending(result, tokens)
            deltas = [*thought.rest(result), *deltas]
        for k, delta in enumerate(deltas):  # the tokens' logprobs (and ids) ride on the first delta they made
            yield chunk(delta=delta, logprobs=chat.choice_logprobs(tokens if k == 0 else [], req), **new_ids())
        if result is not None:
            extras = chat.choice_extras(result, [*chat_fields.warnings(req), *notes], chat.length_field(req))
            # tokens held back that made no delta of their own (a call's closing `}`): on the last chunk
            held = chat.choice_logprobs(tokens, req) if tokens and not deltas else None
            yield chunk(delta={}, finish_reason=finish, **({"logprobs": held} if held else {}), **extras, **new_ids())
            yield result


class _ReasoningDeltas:
    """Reasoning deltas as vLLM streams them (`reasoning`, and its older name `reasoning_content`), before content."""

    def __init__(self, stops: list[str], keep: bool) -> None:
        self.sent = ""
        self.keep = keep
        # a stop sequence may match inside the reasoning, and ends it there
        self.holdback = chat.StopHoldback(stops, keep)

    def feed(self, text: str) -> list[dict[str, Any]]:
        return self._send(self.holdback.feed(text))

    def _send(self, text: str) -> list[dict[str, Any]]:
        self.sent += text
        return [{"reasoning": text, "reasoning_content": text}] if text else []

    def rest(self, result: GenerationResult) -> list[dict[str, Any]]:
        """What the stream held back (a tail that could have become the end delimiter, in a turn cut short)."""
        fields = chat.reasoning_fields(result.best, self.keep)
        full = fields.get("reasoning", "")
        return self._send(full[len(self.sent) :]) if full.startswith(self.sent) else []


Deltas = Callable[[str], list[dict[str, Any]]]
Ending = Callable[[GenerationResult, list[Any]], tuple[list[dict[str, Any]], str, list[str]]]


def _content_deltas(req: ChatRequest, params: GenerateParameters) -> tuple[Deltas, Ending]:
    """Text as it is decoded, holding back what may start a stop sequence."""
    holdback = chat.StopHoldback(params.stop, params.include_stop_str_in_output)

    def feed(text: str) -> list[dict[str, Any]]:
        piece = holdback.feed(text)
        return [{"content": piece}] if piece else []

    def ending(result: GenerationResult, tokens: list[Any]) -> tuple[list[dict[str, Any]], str, list[str]]:
        rest = holdback.finish(result.best)
        deltas = [{"content": rest}] if rest or (req.logprobs and tokens) else []
        return deltas, chat.FINISH_REASONS[result.best.finish_reason], []

    return feed, ending


def _tool_deltas(req: ChatRequest, params: GenerateParameters, fmt: ToolFormat | None) -> tuple[Deltas, Ending]:
    """A choice that may call tools: each call's id and name first, then its arguments as they are decoded."""
    keep = params.include_stop_str_in_output
    formatted = inbound.constraint_of(req) is not None
    stream = ToolStream(req, params.stop, fmt, params.continue_from or "", formatted, keep)

    def ending(result: GenerationResult, tokens: list[Any]) -> tuple[list[dict[str, Any]], str, list[str]]:
        return stream.finish(result, chat.trim_stop(result.best.answer, result.best, keep))

    return stream.feed, ending
