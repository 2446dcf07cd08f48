"""The admission gate's bookkeeping without a model: slots, the FIFO of waiters, give-ups, and the UI's queue."""

from __future__ import annotations

import asyncio
import contextvars
import json

from fastapi.testclient import TestClient

from playground import client_scope
from playground.decoding.stats import ADMISSION_WAIT_S, EngineStats
from playground.providers.registry import Registry
from playground.server import create_app
from playground.server.admission import Admission, AdmissionGate, AdmissionLimits
from playground.types import GenerationResult, Sequence, Timings


def test_slots_pass_to_waiters_in_order_and_a_cancelled_waiter_gives_its_place_up() -> None:
    async def scenario() -> list[str]:
        admission = Admission(AdmissionLimits(max_running=1, max_queue=2))
        order: list[str] = []
        assert admission.try_acquire()

        async def waiter(name: str) -> None:
            await admission.acquire()
            order.append(name)

        first, second, third = (asyncio.create_task(waiter(n)) for n in ("first", "second", "third"))
        await asyncio.sleep(0)
        assert admission.waiting == 3 and admission.queue_full()
        second.cancel()
        await asyncio.sleep(0)
        assert admission.waiting == 2
        admission.release(took_s=1.0)
        await first
        admission.release(took_s=1.0)
        await third
        admission.release(took_s=1.0)
        assert admission.running == 0 and admission.waiting == 0
        return order

    assert asyncio.run(scenario()) == ["first", "third"]


def test_retry_after_grows_with_the_queue_and_stays_within_a_minute() -> None:
    admission = Admission(AdmissionLimits(max_running=2, max_queue=100))
    assert admission.retry_after_s() >= 1
    for _ in range(40):  # requests that take half a minute each
        assert admission.try_acquire()
        admission.release(took_s=30.0)
    assert admission.retry_after_s() == 15
    assert admission.info() == {"max_concurrent_requests": 102, "max_running_requests": 2, "max_queue": 100}


def test_the_ui_queue_is_bounded_like_the_api_and_runs_as_many_at_once() -> None:
    app = create_app(Registry([]), ui=True, admission=AdmissionLimits(max_running=3, max_queue=3))
    TestClient(app).get("/config")
    blocks = next(r.app.get_blocks() for r in app.routes if hasattr(getattr(r, "app", None), "get_blocks"))
    assert blocks._queue.max_size == 6
    # several users' chats decode in one batch instead of waiting for each other
    assert blocks._queue.default_concurrency_limit == 3


def test_a_freed_slot_goes_to_the_client_running_the_fewest_not_to_a_backlog() -> None:
    """One client's queue of heavy requests cannot keep another client out (the old FIFO served it last)."""

    async def scenario() -> list[str]:
        admission = Admission(AdmissionLimits(max_running=2, max_queue=10))
        assert admission.try_acquire("heavy") and admission.try_acquire("heavy")
        order: list[str] = []

        async def waiter(client: str) -> None:
            await admission.acquire(client)
            order.append(client)

        backlog = [asyncio.create_task(waiter("heavy")) for _ in range(3)]
        await asyncio.sleep(0)
        newcomer = asyncio.create_task(waiter("light"))
        await asyncio.sleep(0)
        admission.release(took_s=1.0, client="heavy")
        await newcomer
        for _ in backlog:
            admission.release(took_s=1.0, client="heavy")
            await asyncio.sleep(0)
        await asyncio.gather(*backlog)
        return order

    assert asyncio.run(scenario()) == ["light", "heavy", "heavy", "heavy"]


def test_a_body_that_never_ends_holds_no_slot_and_times_out_with_408() -> None:
    """A client trickling its body (or stopping) must not keep others out: the body is read before any slot."""

    async def scenario() -> tuple[list[int], list[bytes], int]:
        admission = Admission(AdmissionLimits(max_running=1, max_queue=0))
        seen: list[bytes] = []

        async def app(scope, receive, send) -> None:
            body, more = b"", True
            while more:  # as FastAPI reads it: to its end
                message = await receive()
                body, more = body + message["body"], message.get("more_body", False)
            seen.append(body)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        gate = AdmissionGate(app, admission=admission, paths={"/generate"}, max_body_bytes=1024, body_timeout_s=0.3)
        scope = {"type": "http", "method": "POST", "path": "/generate", "headers": []}
        statuses: list[int] = []

        def sender(into: list[int]):
            async def send(message) -> None:
                if message["type"] == "http.response.start":
                    into.append(message["status"])

            return send

        async def trickle():
            yield {"type": "http.request", "body": b'{"inputs": ', "more_body": True}
            await asyncio.sleep(3600)  # the rest never comes

        slow = trickle()
        slow_task = asyncio.create_task(gate(scope, slow.__anext__, sender(statuses)))
        await asyncio.sleep(0.05)
        running_while_slow = admission.running

        async def whole():
            return {"type": "http.request", "body": b'{"inputs": "x"}', "more_body": False}

        await asyncio.wait_for(gate(scope, whole, sender(statuses)), 5)  # another client: a slot, not a 429
        await asyncio.wait_for(slow_task, 5)
        return statuses, seen, running_while_slow

    statuses, seen, running_while_slow = asyncio.run(scenario())
    assert running_while_slow == 0
    assert statuses == [200, 408] and seen == [b'{"inputs": "x"}']


