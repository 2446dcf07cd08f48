"""Admission control: at most `max_running` requests work at once, at most `max_queue` wait, the rest get 429.

Waiting costs no thread: a queued request is a future on the event loop. A client that leaves while
queued is noticed (its `http.disconnect` arrives) and never reaches the model. The admitted
requests on a local model decode together (playground/decoding/scheduler.py). A freed slot goes to the waiting
client (playground.client_scope) that runs the fewest requests, the longest-waiting among equals: one
client's backlog of heavy requests cannot keep another's out of every slot. With the queue full, a request
from a client holding fewer places takes the place of the newest waiting request of the client holding the
most (that one is answered 429): one client's burst cannot keep every other client out of the queue either.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from playground import client_scope
from playground.decoding.stats import ADMISSION_WAIT_S
from playground.options import SERVER
from playground.server.errors import error_body

# How long a request is assumed to take before any has finished (seconds), for Retry-After.
FIRST_GUESS_S = 5.0
# A request's body is read whole before it takes a slot or a place in the queue, within this long: a client
# that trickles its body (or stops sending it) holds a connection, never a slot other clients wait for.
BODY_TIMEOUT_S = 30.0


class Displaced(Exception):
    """A waiting request gave its place in the full queue to another client's (Admission.displace)."""


@dataclass(frozen=True)
class AdmissionLimits:
    """The operator's limits (--max-concurrent, --max-queue)."""

    max_running: int = SERVER.max_concurrent
    max_queue: int = SERVER.max_queue

    @property
    def max_in_flight(self) -> int:
        """TGI's max_concurrent_requests: running plus waiting; one more is refused."""
        return self.max_running + self.max_queue


class Admission:
    """Slots for running requests and a bounded FIFO of waiters; lives on one event loop (no locks)."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self.running = 0
        self.refused = 0  # requests answered 429 because the queue was full (/metrics)
        self._waiters: deque[tuple[asyncio.Future[None], str]] = deque()
        self._running_by: Counter[str] = Counter()
        self._mean_s = FIRST_GUESS_S

    @property
    def waiting(self) -> int:
        return sum(1 for waiter, _ in self._waiters if not waiter.done())

    def try_acquire(self, client: str = "") -> bool:
        """A slot now, when one is free and nobody waits before us."""
        if self.running < self.limits.max_running and not self.waiting:
            self.running += 1
            self._running_by[client] += 1
            return True
        return False

    def queue_full(self) -> bool:
        return self.waiting >= self.limits.max_queue

    def displace(self, client: str) -> bool:
        """With the queue full: the newest waiting request of the client holding the most places (running and
        waiting) gives its place up (its wait raises Displaced), when that client holds at least two more than
        `client`; True when one did. A lone client never displaces its own requests."""
        waiting = Counter(owner for waiter, owner in self._waiters if not waiter.done())
        others = [owner for owner in waiting if owner != client]
        if not others:
            return False
        held = {owner: self._running_by[owner] + waiting[owner] for owner in [*others, client]}
        victim = max(others, key=lambda owner: held[owner])
        if held[victim] <= held[client] + 1:
            return False
        newest = next(w for w, owner in reversed(self._waiters) if owner == victim and not w.done())
        newest.set_exception(Displaced())
        self._waiters = deque(entry for entry in self._waiters if not entry[0].done())
        return True

    def enqueue(self, client: str = "") -> asyncio.Future[None]:
        """A place in the queue, taken at once: requests that arrive together count each other against max_queue.
        The future resolves when a slot is handed over; cancelling it gives the place up."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((waiter, client))
        return waiter

    async def acquire(self, client: str = "") -> None:
        """Wait for a slot; cancelling the wait gives up the place (or the slot, if it was just handed over)."""
        if self.try_acquire(client):
            return
        waiter = self.enqueue(client)
        try:
            await waiter
        except asyncio.CancelledError:
            # the slot arrived as we were cancelled: pass it on (a place given up to another client holds none)
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release(client=client)
            raise

    def release(self, took_s: float | None = None, client: str = "") -> None:
        """Hand `client`'s slot to the live waiter whose client runs the fewest requests, or free it."""
        if took_s is not None:
            self._mean_s = 0.8 * self._mean_s + 0.2 * took_s
        self._running_by[client] -= 1
        if self._running_by[client] <= 0:
            del self._running_by[client]
        best: tuple[asyncio.Future[None], str] | None = None
        for entry in self._waiters:  # oldest first: a later one wins only by running fewer
            if not entry[0].done() and (best is None or self._running_by[entry[1]] < self._running_by[best[1]]):
                best = entry
        self._waiters = deque(e for e in self._waiters if not e[0].done() and e is not best)
        if best is not None:
            self._running_by[best[1]] += 1
            best[0].set_result(None)
            return
        self.running -= 1

    def retry_after_s(self) -> int:
        """About when a place in the queue may be free: the mean request time, per running slot."""
        per_slot = self._mean_s * (self.waiting + 1) / max(1, self.limits.max_running)
        return max(1, min(60, math.ceil(per_slot)))

    def info(self) -> dict[str, Any]:
        """The limits as /info reports them (TGI's max_concurrent_requests counts running plus waiting)."""
        return {
            "max_concurrent_requests": self.limits.max_in_flight,
            "max_running_requests": self.limits.max_running,
            "max_queue": self.limits.max_queue,
        }


