"""A blocking iterator is consumed off the event loop, stops when the consumer leaves, and passes errors on."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from huggingface_hub.errors import GenerationError
from huggingface_hub.inference._common import _parse_text_generation_error
from openai.types.responses import ResponseFailedEvent, ResponseOutputItem
from pydantic import TypeAdapter

from playground.decoding.scheduler import Job, ReaderGone
from playground.errors import ConstraintError, ProcessorError
from playground.providers.base import Capabilities
from playground.providers.registry import Registry
from playground.server import create_app
from playground.server import responses as responses_route
from playground.server.streaming import ClientGone, iterate_in_thread, started
from playground.server.tgi import _tgi_events
from playground.types import GeneratedToken, GenerateParameters, GenerationResult, Sequence, TokenEvent
from playground.wire import responses as responses_wire
from playground.wire.responses import ResponsesRequest, chat_request
from tests.fakes import FakeProvider
from tests.spec import sse_events, validate


class Counter:
    """A generator that records how far it ran and whether it was closed, like the engine's decode loop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.produced = 0
        self.closed = threading.Event()
        self.thread_names: set[str] = set()

    def __call__(self) -> Iterator[int]:
        try:
            for i in range(self.limit):
                self.thread_names.add(threading.current_thread().name)
                self.produced += 1
                yield i
        finally:
            self.closed.set()


def test_items_arrive_in_order_from_another_thread() -> None:
    counter = Counter(5)

    async def collect() -> list[int]:
        return [item async for item in iterate_in_thread(counter)]

    assert asyncio.run(collect()) == [0, 1, 2, 3, 4]
    assert counter.thread_names == {"provider-stream"}
    assert counter.closed.is_set()


def test_leaving_early_closes_the_producer() -> None:
    counter = Counter(10_000_000)

    async def take_two() -> list[int]:
        out = []
        stream = iterate_in_thread(counter)
        async for item in stream:
            out.append(item)
            if len(out) == 2:
                break
        await stream.aclose()
        return out

    assert asyncio.run(take_two()) == [0, 1]
    assert counter.closed.wait(timeout=30)
    assert counter.produced < 10_000_000


def test_errors_reach_the_consumer_before_the_first_item() -> None:
    def failing() -> Iterator[int]:
        raise ConstraintError("bad schema")
        yield 0

    async def first() -> None:
        await started(iterate_in_thread(failing))

    with pytest.raises(ConstraintError, match="bad schema"):
        asyncio.run(first())


def test_started_keeps_the_first_item() -> None:
    async def run() -> list[int]:
        stream = await started(iterate_in_thread(Counter(3)))
        return [item async for item in stream]

    assert asyncio.run(run()) == [0, 1, 2]


def test_an_error_mid_stream_becomes_the_last_event() -> None:
    async def items():
        yield TokenEvent(index=0, token=GeneratedToken(id=1, text="a", logprob=-0.5))
        yield TokenEvent(index=0, token=GeneratedToken(id=2, text="b", logprob=-0.5))
        raise ProcessorError("processor 'boom' failed: ValueError: no")

    async def collect() -> list[str]:
        return [chunk async for chunk in _tgi_events(items(), GenerateParameters())]

    events = sse_events("".join(asyncio.run(collect())).splitlines())
    for event in events[:2]:
        validate(event, "StreamResponse")
    assert [e["token"]["text"] for e in events[:2]] == ["a", "b"]
    assert events[2] == {"error": "processor 'boom' failed: ValueError: no", "error_type": "generation"}
    validate(events[2], "ErrorResponse")
    assert isinstance(_parse_text_generation_error(events[2]["error"], events[2]["error_type"]), GenerationError)