def test_a_burst_of_requests_past_the_queue_is_answered_429() -> None:
    """Requests arriving together each saw nobody waiting (a waiter joined the queue only once a task ran it): with
    one slot and a queue of one, seven of eight ran."""

    async def scenario() -> list[int]:
        admission = Admission(AdmissionLimits(max_running=1, max_queue=1))
        release = asyncio.Event()

        async def app(scope, receive, send) -> None:
            await release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        gate = AdmissionGate(app, admission=admission, paths={"/generate"}, max_body_bytes=1024)
        scope = {"type": "http", "method": "POST", "path": "/generate", "headers": []}
        statuses: list[int] = []

        async def send(message) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
                release.set()  # the first refusal lets the running request finish

        async def receive():
            return {"type": "http.request", "body": b'{"inputs": "x"}', "more_body": False}

        await asyncio.wait_for(asyncio.gather(*(gate(dict(scope), receive, send) for _ in range(8))), 5)
        return statuses

    statuses = asyncio.run(scenario())
    assert sorted(statuses) == [200, 200, *[429] * 6], statuses


def test_a_request_s_wait_for_a_slot_counts_in_its_durations_and_a_full_queue_s_429s_are_counted() -> None:
    """TGI's durations run from the request's arrival; ours began when the engine got it, after the wait for an
    admission slot (under --max-concurrent, a request that waited 2.8 s reported 1.6). 429s were not counted."""

    async def scenario() -> tuple[list[float], int]:
        admission = Admission(AdmissionLimits(max_running=1, max_queue=1))
        waits: list[float] = []

        async def app(scope, receive, send) -> None:
            waits.append(ADMISSION_WAIT_S.get())
            await asyncio.sleep(0.3)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        gate = AdmissionGate(app, admission=admission, paths={"/generate"}, max_body_bytes=1024)
        scope = {"type": "http", "method": "POST", "path": "/generate", "headers": []}

        async def body():
            return {"type": "http.request", "body": b'{"inputs": "x"}', "more_body": False}

        async def send(message) -> None:
            pass

        first = asyncio.create_task(gate(scope, body, send))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(gate(scope, body, send))  # waits for the first's slot
        await asyncio.sleep(0.05)
        await gate(scope, body, send)  # the queue (one place) is full: 429
        await asyncio.gather(first, second)
        return waits, admission.refused

    waits, refused = asyncio.run(scenario())
    assert waits[0] < waits[1] and waits[1] > 0.15 and refused == 1  # (the second waited out the first's 0.3 s)


def test_the_engine_s_durations_add_the_wait_for_a_slot() -> None:
    stats = EngineStats()
    result = GenerationResult(
        model_id="m",
        prompt="p",
        input_length=1,
        best=Sequence(generated_text="", generated_tokens=1, finish_reason="length"),
        timings=Timings(total_s=1.0, time_to_first_token_s=0.25),
    )
    contextvars.copy_context().run(lambda: (ADMISSION_WAIT_S.set(2.0), stats.finish(result)))
    assert (stats.duration_s.total, stats.time_to_first_token_s.total) == (3.0, 2.25)


