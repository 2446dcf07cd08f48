"""POST /v1/completions: OpenAI's legacy completions as vLLM and TGI serve them (prompt, not messages),
with the same constraint fields as chat and our verdict beside each choice."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from playground.errors import ParameterError
from playground.providers.base import Provider, local_engine
from playground.server import chat
from playground.server.answers import Chunk, Job, answer
from playground.server.docs import JSON_OR_STREAM
from playground.server.streaming import StreamedIds, decoded, started
from playground.server.tgi import echoed_model, resolve_with_adapter, with_adapter
from playground.types import GenerationResult, TokenEvent
from playground.types.sizes import nth_seed
from playground.wire import checks, completions, inbound
from playground.wire.completions import CompletionRequest

# the engine's field names as this route's client sends them, in errors, verdicts and warnings
NAMES = {"inputs": "prompt", "max_new_tokens": "max_tokens"}
router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])


async def _jobs(request: Request, req: CompletionRequest) -> tuple[Provider, str, list[Job]]:
    """The provider and model asked for, and the choices: choice i*n+j (its place in the list) is prompt i's j-th
    sample, seeded base+j; checked against the model's limits."""
    provider, model_id, adapter = resolve_with_adapter(request, req.model)
    base = inbound.base_seed(req)
    params = [with_adapter(completions.parameters(req, nth_seed(base, j)), adapter) for j in range(req.n)]
    if params[0].decoder_input_details and not _prompt_logprobs_from(provider, req.stream):
        # echo with logprobs is scoring (lm-evaluation-harness reads the prompt's logprobs): refused, not left out
        unstreamed = provider.capabilities.prompt_logprobs == "unstreamed"
        why = "on a stream" if unstreamed else "(an OpenAI-style server has no such field)"
        raise ParameterError(
            f"echo: with logprobs it lists the prompt's logprobs, which provider {provider.provider_id!r} does not "
            f"give {why}",
            field="echo",
        )
    info = await run_in_threadpool(provider.info, model_id)
    checks.check_lengths(params[0], info, field="max_tokens")
    checks.check_top_n(params[0], info.max_top_n_tokens, field="logprobs")
    checks.check_best_of(params[0], info.max_best_of, field="best_of")
    checks.check_token_ids(req.return_tokens_as_token_ids, provider.capabilities.local_engine)
    prompts = await run_in_threadpool(_texts, provider, model_id, req)  # (decoding 8 x 131,072 ids takes a while)
    return provider, model_id, [(prompt, params[j]) for prompt in prompts for j in range(req.n)]


def _prompt_logprobs_from(provider: Provider, stream: bool) -> bool:
    """Whether the provider gives a prompt's logprobs (TGI's decoder_input_details) to this request."""
    given = provider.capabilities.prompt_logprobs
    return given == "always" or (given == "unstreamed" and not stream)


def _texts(provider: Provider, model_id: str, req: CompletionRequest) -> list[str]:
    """Each prompt as text; one of token ids keeps them (TokenPrompt): a local model reads exactly those ids."""
    prompts = req.prompts()
    if all(isinstance(prompt, str) for prompt in prompts):
        return prompts  # type: ignore[return-value]
    engine = local_engine(provider, model_id, "a prompt of token ids")
    listed = len(prompts) > 1 or req.prompt != prompts[0]
    return [
        p if isinstance(p, str) else engine.token_prompt(p, field=f"prompt[{i}]" if listed else "prompt")
        for i, p in enumerate(prompts)
    ]


def _envelope(model_id: str, completion_id: str) -> dict[str, Any]:
    return chat.envelope(model_id, "text_completion", completion_id)


def _choice(index: int, prompt: str, result: GenerationResult, req: CompletionRequest) -> dict[str, Any]:
    seq = result.best
    only = completions.echo_only(req)
    text = "" if only else chat.trim_stop(seq.generated_text, seq, bool(req.include_stop_str_in_output))
    logprobs = None
    as_ids = bool(req.return_tokens_as_token_ids)
    if req.logprobs is not None:
        tokens = [] if only else completions.generated(seq.tokens, req.logprobs, as_ids)
        if req.echo:
            tokens = completions.prompt_tokens(result, req.logprobs, as_ids) + tokens
        logprobs = completions.logprobs(tokens)
    ids = {"prompt_token_ids": result.prompt_ids, "token_ids": [] if only else chat.token_ids(seq.tokens)}
    return {
        "index": index,
        "text": (prompt if req.echo else "") + text,
        "logprobs": logprobs,
        "finish_reason": "length" if only else chat.FINISH_REASONS[seq.finish_reason],
        **chat.choice_extras(result, completions.warnings(req), NAMES),
        **(ids if req.return_token_ids else {}),
    }