def test_a_generate_that_fails_after_its_first_tokens_says_generation_as_its_stream_does() -> None:
    """Unstreamed, a failure after tokens came is TGI's `generation` too (it was `validation`); before them, as it was."""

    class FailsMidway(FakeProvider):
        def stream(self, model: str, inputs: Any, params: GenerateParameters) -> Iterator[Any]:
            if params.max_new_tokens > 1:
                yield TokenEvent(index=0, token=GeneratedToken(id=1, text="a", logprob=-0.5))
            raise ProcessorError("processor 'boom' failed: ValueError: no")

    fake = FailsMidway(models=("m",), capabilities=Capabilities(decodes_here=True))
    client = TestClient(create_app(Registry([fake]), ui=False))
    replies = {}
    for tokens, kind, status in [(4, "generation", 424), (1, "validation", 422)]:  # TGI's Generation Error: 424
        reply = client.post("/generate", json={"inputs": "Hi", "parameters": {"max_new_tokens": tokens}})
        assert reply.status_code == status and reply.json()["error_type"] == kind, reply.text
        validate(reply.json(), "ErrorResponse")
        replies[kind] = reply.json()
    assert isinstance(_parse_text_generation_error(replies["generation"]["error"], "generation"), GenerationError)


def test_a_token_known_not_to_be_the_last_is_sent_before_the_next_is_decoded() -> None:
    """TGI sends each token as it is decoded: only the last waits for the result (it carries generated_text)."""
    decoded_next = asyncio.Event()

    async def items():
        yield TokenEvent(index=0, token=GeneratedToken(id=1, text="a", logprob=-0.5), last=False)
        await decoded_next.wait()  # the next token takes a step to decode
        yield TokenEvent(index=0, token=GeneratedToken(id=2, text="b", logprob=-0.5), last=True)
        best = Sequence(generated_text="ab", finish_reason="eos_token", generated_tokens=2)
        yield GenerationResult(model_id="m", prompt="p", input_length=1, best=best)

    async def read() -> list[dict]:
        stream = _tgi_events(items(), GenerateParameters())
        first = await asyncio.wait_for(stream.__anext__(), timeout=5)  # not held until "b" exists
        decoded_next.set()
        return sse_events("".join([first, *[chunk async for chunk in stream]]).splitlines())

    events = asyncio.run(read())
    assert [(e["token"]["text"], e["generated_text"]) for e in events] == [("a", None), ("b", "ab")]
    for event in events:
        validate(event, "StreamResponse")


class HangsUp:
    """A request whose client goes away after `after` checks."""

    def __init__(self, after: int, headers: dict[str, str] | None = None) -> None:
        self.checks = 0
        self.after = after
        self.headers = headers or {}

    async def is_disconnected(self) -> bool:
        self.checks += 1
        return self.checks > self.after


class CountingProvider:
    def __init__(self, decodes_here: bool, counter: Counter) -> None:
        self.capabilities = Capabilities(decodes_here=decodes_here)
        self.counter = counter

    def stream(self, model, inputs, params):
        return self.counter()

    def generate(self, model, inputs, params):
        return list(self.counter())[-1]


def test_a_local_generation_stops_when_the_client_hangs_up() -> None:
    from playground.server.streaming import generate_while_connected

    counter = Counter(10_000_000)
    result = asyncio.run(generate_while_connected(HangsUp(after=3), CountingProvider(True, counter), "m", "p", None))
    assert result is None
    assert counter.closed.wait(timeout=30)
    assert counter.produced < 10_000_000
    finished = asyncio.run(
        generate_while_connected(HangsUp(after=100), CountingProvider(True, Counter(5)), "m", "p", None)
    )
    assert finished == 4


class Prefilling:
    """A local provider whose request waits for its first event as a long prefill does: nothing ever comes."""

    capabilities = Capabilities(decodes_here=True)

    def __init__(self) -> None:
        self.jobs: list[Job] = []

    def stream(self, model, inputs, params):
        job = Job(decode=None)  # type: ignore[arg-type] - never scheduled: its outbox stays empty
        self.jobs.append(job)
        yield from job.events()


