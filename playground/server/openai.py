"""OpenAI-compatible routes: /v1/models (list, register) and /v1/chat/completions (stream too)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from playground.providers.base import Provider
from playground.server import chat
from playground.server.docs import JSON_OR_STREAM
from playground.server.errors import exception_event
from playground.server.streaming import decoded, generate_while_connected, iterate_in_thread, started
from playground.server.tgi import registry_of, resolve, sse
from playground.server.tool_stream import ToolStream
from playground.types import GenerateParameters, GenerationResult, Name, Strict, TokenEvent
from playground.wire import chat_fields, checks, inbound, tool_formats, tools
from playground.wire.inbound import ChatRequest
from playground.wire.tool_formats import ToolFormat

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])


class RegisterModel(Strict):
    """Body of POST /v1/models: serve `id` through the configured provider `provider_id` (a local one loads it)."""

    id: Name
    provider_id: Name


def _model_card(model: str, provider_id: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": int(time.time()), "owned_by": provider_id}


@router.get("/models", summary="Served models, by provider")
async def list_models(request: Request) -> dict[str, Any]:
    return {"object": "list", "data": [_model_card(m, pid) for pid, m in registry_of(request).models()]}


@router.post("/models", summary="Serve a model through a configured provider, at run time")
async def register_model(request: Request, body: RegisterModel) -> dict[str, Any]:
    name = await run_in_threadpool(registry_of(request).load, body.id, body.provider_id)
    return _model_card(name, body.provider_id)


async def _choice_params(
    provider: Provider, model_id: str, req: ChatRequest
) -> tuple[list[GenerateParameters], ToolFormat | None]:
    """One GenerateParameters per choice (seed base+i), checked against the model's limits; the model's tool
    envelope when its chat template writes one."""
    info = await run_in_threadpool(provider.info, model_id)
    fmt = tool_formats.by_name(info.tool_format)
    seed = inbound.base_seed(req)
    params = [inbound.chat_parameters(req, seed + i, fmt) for i in range(req.n)]
    checks.check_lengths(params[0], info, field="max_completion_tokens" if req.max_completion_tokens else "max_tokens")
    checks.check_top_n(params[0], info.max_top_n_tokens, field="top_logprobs")
    return params, fmt


@router.post(
    "/chat/completions",
    summary="Chat completion with guided decoding (OpenAI, vLLM and TGI forms)",
    responses=JSON_OR_STREAM,
)
async def chat_completions(request: Request, body: ChatRequest) -> Any:
    """n choices are n independent samples with seeds seed, seed+1, ...; `validation` on each choice."""
    provider, model_id = resolve(request, body.model)
    params, fmt = await _choice_params(provider, model_id, body)
    if body.stream:
        first = await started(_events(provider, model_id, body, params[0], fmt))
        chunks = _chunks(provider, model_id, body, params, first, fmt)
        return StreamingResponse(chunks, media_type="text/event-stream")
    results = []
    for choice_params in params:
        result = await generate_while_connected(
            request, provider, model_id, inbound.prompt_messages(body, fmt), choice_params
        )
        if result is None:  # the client hung up; stop before the next choice too
            return Response(status_code=499)
        results.append(result)
    return chat.completion_response(model_id, results, body, fmt)


def _chunk(base: dict[str, Any], index: int, delta: dict[str, Any], **extra: Any) -> str:
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None, **extra}
    return sse({**base, "choices": [choice]})


def _events(
    provider: Provider, model_id: str, req: ChatRequest, params: GenerateParameters, fmt: ToolFormat | None
) -> AsyncIterator[TokenEvent | GenerationResult]:
    return iterate_in_thread(lambda: provider.stream(model_id, inbound.prompt_messages(req, fmt), params))


async def _choice_chunks(
    events: AsyncIterator[TokenEvent | GenerationResult],
    req: ChatRequest,
    params: GenerateParameters,
    index: int,
    base: dict[str, Any],
    fmt: ToolFormat | None,
) -> AsyncIterator[str | GenerationResult]:
    """The chunks of one choice (content, or each tool call's head then its arguments), then its result."""
    yield _chunk(base, index, {"role": "assistant", "content": ""})
    calls = tools.mode(req) is not None
    feed, ending = _tool_deltas(req, params, fmt) if calls else _content_deltas(req, params)
    async for deltas, tokens, result in decoded(events, feed):
        if result is not None:
            deltas, finish, notes = ending(result, tokens)
        for k, delta in enumerate(deltas):  # the tokens' logprobs ride on the first delta they made
            yield _chunk(base, index, delta, logprobs=chat.choice_logprobs(tokens if k == 0 else [], req))
        if result is not None:
            extras = chat.choice_extras(result, [*chat_fields.warnings(req), *notes])
            yield _chunk(base, index, {}, finish_reason=finish, **extras)
            yield result


Deltas = Callable[[str], list[dict[str, Any]]]
Ending = Callable[[GenerationResult, list[Any]], tuple[list[dict[str, Any]], str, list[str]]]


def _content_deltas(req: ChatRequest, params: GenerateParameters) -> tuple[Deltas, Ending]:
    """Text as it is decoded, holding back what may start a stop sequence."""
    holdback = chat.StopHoldback(params.stop)

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
    stream = ToolStream(req, params.stop, fmt)

    def ending(result: GenerationResult, tokens: list[Any]) -> tuple[list[dict[str, Any]], str, list[str]]:
        return stream.finish(result, chat.trim_stop(result.best.generated_text, result.best))

    return stream.feed, ending


async def _chunks(
    provider: Provider,
    model_id: str,
    req: ChatRequest,
    params: list[GenerateParameters],
    first: AsyncIterator[TokenEvent | GenerationResult],
    fmt: ToolFormat | None,
) -> AsyncIterator[str]:
    """OpenAI's chunk stream for every choice in turn, the usage chunk when asked, then [DONE]."""
    base = chat.envelope(model_id, "chat.completion.chunk")
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    if include_usage:
        base["usage"] = None
    results: list[GenerationResult] = []
    try:
        for index, choice_params in enumerate(params):
            events = first if index == 0 else _events(provider, model_id, req, choice_params, fmt)
            async for item in _choice_chunks(events, req, choice_params, index, base, fmt):
                if isinstance(item, GenerationResult):
                    results.append(item)
                else:
                    yield item
    except Exception as exc:  # after the stream started: a last error event, as TGI does
        yield exception_event(exc, openai=True)
        return
    if include_usage:
        yield sse({**base, "choices": [], "usage": chat.usage(results)})
    yield "data: [DONE]\n\n"