@router.post(
    "/completions",
    summary="Text completion with guided decoding (OpenAI's legacy completions, as vLLM and TGI serve it)",
    responses=JSON_OR_STREAM,
)
async def create_completion(request: Request, body: CompletionRequest) -> Any:
    """n choices per prompt, in prompt order; `best_of` candidates pick the likeliest (n = 1)."""
    provider, model_id, jobs = await _jobs(request, body)
    completion_id = f"cmpl-{uuid.uuid4().hex}"
    shown = echoed_model(model_id, jobs[0][1])
    base = _envelope(shown, completion_id)

    def usage(results: list[GenerationResult]) -> dict[str, Any]:
        return _usage(results, body.n, completions.echo_only(body))

    def respond(results: list[GenerationResult]) -> dict[str, Any]:
        choices = [_choice(index, job[0], result, body) for index, (job, result) in enumerate(zip(jobs, results))]
        warnings = list(dict.fromkeys(w for c in choices for w in c["warnings"]))
        return {**_envelope(shown, completion_id), "choices": choices, "usage": usage(results), "warnings": warnings}

    choice = partial(_choice_chunks, req=body)
    return await answer(
        request,
        provider,
        model_id,
        jobs,
        body,
        base=base,
        choice_chunks=choice,
        usage=usage,
        respond=respond,
        names={
            **NAMES,
            "grammar": inbound.constraint_field(body),
            "min_tokens": "ignore_eos" if body.ignore_eos else None,  # (vLLM's, read as ours)
            "truncate": "truncate_prompt_tokens" if body.truncate_prompt_tokens is not None else None,
        },
    )


def _usage(results: list[GenerationResult], n: int, echo_only: bool = False) -> dict[str, Any]:
    """Each prompt counted once, every choice's tokens counted (none when only the prompt was echoed)."""
    prompt = sum(r.input_length for r in results[::n])
    completion = 0 if echo_only else sum(r.best.generated_tokens for r in results)
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    cached = [r.cached_tokens for r in results[::n]]
    if cached and None not in cached:
        body["prompt_tokens_details"] = {"cached_tokens": sum(cached)}
    return body


async def _choice_chunks(
    events: AsyncIterator[TokenEvent | GenerationResult], job: Job, chunk: Chunk, *, req: CompletionRequest
) -> AsyncIterator[str | GenerationResult]:
    """One choice's text as it is decoded (stop sequences held back), then its finish chunk and result."""
    prompt, params = job
    holdback = chat.StopHoldback(params.stop, params.include_stop_str_in_output)
    offset = len(prompt) if req.echo else 0  # text_offset counts on from chunk to chunk, as in one answer
    as_ids = bool(req.return_tokens_as_token_ids)
    ids = StreamedIds() if req.return_token_ids else None
    if ids is not None:  # the prompt's ids come with the first token, for the first chunk
        events = await started(ids.watch(events))
    first_chunk = True

    def id_fields(generated: bool = True) -> dict[str, Any]:
        """vLLM's return_token_ids: the prompt's on the choice's first chunk, on each the tokens' since the last."""
        nonlocal first_chunk
        if ids is None:
            return {}
        fields = {"prompt_token_ids": ids.prompt} if first_chunk else {}
        first_chunk = False
        return {**fields, "token_ids": ids.new() if generated else []}

    if completions.echo_only(req):  # the prompt with its logprobs, known with the result, and nothing more
        async for event in events:
            if isinstance(event, GenerationResult):
                scored = None if req.logprobs is None else completions.prompt_tokens(event, req.logprobs, as_ids)
                logprobs = None if scored is None else completions.logprobs(scored)
                yield chunk(text=prompt, logprobs=logprobs, **id_fields(generated=False))
                extras = chat.choice_extras(event, completions.warnings(req), NAMES)
                yield chunk(text="", finish_reason="length", **extras, **id_fields(generated=False))
                yield event
        return
    if req.echo:
        scored = None
        if req.logprobs is not None:  # the prompt's logprobs come with the first token (a remote's: none)
            first = await anext(events, None)
            if isinstance(first, TokenEvent) and first.prefill is not None:
                scored = completions.logprobs(completions.prompt_tokens(first, req.logprobs, as_ids))
            if first is not None:
                events = _resumed(first, events)
        yield chunk(text=prompt, logprobs=scored, **id_fields(generated=False))

    def logprobs(tokens: list[Any]) -> dict[str, Any] | None:
        nonlocal offset
        if req.logprobs is None:
            return None
        found = completions.logprobs(completions.generated(tokens, req.logprobs, as_ids), offset)
        offset += sum(len(t.text) for t in tokens if not t.special)
        return found

    async for text, tokens, result in decoded(events, holdback.feed):
        if result is None:
            yield chunk(text=text, logprobs=logprobs(tokens), **id_fields())
            continue
        rest = holdback.finish(result.best)
        if rest or tokens:
            yield chunk(text=rest, logprobs=logprobs(tokens), **id_fields())
        finish = chat.FINISH_REASONS[result.best.finish_reason]
        extras = chat.choice_extras(result, completions.warnings(req), NAMES)
        yield chunk(text="", finish_reason=finish, **extras, **id_fields())
        yield result


async def _resumed(
    first: TokenEvent | GenerationResult, rest: AsyncIterator[TokenEvent | GenerationResult]
) -> AsyncIterator[TokenEvent | GenerationResult]:
    """The events again, with the one already read in front."""
    yield first
    async for event in rest:
        yield event