def test_a_client_that_hangs_up_before_the_first_token_stops_the_job_waiting_for_it() -> None:
    """The hang-up was seen only once a first token came: a 2,500-word prompt prefilled for 15 s for nobody, holding
    the server's only place. The wait for that token looks at the client; the job, at its reader."""
    from playground.server.streaming import generate_while_connected

    plain = Prefilling()
    assert asyncio.run(generate_while_connected(HangsUp(after=0), plain, "m", "p", None)) is None
    assert plain.jobs and plain.jobs[0].cancelled.wait(timeout=10)

    streamed = Prefilling()

    async def start() -> None:
        await started(iterate_in_thread(lambda: streamed.stream("m", "p", None)), HangsUp(after=0))

    with pytest.raises(ClientGone):
        asyncio.run(start())
    assert streamed.jobs and streamed.jobs[0].cancelled.wait(timeout=10)


class SlowToSayGone:
    """A request whose disconnect check takes 2 s and then says the client is gone."""

    headers: dict[str, str] = {}

    async def is_disconnected(self) -> bool:
        await asyncio.sleep(2)
        return True


def test_a_first_item_that_comes_as_the_client_leaves_still_stops_the_stream() -> None:
    """The first item arrived while the disconnect check ran: the stream was left at its yield, decoding on."""
    closed = threading.Event()

    def slow() -> Iterator[int]:
        try:
            time.sleep(1.5)  # during the check (which starts at 0.5 s and ends at 2.5 s)
            while True:
                yield 1
                time.sleep(0.01)
        finally:
            closed.set()

    async def start() -> bool:
        with pytest.raises(ClientGone):
            await started(iterate_in_thread(slow), SlowToSayGone())
        return closed.wait(timeout=10)  # while the loop still runs: no shutdown closes the stream for us

    assert asyncio.run(start())


def test_a_job_whose_reader_has_gone_stops_waiting_as_a_closed_stream() -> None:
    gone = threading.Event()
    job = Job(decode=None, reader_gone=gone)  # type: ignore[arg-type]
    gone.set()
    with pytest.raises(ReaderGone):
        next(job.events())
    assert job.cancelled.is_set() and isinstance(ReaderGone(), GeneratorExit)  # counted as a reader that left


def test_a_remote_generation_is_one_plain_call() -> None:
    from playground.server.streaming import generate_while_connected

    counter = Counter(5)
    assert (
        asyncio.run(generate_while_connected(HangsUp(after=0), CountingProvider(False, counter), "m", "p", None)) == 4
    )
    assert counter.produced == 5


class MeetingProvider:
    """Each job's stream waits until every job's stream has started (a barrier): jobs decoded one after another
    never meet. `fail` makes that job's stream raise once they have met."""

    def __init__(self, jobs: int, fail: str | None = None) -> None:
        self.capabilities = Capabilities(decodes_here=True)
        self.barrier = threading.Barrier(jobs, timeout=10)
        self.fail = fail
        self.closed: list[str] = []

    def stream(self, model, inputs, params):
        try:
            self.barrier.wait()
            if inputs == self.fail:
                raise ConstraintError(f"{inputs} failed", field="inputs")
            yield from range(10_000_000) if self.fail else [f"{inputs} done"]
        finally:
            self.closed.append(inputs)


def _answer(provider: MeetingProvider, prompts: list[str]):
    from types import SimpleNamespace

    from playground.server.answers import answer

    jobs = [(prompt, None) for prompt in prompts]
    body = SimpleNamespace(stream=False)
    kwargs = {"base": {}, "choice_chunks": None, "usage": None, "respond": list, "names": {"inputs": "prompt"}}
    return asyncio.run(answer(HangsUp(after=10**9), provider, "m", jobs, body, **kwargs))