class AdmissionGate:
    """ASGI middleware: POST requests to `paths` pass only with a slot; past the queue's limit, 429."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        admission: Admission,
        paths: set[str],
        max_body_bytes: int,
        refused_anyway: Callable[[Scope], bool] = lambda scope: False,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.admission = admission
        self.paths = paths
        self.max_body_bytes = max_body_bytes
        self.refused_anyway = refused_anyway  # e.g. no API key: answered at once, never queued or read
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gated = scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.paths
        if not gated:
            await self.app(scope, receive, send)
            return
        if self.refused_anyway(scope):  # its headers alone refuse it: the app answers without its body, unread, so
            # a client without the key that trickles a body (or never ends it) is answered at once, not held
            await self.app(scope, _replay([{"type": "http.request", "body": b"", "more_body": False}], receive), send)
            return
        try:
            body = await asyncio.wait_for(self._body(receive), self.body_timeout_s)
        except asyncio.TimeoutError:
            message = f"the request body did not arrive within {self.body_timeout_s:g} s"
            await JSONResponse(error_body(message, "timeout"), status_code=408)(scope, receive, send)
            return
        if body is None:  # the client left before its body was in
            return
        receive = _replay(body, receive)
        client = client_scope.current()
        arrived = time.monotonic()
        if self.admission.try_acquire(client):
            await self._run(scope, receive, send, client, arrived)
            return
        if self.admission.queue_full() and not self.admission.displace(client):
            await self._refuse(scope, receive, send)
            return
        try:
            buffered = await self._queued(receive, client)
        except Displaced:
            await self._refuse(scope, receive, send, displaced=True)
            return
        if buffered is None:  # the client left while waiting: nothing runs, nobody to answer
            return
        await self._run(scope, _replay(buffered, receive), send, client, arrived)

    async def _run(self, scope: Scope, receive: Receive, send: Send, client: str, arrived: float) -> None:
        started = time.monotonic()
        ADMISSION_WAIT_S.set(started - arrived)  # for /metrics' durations (the route and its threads see it)
        try:
            await self.app(scope, receive, send)
        finally:
            self.admission.release(time.monotonic() - started, client)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, displaced: bool = False) -> None:
        self.admission.refused += 1
        limits = self.admission.limits
        running = f"{limits.max_running} request{'' if limits.max_running == 1 else 's'} running"
        message = f"the server is busy: {running} and {limits.max_queue} waiting (max_queue); retry later"
        if displaced:
            message += (
                " (this request waited, and gave its place to another client's: your requests hold more of the"
                " queue than theirs)"
            )
        headers = {"Retry-After": str(self.admission.retry_after_s())}
        await JSONResponse(error_body(message, "overloaded"), status_code=429, headers=headers)(scope, receive, send)

    async def _body(self, receive: Receive) -> list[Message] | None:
        """The body's messages, to its end (or past the size limit: the app refuses it); None at a disconnect."""
        messages: list[Message] = []
        size = 0
        while size <= self.max_body_bytes:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            messages.append(message)
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        return messages

    async def _queued(self, receive: Receive, client: str) -> list[Message] | None:
        """Wait for a slot while reading the body, so a disconnect is seen; None when the client left. The place in
        the queue is taken before the first await (a burst of requests was all let in: none saw the others wait)."""
        slot = self.admission.enqueue(client)
        try:
            messages = await self._read_until(slot, receive)
        except BaseException:
            _give_up(slot, self.admission, client)
            raise
        if messages is None:
            _give_up(slot, self.admission, client)
            return None
        try:  # (a body past the limit arrived before the slot: cancelled now, the slot must not be lost)
            await slot
        except BaseException:
            _give_up(slot, self.admission, client)
            raise
        return messages

    async def _read_until(self, slot: asyncio.Future[None], receive: Receive) -> list[Message] | None:
        """The messages that arrive before `slot` does; None at a disconnect."""
        messages: list[Message] = []
        size = 0
        while not slot.done() and size <= self.max_body_bytes:  # past the limit the app refuses the body
            incoming = asyncio.ensure_future(receive())
            await asyncio.wait({slot, incoming}, return_when=asyncio.FIRST_COMPLETED)
            if not incoming.done():
                incoming.cancel()
                await asyncio.wait({incoming})
            if incoming.cancelled():
                break
            message = incoming.result()
            if message["type"] == "http.disconnect":
                return None
            messages.append(message)
            size += len(message.get("body", b""))
        return messages


def _give_up(slot: asyncio.Future[None], admission: Admission, client: str) -> None:
    """Leave the queue; a slot that was already granted goes to the next waiter."""
    if not slot.done():
        slot.cancel()
    elif not slot.cancelled() and slot.exception() is None:
        admission.release(client=client)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that gives the messages read while queued first, then the client's own."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
