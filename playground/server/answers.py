"""The OpenAI routes' answer to their jobs (one a choice), decoded together: a JSON body once every job is done, or
server-sent chunks of every job as they come; chat and completions differ only in how a choice reads."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Any

from fastapi.responses import Response, StreamingResponse

from playground.errors import ConstraintError, PlaygroundError
from playground.server.errors import exception_event, hf_hub_client
from playground.server.streaming import generate_while_connected, iterate_in_thread, sse, started
from playground.types import GenerationResult
from playground.wire.errors import renamed

Job = tuple[Any, Any]  # (inputs: a prompt or chat messages, GenerateParameters)
Chunk = Callable[..., str]  # one choice's chunk from its fields: `chunk` with the envelope and the index bound
ChoiceChunks = Callable[[AsyncIterator[Any], Job, Chunk], AsyncIterator["str | GenerationResult"]]


def chunk(base: dict[str, Any], index: int, *, root: Mapping[str, Any] | None = None, **fields: Any) -> str:
    """One choice's server-sent chunk: its fields (`delta` or `text`), `logprobs` and `finish_reason` null unless
    given; `root`: fields of the chunk itself (vLLM's prompt_token_ids)."""
    choice = {"index": index, "logprobs": None, "finish_reason": None, **fields}
    return sse({**base, **(root or {}), "choices": [choice]})


@contextmanager
def named_as_sent(names: Mapping[str, str | None]) -> Iterator[None]:
    """An error raised inside names its field as the client sent it (`names`: the engine's name -> the route's), in
    its `param` and its message; a constraint's error names the field the constraint came in (`names["grammar"]`)."""
    try:
        yield
    except PlaygroundError as exc:
        if exc.field is None and isinstance(exc, ConstraintError):
            exc.field = names.get("grammar")
            raise
        if exc.field and exc.field.startswith("parameters."):  # a remote provider's refusal names TGI's body
            exc.field = exc.field.removeprefix("parameters.")
        sent = names.get(exc.field or "")
        if sent:  # (`grammar` is also a constraint kind, which a constraint's words name: those stay)
            if exc.field != "grammar":
                exc.message = re.sub(rf"\b{re.escape(exc.field or '')}\b", sent, exc.message)
            exc.field = sent
        exc.message = _head_named(exc.message, names)
        if not isinstance(exc, ConstraintError):  # (a constraint's message may quote the user's schema: its head only)
            exc.message = renamed(exc.message, names)  # the other fields it names ("must be <= max_tokens")
        exc.args = (exc.message,)
        raise


def _head_named(message: str, names: Mapping[str, str | None]) -> str:
    """The fields a message opens with ("response_format, structured_outputs: ..."), each as the client sent it;
    "x (or x)" said once."""
    head, colon, rest = message.partition(": ")
    if not colon:
        return message
    return re.sub(r"(?<![\w.])([\w.]+) \(or \1\)", r"\1", renamed(head, names)) + colon + rest


def events(provider: Any, model_id: str, job: Job) -> AsyncIterator[Any]:
    """One job's token events and result, decoded on a worker thread."""
    inputs, params = job
    return iterate_in_thread(lambda: provider.stream(model_id, inputs, params))


async def answer(
    request: Any,
    provider: Any,
    model_id: str,
    jobs: list[Job],
    body: Any,
    *,
    base: dict[str, Any],
    choice_chunks: ChoiceChunks,
    usage: Callable[[list[GenerationResult]], dict[str, Any]],
    respond: Callable[[list[GenerationResult]], Any],
    names: Mapping[str, str | None],
) -> Any:
    """With `body.stream`, the chunks of every choice (see choice_stream) once the first job's first event is in (an
    error before it stays an HTTP error); otherwise every job's result to `respond`, the jobs decoded together. A
    client that hangs up stops them all (499).

    `names`: the engine's field names (TGI's: `inputs`, `max_new_tokens`) as this route's client sent them, for the
    `param` of an error."""
    if body.stream:
        with named_as_sent(names):
            first = await started(events(provider, model_id, jobs[0]), request)
        chunks = choice_stream(
            provider,
            model_id,
            jobs,
            first,
            base,
            body.stream_options,
            choice_chunks,
            usage,
            names,
            not hf_hub_client(request.headers),
        )
        return StreamingResponse(chunks, media_type="text/event-stream")
    # every choice at once, as vLLM decodes n: the scheduler batches them; one failing stops the others
    tasks = [asyncio.ensure_future(generate_while_connected(request, provider, model_id, *job)) for job in jobs]
    try:
        with named_as_sent(names):
            results = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    if any(result is None for result in results):
        return Response(status_code=499)
    return respond(results)


async def choice_stream(
    provider: Any,
    model_id: str,
    jobs: list[Job],
    first: AsyncIterator[Any],
    base: dict[str, Any],
    stream_options: Any,
    choice_chunks: ChoiceChunks,
    usage: Callable[[list[GenerationResult]], dict[str, Any]],
    names: Mapping[str, str | None],
    openai_shape: bool = True,
) -> AsyncIterator[str]:
    """Every choice's chunks as they come, the choices decoding together (each ends with its result), the usage
    chunk when asked, then [DONE].

    `base` is the chunks' envelope, bound with each choice's index into the `Chunk` its `choice_chunks` writes with:
    it carries `usage: null` when the stream options ask for usage, as OpenAI's chunks do. An error after the stream
    started is a last error event in OpenAI's shape (TGI's without `openai_shape`: see hf_hub_client), then [DONE],
    and stops the other choices; so does a client that leaves.
    """
    include_usage = bool(stream_options and stream_options.include_usage)
    if include_usage:
        base["usage"] = None
    found: dict[int, GenerationResult] = {}
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def pump(index: int, job: Job) -> None:
        """One choice's chunks into the queue, then its end (None) or its error."""
        try:
            with named_as_sent(names):
                job_events = first if index == 0 else events(provider, model_id, job)
                async for item in choice_chunks(job_events, job, partial(chunk, base, index)):
                    await queue.put((index, item))
            await queue.put((index, None))
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which ends the stream with it
            await queue.put((index, exc))

    tasks = [asyncio.ensure_future(pump(index, job)) for index, job in enumerate(jobs)]
    try:
        open_choices = len(tasks)
        while open_choices:
            index, item = await queue.get()
            if item is None:
                open_choices -= 1
            elif isinstance(item, Exception):
                yield exception_event(item, openai=openai_shape)
                yield "data: [DONE]\n\n"  # as vLLM ends a failed stream: readers wait for it
                return
            elif isinstance(item, GenerationResult):
                found[index] = item
            else:
                yield item
    finally:  # an error, or the client left: the other choices stop decoding
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    results = [found[index] for index in sorted(found)]
    if include_usage:
        yield sse({**base, "choices": [], "usage": usage(results)})
    yield "data: [DONE]\n\n"