def test_the_choices_of_one_request_decode_together_and_one_failing_stops_the_others() -> None:
    assert _answer(MeetingProvider(3), ["a", "b", "c"]) == ["a done", "b done", "c done"]
    provider = MeetingProvider(3, fail="b")
    with pytest.raises(ConstraintError, match="b failed") as caught:
        _answer(provider, ["a", "b", "c"])
    assert caught.value.field == "prompt"  # the route's name for the engine's field
    deadline = time.monotonic() + 30
    while len(provider.closed) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(provider.closed) == ["a", "b", "c"]  # the other choices stopped decoding


class StreamsMeeting(MeetingProvider):
    """Each stream yields once, then waits for every other stream to have yielded too (a stream sent one choice
    after another never gets past its first chunk)."""

    def stream(self, model, inputs, params):
        try:
            yield f"{inputs} started"
            self.barrier.wait()
            if inputs == self.fail:
                raise ConstraintError(f"{inputs} failed", field="inputs")
            yield f"{inputs} done"
            yield from range(10_000_000) if self.fail else []
        finally:
            self.closed.append(inputs)


def _stream(provider: MeetingProvider, prompts: list[str], headers: dict[str, str] | None = None) -> list[dict]:
    """The stream's JSON events; it must end with [DONE] (vLLM sends it after an error event too)."""
    from types import SimpleNamespace

    from playground.server.answers import answer

    async def choice_chunks(events, job, chunk):
        async for item in events:
            if isinstance(item, str):
                yield chunk(text=item)

    async def read() -> list[dict]:
        body = SimpleNamespace(stream=True, stream_options=None)
        kwargs = {
            "base": {},
            "choice_chunks": choice_chunks,
            "usage": None,
            "respond": None,
            "names": {"inputs": "prompt"},
        }
        request = HangsUp(after=10**9, headers=headers)
        response = await answer(request, provider, "m", [(p, None) for p in prompts], body, **kwargs)
        return [event async for event in response.body_iterator]

    events = asyncio.run(read())
    assert events[-1] == "data: [DONE]\n\n" and events.count(events[-1]) == 1
    return [json.loads(e[len("data: ") :]) for e in events[:-1]]


def test_streamed_choices_decode_together_and_one_failing_ends_the_stream_and_stops_the_others() -> None:
    events = _stream(StreamsMeeting(3), ["a", "b", "c"])
    texts: dict[int, list[str]] = {}
    for event in events:
        texts.setdefault(event["choices"][0]["index"], []).append(event["choices"][0]["text"])
    assert texts == {i: [f"{p} started", f"{p} done"] for i, p in enumerate("abc")}  # each choice's in its order
    provider = StreamsMeeting(3, fail="b")
    events = _stream(provider, ["a", "b", "c"])
    assert events[-1]["error"]["message"] == "b failed" and events[-1]["error"]["param"] == "prompt"
    # huggingface_hub's chat stream reads `error` as its message: TGI's event (it showed OpenAI's object as text)
    hub = {"user-agent": "unknown/None; hf_hub/2.4.0; python/3.11.2"}
    assert _stream(StreamsMeeting(3, fail="b"), ["a", "b", "c"], hub)[-1] == {
        "error": "b failed",
        "error_type": "generation",
    }
    deadline = time.monotonic() + 30
    while len(provider.closed) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(provider.closed) == ["a", "b", "c"]


def test_a_responses_stream_that_fails_ends_with_error_then_failed() -> None:
    body = ResponsesRequest(input="Hi", stream=True)
    chat_req = chat_request(body)

    async def items():
        yield TokenEvent(index=0, token=GeneratedToken(id=1, text="a", logprob=-0.5))
        raise ProcessorError("processor 'boom' failed: ValueError: no")

    async def collect() -> list[str]:
        decode = items()
        job = (chat_req.messages, GenerateParameters())
        ids = {"resp": "resp_1", "rs": "rs_1", "msg": "msg_1"}
        return [chunk async for chunk in responses_route._events(body, chat_req, ids, "m", decode, job, None, 1)]

    lines = "".join(asyncio.run(collect())).splitlines()
    events = sse_events(lines)
    kinds = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "error",
        "response.failed",
    ]
    assert [e["type"] for e in events] == kinds and [e["sequence_number"] for e in events] == list(range(7))
    assert events[5]["code"] == "processor" and events[5]["message"] == "processor 'boom' failed: ValueError: no"
    failed = ResponseFailedEvent.model_validate(events[6]).response  # OpenAI's types, checked: codes are theirs
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert failed.error.message == "processor 'boom' failed: ValueError: no"
    assert [(item.id, item.status, item.content[0].text) for item in failed.output] == [("msg_1", "incomplete", "a")]