def test_a_request_without_the_key_is_answered_401_with_its_body_unread() -> None:
    """A keyless request that sends part of its body was held open forever: it skipped the body timeout (it never
    takes a slot), and FastAPI read the whole body before the key check answered. Wrong keys still count as guesses,
    a missing key never does; a client waiting out its guesses was read to its body's end before its 429."""
    app = create_app(Registry([]), api_key="s3cret", ui=False)

    async def call(path: str, extra: list[tuple[bytes, bytes]], whole: bool = False) -> tuple[int, dict, int]:
        reads, answer = [], {}

        async def receive():  # a part of the body, then nothing: the rest never comes
            reads.append(1)
            if whole:
                return {"type": "http.request", "body": b'{"inputs": "x"}'}
            if len(reads) == 1:
                return {"type": "http.request", "body": b'{"inputs": ', "more_body": True}
            return {"type": "http.disconnect"}

        async def send(message) -> None:
            answer.setdefault(message["type"], []).append(message)

        headers = [(b"host", b"testserver"), (b"content-type", b"application/json"), (b"content-length", b"100")]
        scope = {"type": "http", "http_version": "1.1", "method": "POST", "path": path, "raw_path": path.encode(),
                 "query_string": b"", "headers": headers + extra, "client": ("10.0.0.7", 5000),
                 "server": ("testserver", 80), "scheme": "http", "root_path": ""}  # fmt: skip
        await app(scope, receive, send)
        start, body = answer["http.response.start"][0], answer["http.response.body"][-1]["body"]
        return start["status"], json.loads(body), len(reads)

    for extra in ([], [(b"authorization", b"Bearer wrong")]):
        assert asyncio.run(call("/generate", extra))[::2] == (401, 0)
        status, shape, reads = asyncio.run(call("/v1/chat/completions", extra))
        assert (status, shape["error"]["type"], reads) == (401, "authentication_error", 0)
    assert asyncio.run(call("/generate", []))[1]["error_type"] == "authentication"
    for _ in range(20):  # no key at all guesses nothing
        assert asyncio.run(call("/generate", []))[0] == 401
    extra = [(b"authorization", b"Bearer wrong")]  # two wrong keys were counted above: eight more reach the limit
    assert [asyncio.run(call("/generate", extra))[0] for _ in range(8)] == [401] * 8
    extra = [(b"authorization", b"Bearer s3cret")]
    assert asyncio.run(call("/generate", extra, whole=True))[0] == 429
    # while it waits, even the right key is refused from its headers: its body is not read either
    assert asyncio.run(call("/generate", extra))[::2] == (429, 0)


def test_with_the_queue_full_another_client_takes_the_newest_place_of_the_client_holding_most() -> None:
    """One address's 30 requests held every slot and place: every other client got 429 (the fair slot hand-over
    only ordered those already waiting). A lone client still gets 429 past the queue, as before."""

    async def scenario() -> tuple[list[tuple[str, int]], list[str]]:
        admission = Admission(AdmissionLimits(max_running=1, max_queue=2))
        release = asyncio.Event()
        ran: list[str] = []

        async def app(scope, receive, send) -> None:
            await release.wait()
            ran.append(client_scope.current())
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        gate = AdmissionGate(app, admission=admission, paths={"/generate"}, max_body_bytes=1024)
        answers: list[tuple[str, int]] = []

        async def request(client: str, name: str) -> None:
            client_scope.enter(client)

            async def receive():
                return {"type": "http.request", "body": b'{"inputs": "x"}', "more_body": False}

            async def send(message) -> None:
                if message["type"] == "http.response.start":
                    answers.append((name, message["status"]))

            await gate({"type": "http", "method": "POST", "path": "/generate", "headers": []}, receive, send)

        tasks = []
        for k in range(4):  # one slot, two places: the fourth is refused (one client alone)
            tasks.append(asyncio.create_task(request("busy", f"busy{k}")))
            await asyncio.sleep(0.01)
        tasks.append(asyncio.create_task(request("other", "other")))  # takes busy2's place
        await asyncio.sleep(0.01)
        tasks.append(asyncio.create_task(request("third", "third")))  # busy holds 2, third 0: busy1's place
        await asyncio.sleep(0.01)
        tasks.append(asyncio.create_task(request("other", "other2")))  # other holds 1 like busy's: refused
        await asyncio.sleep(0.01)
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return answers, ran

    answers, ran = asyncio.run(scenario())
    assert answers[:4] == [("busy3", 429), ("busy2", 429), ("busy1", 429), ("other2", 429)], answers
    assert sorted(answers[4:]) == [("busy0", 200), ("other", 200), ("third", 200)]
    assert ran == ["busy", "other", "third"]  # a freed slot: the client running the fewest, then the oldest


def test_a_waiter_displaced_as_it_is_cancelled_hands_back_no_slot() -> None:
    """An evaluation's worker waiting in acquire, its place given to another client's request in the same step as
    the evaluation ends: the worker released a slot it never held (the count of running requests fell one short)."""

    async def scenario() -> tuple[int, int]:
        admission = Admission(AdmissionLimits(max_running=1, max_queue=1))
        assert admission.try_acquire("eval")
        worker = asyncio.create_task(admission.acquire("eval"))
        await asyncio.sleep(0)
        assert admission.displace("other")
        other = admission.enqueue("other")
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        running_before_eval_ends = admission.running
        admission.release(client="eval")
        await other
        return running_before_eval_ends, admission.running

    assert asyncio.run(scenario()) == (1, 1)
