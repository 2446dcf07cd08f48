"""Blocking provider iterators, consumed from the event loop without blocking it, and stopped on disconnect."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from playground.context import bound, reader_gone
from playground.errors import PlaygroundError
from playground.types import TokenEvent

T = TypeVar("T")
_ITEM, _ERROR, _DONE = "item", "error", "done"


def _produce(make: Callable[[], Iterator[Any]], put: Callable[[tuple[str, Any]], None], stop: threading.Event) -> None:
    """Runs in its own thread: pull items until the end, an error, or the consumer went away (which a decode job
    waiting for its first token notices through `reader_gone`)."""
    iterator: Iterator[Any] | None = None
    try:
        with bound(reader_gone, stop):
            iterator = make()
            for item in iterator:
                put((_ITEM, item))
                if stop.is_set():
                    break
    except BaseException as exc:  # handed to the consumer, which maps it
        put((_ERROR, exc))
    finally:
        try:
            close = getattr(iterator, "close", None)
            if callable(close):
                close()  # a generator stops decoding here (GeneratorExit inside the engine's loop)
        finally:
            put((_DONE, None))


async def iterate_in_thread(make: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    """Yield the items of `make()` as they come; when the consumer stops early, the producer stops too."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    stop = threading.Event()

    def put(entry: tuple[str, Any]) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, entry)
        except RuntimeError:  # the loop is gone (server shutting down): nobody is listening
            stop.set()

    # in this request's context (its client scope): a new thread would start with an empty one
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(_produce, make, put, stop), name="provider-stream", daemon=True).start()
    try:
        while True:
            kind, value = await queue.get()
            if kind == _ITEM:
                yield value
            elif kind == _ERROR:
                raise value
            else:
                return
    finally:
        stop.set()


class ClientGone(PlaygroundError):
    """The client hung up before its answer began (nobody reads this 499)."""

    status = 499
    error_type = "cancelled"


_LOOK_S = 0.5  # how often a wait for a stream's next item looks whether the client is still there


async def _next(stream: AsyncIterator[T], request: Any) -> T:
    """The stream's next item (StopAsyncIteration at its end); ClientGone once the client has hung up (a long
    prefill's first token): the stream is closed then, and so stops decoding."""
    if request is None:
        return await stream.__anext__()
    step = asyncio.ensure_future(stream.__anext__())
    try:
        while True:
            done, _ = await asyncio.wait({step}, timeout=_LOOK_S)
            if done:
                return step.result()
            if await request.is_disconnected():
                raise ClientGone("the client hung up before its answer began")
    finally:
        if not step.done():
            step.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception, StopAsyncIteration):
            await step  # (done meanwhile: its item or error is nobody's now)


async def generate_while_connected(request: Any, provider: Any, model_id: str, inputs: Any, params: Any) -> Any:
    """A non-streaming generation; a local one runs as a stream, so a client that hangs up frees the CPU.

    Remote providers decode elsewhere (and may not stream best_of), so they get a plain generate call.
    Returns the GenerationResult, or None when the client went away.
    """
    if not provider.capabilities.decodes_here:
        return await run_in_threadpool(provider.generate, model_id, inputs, params)
    last = None
    stream = iterate_in_thread(lambda: provider.stream(model_id, inputs, params))
    try:
        while True:
            try:
                last = await _next(stream, request)
            except StopAsyncIteration:
                return last
            if await request.is_disconnected():
                return None
    except ClientGone:
        return None
    except PlaygroundError as exc:
        exc.generating = last is not None  # a failure after tokens came is TGI's `generation`, as a stream says
        raise
    finally:
        await stream.aclose()


async def started(stream: AsyncIterator[T], request: Any = None) -> AsyncIterator[T]:
    """Wait for the first item before answering, so errors raised before it become plain HTTP errors; closing
    what it returns closes `stream` (a provider stream then stops decoding). With the `request`, a client that hangs
    up meanwhile stops it: ClientGone."""
    missing = object()
    try:
        first: Any = await _next(stream, request)
    except StopAsyncIteration:
        first = missing
    except ClientGone:
        await stream.aclose()  # (a first item that came as the client left holds the stream at its yield)
        raise

    async def chained() -> AsyncIterator[T]:
        try:
            if first is not missing:
                yield first
            async for item in stream:
                yield item
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    return chained()


class StreamedIds:
    """vLLM's return_token_ids on a stream: the prompt's ids (they come with the first token) for a choice's first
    chunk, and for each chunk the ids of the tokens generated since the chunk before (an end of text's too)."""

    def __init__(self) -> None:
        self.prompt: list[int] | None = None
        self.seen: list[int] = []
        self.sent = 0

    async def watch(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """`events`, noting each token's id as it passes (and the prompt's ids, on the first); closing it closes
        `events`."""
        try:
            async for item in events:
                if isinstance(item, TokenEvent):
                    self.seen.append(item.token.id)
                    if item.prompt_ids is not None:
                        self.prompt = item.prompt_ids
                yield item
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    def new(self) -> list[int]:
        """The ids not sent yet, now sent."""
        out = self.seen[self.sent :]
        self.sent = len(self.seen)
        return out


async def decoded(
    events: AsyncIterator[Any], feed: Callable[[str], Any], reasoning: Callable[[str], Any] | None = None
) -> AsyncIterator[tuple[Any, list[Any], Any | None]]:
    """A stream's visible tokens fed through `feed` (text -> what to send, falsy to hold back):
    (what to send, the tokens it carries, None) as it comes, then (None, tokens held back, the result).

    With `reasoning`, a thinking model's reasoning tokens go through it instead (their reasoning text)."""
    pending: list[Any] = []
    async for item in events:
        if not isinstance(item, TokenEvent):  # the GenerationResult
            yield None, pending, item
            return
        if reasoning is not None and item.token.segment == "reasoning":
            out = reasoning(item.reasoning)
            if out:  # its logprobs ride along (those of reasoning text held back are left out)
                yield out, [] if item.token.special else [item.token], None
            continue
        if item.token.special:  # EOS: no text, and no logprobs entry (as in the non-streaming answer)
            continue
        pending.append(item.token)
        out = feed(item.token.text)
        if out:
            yield out, pending, None
            pending = []


def sse(body: dict[str, Any]) -> str:
    """One server-sent event of JSON."""
    return f"data: {json.dumps(body)}\n\n"
