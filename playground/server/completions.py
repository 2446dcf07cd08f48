"""POST /v1/completions: OpenAI's legacy completions as vLLM and TGI serve them (prompt, not messages),
with the same constraint fields as chat and our verdict beside each choice."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from playground.providers.base import Provider
from playground.server import chat
from playground.server.docs import JSON_OR_STREAM
from playground.server.errors import exception_event
from playground.server.streaming import decoded, generate_while_connected, iterate_in_thread, started
from playground.server.tgi import resolve, sse
from playground.types import GenerateParameters, GenerationResult, TokenEvent
from playground.wire import checks, completions
from playground.wire.completions import CompletionRequest

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])
Job = tuple[int, str, GenerateParameters]  # (choice index, prompt, parameters)


def _warnings(req: CompletionRequest) -> list[str]:
    return ["user: accepted and ignored (no per-user accounting)"] if req.user is not None else []


async def _jobs(provider: Provider, model_id: str, req: CompletionRequest) -> list[Job]:
    """Choice i*n+j is prompt i's j-th sample, seeded base+j; checked against the model's limits."""
    base = req.seed if req.seed is not None else random.randrange(2**31)
    params = [completions.parameters(req, base + j) for j in range(req.n)]
    info = await run_in_threadpool(provider.info, model_id)
    checks.check_lengths(params[0], info, field="max_tokens")
    checks.check_top_n(params[0], info.max_top_n_tokens, field="logprobs")
    checks.check_best_of(params[0], info.max_best_of, field="best_of")
    return [(i * req.n + j, prompt, params[j]) for i, prompt in enumerate(req.prompts()) for j in range(req.n)]


def _envelope(model_id: str, completion_id: str) -> dict[str, Any]:
    return chat.envelope(model_id, "text_completion", completion_id)


def _choice(index: int, prompt: str, result: GenerationResult, req: CompletionRequest) -> dict[str, Any]:
    seq = result.best
    text = chat.trim_stop(seq.generated_text, seq)
    logprobs = None
    if req.logprobs is not None:
        tokens = completions.generated(seq.tokens, req.logprobs)
        if req.echo:
            tokens = completions.prompt_tokens(result) + tokens
        logprobs = completions.logprobs(tokens)
    return {
        "index": index,
        "text": (prompt if req.echo else "") + text,
        "logprobs": logprobs,
        "finish_reason": chat.FINISH_REASONS[seq.finish_reason],
        **chat.choice_extras(result, _warnings(req)),
    }


@router.post(
    "/completions",
    summary="Text completion with guided decoding (OpenAI's legacy completions, as vLLM and TGI serve it)",
    responses=JSON_OR_STREAM,
)
async def create_completion(request: Request, body: CompletionRequest) -> Any:
    """n choices per prompt, in prompt order; `best_of` candidates pick the likeliest (n = 1)."""
    provider, model_id = resolve(request, body.model)
    jobs = await _jobs(provider, model_id, body)
    completion_id = f"cmpl-{uuid.uuid4().hex}"
    if body.stream:
        first = await started(_events(provider, model_id, jobs[0]))
        return StreamingResponse(
            _chunks(provider, model_id, body, jobs, first, completion_id), media_type="text/event-stream"
        )
    choices, results = [], []
    for index, prompt, params in jobs:
        result = await generate_while_connected(request, provider, model_id, prompt, params)
        if result is None:
            return Response(status_code=499)
        results.append(result)
        choices.append(_choice(index, prompt, result, body))
    usage = _usage(results, body.n)
    warnings = list(dict.fromkeys(w for c in choices for w in c["warnings"]))
    return {**_envelope(model_id, completion_id), "choices": choices, "usage": usage, "warnings": warnings}


def _usage(results: list[GenerationResult], n: int) -> dict[str, int]:
    """Each prompt counted once, every choice's tokens counted."""
    prompt = sum(r.input_length for r in results[::n])
    completion = sum(r.best.generated_tokens for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _events(provider: Provider, model_id: str, job: Job) -> AsyncIterator[TokenEvent | GenerationResult]:
    _, prompt, params = job
    return iterate_in_thread(lambda: provider.stream(model_id, prompt, params))


def _chunk(base: dict[str, Any], index: int, text: str, **extra: Any) -> str:
    return sse({**base, "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": None, **extra}]})


async def _choice_chunks(
    events: AsyncIterator[TokenEvent | GenerationResult], req: CompletionRequest, job: Job, base: dict[str, Any]
) -> AsyncIterator[str | GenerationResult]:
    """One choice's text as it is decoded (stop sequences held back), then its finish chunk and result."""
    index, prompt, params = job
    holdback = chat.StopHoldback(params.stop)
    if req.echo:
        yield _chunk(base, index, prompt)
    async for text, tokens, result in decoded(events, holdback.feed):
        if result is None:
            yield _chunk(base, index, text, logprobs=_stream_logprobs(tokens, req))
            continue
        rest = holdback.finish(result.best)
        if rest or tokens:
            yield _chunk(base, index, rest, logprobs=_stream_logprobs(tokens, req))
        finish = chat.FINISH_REASONS[result.best.finish_reason]
        yield _chunk(base, index, "", finish_reason=finish, **chat.choice_extras(result, _warnings(req)))
        yield result


def _stream_logprobs(tokens: list[Any], req: CompletionRequest) -> dict[str, Any] | None:
    return completions.logprobs(completions.generated(tokens, req.logprobs)) if req.logprobs is not None else None


async def _chunks(
    provider: Provider,
    model_id: str,
    req: CompletionRequest,
    jobs: list[Job],
    first: AsyncIterator[TokenEvent | GenerationResult],
    completion_id: str,
) -> AsyncIterator[str]:
    """Every choice in turn, the usage chunk when asked, then [DONE]."""
    base = _envelope(model_id, completion_id)
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    if include_usage:
        base["usage"] = None
    results: list[GenerationResult] = []
    try:
        for position, job in enumerate(jobs):
            events = first if position == 0 else _events(provider, model_id, job)
            async for item in _choice_chunks(events, req, job, base):
                if isinstance(item, GenerationResult):
                    results.append(item)
                else:
                    yield item
    except Exception as exc:  # after the stream started: a last error event in OpenAI's shape
        yield exception_event(exc, openai=True)
        return
    if include_usage:
        yield sse({**base, "choices": [], "usage": _usage(results, req.n)})
    yield "data: [DONE]\n\n"
