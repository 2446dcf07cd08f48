"""TGI-compatible routes: /generate, /generate_stream, / (compat), /info, /health, /tokenize, /chat_tokenize, plus
/next_token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from playground.constraints import backends
from playground.decoding import continuation
from playground.errors import ModelError
from playground.processors import list_factories
from playground.providers.base import Provider, local_engine, stalled_s
from playground.providers.registry import Registry
from playground.server import convert
from playground.server.answers import named_as_sent
from playground.server.docs import HEALTH_RESPONSES, JSON_OR_STREAM, STREAM_RESPONSES
from playground.server.errors import error_body, exception_event
from playground.server.streaming import generate_while_connected, iterate_in_thread, sse, started
from playground.types import GenerateParameters, GenerateRequest, GenerationResult, NextTokenDistribution, TokenEvent
from playground.types.sizes import limits_info
from playground.wire import checks, inbound, tool_formats
from playground.wire.inbound import ChatRequest

ModelQuery = Query(default=None, description="Served model to use; the default model when omitted.")
router = APIRouter(tags=["TGI-compatible"])
open_router = APIRouter(tags=["TGI-compatible"])


def registry_of(request: Request) -> Registry:
    return request.app.state.registry


def resolve(request: Request, model: str | None) -> tuple[Provider, str]:
    """The provider and model id; 'tgi' and 'dummy' (what TGI clients send) mean the default model, and so does a URL
    no provider serves by that name: huggingface.js sends the `endpointUrl` it was given as `model`, and TGI, which
    serves one model, ignores it."""
    registry = registry_of(request)
    if model in ("tgi", "dummy"):
        return registry.resolve(None)
    try:
        return registry.resolve(model)
    except ModelError:
        if model and model.startswith(("http://", "https://")):
            return registry.resolve(None)
        raise


def resolve_with_adapter(request: Request, model: str | None) -> tuple[Provider, str, str | None]:
    """As `resolve`, and a `model` nobody serves that names a listed adapter is its model with that adapter (vLLM
    serves a LoRA by its name, TGI's chat reads `model` as `adapter_id`)."""
    try:
        return (*resolve(request, model), None)
    except ModelError:
        found = registry_of(request).adapter(model) if model else None
        if found is None:
            raise
        return found


def echoed_model(model_id: str, params: GenerateParameters) -> str:
    """The `model` an OpenAI answer names: the adapter it decoded with, as listed (vLLM names a LoRA's answers by
    the LoRA), else the model."""
    return params.adapter_id or model_id


def with_adapter(params: GenerateParameters, adapter: str | None) -> GenerateParameters:
    """The parameters with the adapter a request's `model` named (see `resolve_with_adapter`)."""
    return params if adapter is None else params.model_copy(update={"adapter_id": adapter})


async def _prepared(
    request: Request, model: str | None, params: GenerateParameters, *, streaming: bool
) -> tuple[Provider, str]:
    """Resolve the model and apply TGI's rules with its limits, before any work starts."""
    provider, model_id = resolve(request, model)
    info = await run_in_threadpool(provider.info, model_id)
    checks.check_limits(params, info, streaming=streaming)
    return provider, model_id


async def _tgi_events(
    items: AsyncIterator[TokenEvent | GenerationResult], params: GenerateParameters
) -> AsyncIterator[str]:
    """TGI's stream: one event per token as it comes; the last token's event also carries generated_text and details,
    so that token waits for the result (a source that cannot tell its last token: each waits for the next item).
    As TGI's, the first token's index is 1."""
    pending: TokenEvent | None = None
    index = 1
    try:
        async for item in items:
            if isinstance(item, TokenEvent):
                if pending is not None:
                    yield sse(convert.stream_token_event(index, pending, params))
                    index += 1
                    pending = None
                if item.last is False:
                    yield sse(convert.stream_token_event(index, item, params))
                    index += 1
                else:
                    pending = item
            else:
                final, pending = convert.stream_final_event(index, pending, item, params), None
                yield sse(final)
    except Exception as exc:  # the stream has started: the error becomes its last event, as TGI does
        if pending is not None:
            yield sse(convert.stream_token_event(index, pending, params))
        yield exception_event(exc)


# The engine's own checks name a parameter bare (`truncate: ...`); TGI's body holds it under `parameters`.
_TGI_NAMES = {"truncate": "parameters.truncate"}


async def _stream_response(request: Request, body: GenerateRequest, model: str | None) -> StreamingResponse:
    provider, model_id = await _prepared(request, model, body.parameters, streaming=True)
    with named_as_sent(_TGI_NAMES):
        items = await started(
            iterate_in_thread(lambda: provider.stream(model_id, body.inputs, body.parameters)), request
        )
    return StreamingResponse(_tgi_events(items, body.parameters), media_type="text/event-stream")


async def _generate(
    request: Request, body: GenerateRequest, model: str | None, response: Response | None = None
) -> dict[str, Any]:
    provider, model_id = await _prepared(request, model, body.parameters, streaming=False)
    with named_as_sent(_TGI_NAMES):
        result = await generate_while_connected(request, provider, model_id, body.inputs, body.parameters)
    if result is None:  # the client hung up; nobody reads this answer
        return Response(status_code=499)
    if response is not None:  # TGI's headers, which its clients (and a TGI provider) read the counts from
        response.headers["x-prompt-tokens"] = str(result.input_length)
        response.headers["x-generated-tokens"] = str(result.best.generated_tokens)
        response.headers["x-total-time"] = str(round(result.timings.total_s * 1000))
    return convert.generate_response(result, body.parameters)


@router.post("/generate", summary="Generate tokens (TGI)")
async def generate(
    request: Request, body: GenerateRequest, response: Response, model: str | None = ModelQuery
) -> dict[str, Any]:
    """TGI's /generate, with grammar kinds choice and grammar and per-token extras."""
    return await _generate(request, body, model, response)


@router.post(
    "/generate_stream",
    summary="Generate a stream of tokens with Server-Sent Events (TGI)",
    response_class=StreamingResponse,
    responses=STREAM_RESPONSES,
)
async def generate_stream(request: Request, body: GenerateRequest, model: str | None = ModelQuery) -> StreamingResponse:
    """TGI's /generate_stream: `data: {...}` events; errors after the start arrive as a last error event."""
    return await _stream_response(request, body, model)


@router.post("/", summary="Generate, or stream when `stream` is true (TGI compat route)", responses=JSON_OR_STREAM)
async def compat_generate(
    request: Request, body: GenerateRequest, response: Response, model: str | None = ModelQuery
) -> Any:
    """TGI's compat route, which huggingface_hub's InferenceClient(base_url=...) posts to."""
    answer = await generate_or_stream(request, body, model, response)
    return answer if body.stream or isinstance(answer, Response) else [answer]  # (a Response: the client left)


async def generate_or_stream(
    request: Request, body: GenerateRequest, model: str | None = None, response: Response | None = None
) -> Any:
    """TGI's generate answer, or its stream when the body's `stream` is true."""
    if body.stream:
        return await _stream_response(request, body, model)
    return await _generate(request, body, model, response)


@router.get("/info", summary="Served model info and limits (TGI)")
async def info(request: Request, model: str | None = ModelQuery) -> dict[str, Any]:
    """TGI's Info for a served model, with max_top_n_tokens, registered processors and served models."""
    provider, model_id = resolve(request, model)
    model_info = await run_in_threadpool(provider.info, model_id)
    processors = [{"name": f.name, "description": f.description, "builtin": f.builtin} for f in list_factories()]
    models = [{"id": m, "provider_id": pid} for pid, m in registry_of(request).models()]
    admission = request.app.state.admission.info()
    body = convert.tgi_info(
        model_info, processors=processors, models=models, max_concurrent_requests=admission["max_concurrent_requests"]
    )
    engines = [
        {"name": b.name, "kinds": sorted(b.kinds), "ignored_keywords": sorted(b.ignored_keywords), "notes": b.notes}
        for b in map(backends.get, backends.names())
    ]
    capabilities = provider.capabilities.as_json()
    # whether a request may load a model here: the provider can, and the operator let requests (--allow-model-loading)
    capabilities["model_loading"] = provider.capabilities.model_loading and registry_of(request).loading.allow_requests
    return {**body, **admission, **limits_info(), "capabilities": capabilities, "constraint_engines": engines}


@open_router.get(
    "/health",
    summary="Health check (never needs the API key); 503 while an engine is stuck",
    responses=HEALTH_RESPONSES,
)
async def health(request: Request) -> Any:
    """ok with the requests running and waiting; 503 when running work has not moved for --stall-timeout."""
    registry = registry_of(request)
    if registry.startup is not None and not registry.startup.ready():
        status = registry.startup.status()
        message = status["error"] or f"model {status['model']!r} is loading ({status['elapsed_s']:.0f} s so far)"
        return JSONResponse({**error_body(message, "loading"), "startup": status}, status_code=503)
    limit = request.app.state.stall_timeout_s
    for provider_id, provider in registry.providers.items():
        stalled = stalled_s(provider)
        if stalled > limit:
            message = (
                f"provider {provider_id!r}: the engine has made no progress for {stalled:.0f} s (limit {limit:g} s)"
            )
            return JSONResponse(error_body(message, "unhealthy"), status_code=503)
    admission = request.app.state.admission
    startup = {"startup": registry.startup.status()} if registry.startup is not None else {}
    return {
        "status": "ok",
        "models": len(registry.models()),
        "running": admission.running,
        "waiting": admission.waiting,
        **startup,
    }


@router.post("/tokenize", summary="Tokenize inputs (TGI)")
async def tokenize(request: Request, body: GenerateRequest, model: str | None = ModelQuery) -> list[dict[str, Any]]:
    provider, model_id = resolve(request, model)
    tokens = await run_in_threadpool(provider.tokenize, model_id, body.inputs, body.parameters)
    return [token.model_dump() for token in tokens]


@router.post("/chat_tokenize", summary="A chat request's prompt as the model reads it, templated and tokenized (TGI)")
async def chat_tokenize(request: Request, body: ChatRequest, model: str | None = ModelQuery) -> dict[str, Any]:
    """TGI's /chat_tokenize: the messages (with the tools and template options) through the model's chat template,
    as /v1/chat/completions would send them, and that text's tokens with their offsets. A continued final
    message (continue_final_message) follows the template, tokenized on its own as the model reads it (as vLLM's
    /tokenize shows it, and usage counts it); the opening of a thinking model's reasoning that think_first or a
    reasoning budget adds is not shown. With truncate_prompt_tokens, the tokens are the last ones the model would
    read. The body's `model` wins over `?model=`."""
    provider, model_id, _ = resolve_with_adapter(request, body.model or model)  # (an adapter reads as its model)
    engine = local_engine(provider, model_id, "/chat_tokenize")
    text, tokens = await run_in_threadpool(chat_prompt, engine, body)
    return {"tokenize_response": tokens, "templated_text": text}


def chat_prompt(engine: Any, body: ChatRequest) -> tuple[str, list[dict]]:
    """A chat request's prompt as the model reads it, with the same checks: the templated text and its tokens (the
    ones truncate_prompt_tokens keeps), then a continued final message's, tokenized on their own."""
    fmt = tool_formats.by_name(engine.tool_format)
    messages, params = inbound.prompt_messages(body, fmt), inbound.chat_parameters(body, 0, fmt)
    with named_as_sent({"inputs": "messages", "truncate": "truncate_prompt_tokens"}):
        prompt, _ = engine.encode_prompt(messages, params.truncate, params)
        tokens = engine.tokenize(prompt, special=False, params=params)
    if not params.continue_from:
        return prompt, tokens
    with named_as_sent({"inputs": "messages", "continue_from": "continue_final_message"}):
        continuation.prefix_ids(engine, params.continue_from, len(tokens))  # as a chat request refuses one too long
        continued = engine.tokenize(params.continue_from, special=False)
    shift = len(prompt)
    return prompt + params.continue_from, tokens + [
        {**t, "start": t["start"] + shift, "stop": t["stop"] + shift} for t in continued
    ]


@router.post("/next_token", summary="The next token's distribution, raw and constrained, without sampling")
async def next_token(
    request: Request, body: convert.NextTokenRequest, model: str | None = ModelQuery
) -> NextTokenDistribution:
    """For a prompt or messages, after an optional prefix of the answer, under the request's constraint."""
    inputs = body.prompt()
    provider, model_id = resolve(request, body.model or model)
    return await run_in_threadpool(
        lambda: provider.next_token(model_id, inputs, body.parameters, prefix=body.prefix, top_k=body.top_k)
    )