def test_a_failed_response_lists_the_reasoning_and_the_message_as_far_as_they_came() -> None:
    output = responses_route._Output({"resp": "resp_1", "rs": "rs_1", "msg": "msg_1"}, lambda kind, **_: kind)
    output.text("rs", "Let me think")
    assert [(item["id"], item["status"]) for item in output.so_far()] == [("rs_1", "incomplete")]
    top = {"token": "4", "logprob": -0.1, "bytes": [52], "top_logprobs": []}
    output.text("msg", "4", [top])  # the message starts: the reasoning is done
    items = [
        TypeAdapter(ResponseOutputItem).validate_python(item) for item in output.so_far()
    ]  # OpenAI's types, checked
    assert [(item.id, item.status) for item in items] == [("rs_1", "completed"), ("msg_1", "incomplete")]
    assert items[0].content[0].text == "Let me think" and items[1].content[0].text == "4"
    assert items[1].content[0].logprobs[0].logprob == -0.1


def test_streamed_calls_are_each_finished_before_the_next_starts_and_the_response_lists_them_as_streamed() -> None:
    """As OpenAI streams items: the message, then each call, each done before the next is added (calls overlapped);
    a call the whole answer's reading dropped (cut off) stays as streamed, and no empty message is added beside it."""
    sent: list[tuple[str, dict]] = []
    output = responses_route._Output(
        {"resp": "r", "rs": "rs_1", "msg": "msg_1"}, lambda kind, **f: sent.append((kind, f))
    )
    output.text("msg", "Checking.")
    head = {"type": "function", "function": {"name": "a", "arguments": ""}}
    output.call({"index": 0, "id": "call_1", **head})
    output.call({"index": 0, "function": {"arguments": '{"x": 1}'}})
    output.call({"index": 1, "id": "call_2", **{**head, "function": {"name": "b", "arguments": ""}}})
    output.call({"index": 1, "function": {"arguments": '{"y"'}})
    order = [(kind, f.get("output_index")) for kind, f in sent if not kind.endswith(".delta")]
    assert order == [
        ("response.output_item.added", 0),
        ("response.content_part.added", 0),
        ("response.output_text.done", 0),
        ("response.content_part.done", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.function_call_arguments.done", 1),
        ("response.output_item.done", 1),
        ("response.output_item.added", 2),
    ]
    added = [f["item"] for kind, f in sent if kind == "response.output_item.added"][-1]
    assert added == {**added, "id": "fc_2", "call_id": "call_2", "name": "b", "arguments": "", "status": "in_progress"}
    # had the stream failed here, its Response would list what was finished as completed, the rest cut
    assert [(item["id"], item["status"]) for item in output.so_far()] == [
        ("msg_1", "completed"), ("fc_1", "completed"), ("fc_2", "incomplete")
    ]  # fmt: skip
    # the whole answer: the message and the first call; the second was cut off (no call), with an empty message
    completion = {
        "choices": [
            {"message": {"tool_calls": [{"id": "call_new", "function": {"name": "a", "arguments": '{"x": 1}'}}]}}
        ]
    }
    assert output.same_calls(completion)["choices"][0]["message"]["tool_calls"][0]["id"] == "call_1"
    final = {"output": [
        responses_wire.message_item("msg_1", "Checking.", None, "completed"),
        responses_wire.function_call_item({"id": "call_1", "function": {"name": "a", "arguments": '{"x": 1}'}}, "completed"),
    ]}  # fmt: skip
    sent.clear()
    output.finish(final)
    assert [(kind, f["output_index"]) for kind, f in sent] == [
        ("response.function_call_arguments.done", 2),
        ("response.output_item.done", 2),
    ]
    items = [TypeAdapter(ResponseOutputItem).validate_python(item) for item in final["output"]]  # OpenAI's types
    assert [(item.id, item.status) for item in items] == [
        ("msg_1", "completed"),
        ("fc_1", "completed"),
        ("fc_2", "incomplete"),
    ]
    assert items[2].arguments == '{"y"' and sent[-1][1]["item"] == final["output"][2]


def answer(content: str | None, finish_reason: str, reasoning: str | None = None) -> dict[str, Any]:
    """A chat completion of one choice without calls, as the Responses route reads it."""
    usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    message = {"role": "assistant", "content": content, "reasoning": reasoning}
    extras = {"validation": None, "seed": None, "constraint_kind": "none", "constraint_engine": None, "warnings": []}
    return {"choices": [{"message": message, "finish_reason": finish_reason, **extras}], "usage": usage}


def test_an_answer_cut_before_any_text_or_call_lists_no_message_and_streams_none() -> None:
    """Cut inside a call's name (nothing streamed, no call read back): no empty `incomplete` message, in the
    Response or its stream; an answer that ends empty has its empty message, as one that reasoned first."""
    request = responses_wire.ResponsesRequest(model="m", input="hi", max_output_tokens=3)
    ids = {"resp": "r", "rs": "rs_1", "msg": "msg_1"}
    cut = responses_wire.response_body(request, ids, "m", answer("", "length"))
    assert cut["status"] == "incomplete" and cut["output"] == []
    sent: list[str] = []
    stream = responses_route._Output(ids, lambda kind, **_: sent.append(kind))
    stream.finish(cut)
    assert sent == [] and cut["output"] == []
    for reasoning in (None, "Nothing to say."):
        empty = responses_wire.response_body(request, ids, "m", answer("", "stop", reasoning))
        (message,) = [item for item in empty["output"] if item["type"] == "message"]
        assert message["status"] == "completed" and message["content"][0]["text"] == ""
        added: list[dict] = []
        stream = responses_route._Output(ids, lambda kind, added=added, **f: added.append(f.get("item") or {}))
        if reasoning:
            stream.text("rs", reasoning)
        stream.finish(empty)
        assert [item["type"] for item in empty["output"]] == ["reasoning"] * bool(reasoning) + ["message"]
        assert "message" in [item.get("type") for item in added]  # announced and finished in the stream too
    # a call streamed, then cut by a stop sequence (the whole answer: empty, no call): the call as streamed, alone
    stream = responses_route._Output(ids, lambda kind, **_: None)
    stream.call({"index": 0, "id": "call_1", "type": "function", "function": {"name": "a", "arguments": ""}})
    stopped = responses_wire.response_body(request, ids, "m", answer("", "stop"))
    stream.finish(stopped)
    assert [(item["type"], item["status"]) for item in stopped["output"]] == [("function_call", "incomplete")]


def test_a_call_the_stream_never_sent_is_announced_as_a_call_at_the_end() -> None:
    sent: list[tuple[str, dict]] = []
    output = responses_route._Output(
        {"resp": "r", "rs": "rs_1", "msg": "msg_1"}, lambda kind, **f: sent.append((kind, f))
    )
    call = responses_wire.function_call_item(
        {"id": "call_9", "function": {"name": "a", "arguments": "{}"}}, "completed"
    )
    output.finish({"output": [call]})
    assert [kind for kind, _ in sent] == [
        "response.output_item.added",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    assert sent[0][1]["item"] == {**call, "arguments": "", "status": "in_progress"} and sent[2][1]["item"] == call
