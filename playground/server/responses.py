"""OpenAI's Responses API, `POST /v1/responses`: the chat route's answer as a Response, or as the typed events a
Responses stream sends (created, the output items and their deltas, then completed or incomplete)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from playground.server import chat, openai
from playground.server.answers import Job, events, named_as_sent
from playground.server.docs import JSON_OR_STREAM
from playground.server.errors import stream_failure
from playground.server.streaming import generate_while_connected, started
from playground.types import GenerationResult
from playground.wire import responses
from playground.wire.inbound import ChatRequest
from playground.wire.responses import ResponsesRequest

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])


@router.post(
    "/responses",
    summary="A response with guided decoding (OpenAI's Responses API, text output; as vLLM serves it)",
    responses=JSON_OR_STREAM,
)
async def create_response(request: Request, body: ResponsesRequest) -> Any:
    """One answer to `input` under `text.format`; `stream` sends it as Responses events. Nothing is stored."""
    names = responses.names(body)
    with named_as_sent(names):
        chat_req = responses.chat_request(body)
        provider, model_id, fmt, jobs = await openai.chat_jobs(request, chat_req)
    ids, created = responses.new_ids(), int(time.time())
    if body.stream:
        with named_as_sent(names):
            first = await started(events(provider, model_id, jobs[0]))
        stream = _events(body, chat_req, ids, model_id, first, jobs[0], fmt, created)
        return StreamingResponse(stream, media_type="text/event-stream")
    with named_as_sent(names):
        result = await generate_while_connected(request, provider, model_id, *jobs[0])
    if result is None:
        return Response(status_code=499)
    completion = chat.completion_response(model_id, [result], chat_req, fmt)
    return responses.response_body(body, ids, model_id, completion, created_at=created)


class _Output:
    """The output items of a stream: each announced (added, and its content part) when its first text comes; the
    reasoning finished when the message starts, the rest at the end, as the final Response lists them."""

    def __init__(self, ids: dict[str, str], event: Callable[..., str]) -> None:
        self.ids, self.event = ids, event
        self.opened: dict[str, int] = {}  # item id -> output index
        self.texts: dict[str, str] = {}
        self.logprobs: dict[str, list[dict[str, Any]]] = {}  # the message's, where they were asked for
        self.done: set[str] = set()

    def text(self, kind: str, delta: str, logprobs: list[dict[str, Any]] | None = None) -> list[str]:
        """A reasoning ("rs") or message ("msg") delta, its item announced first if it is new."""
        item_id = self.ids[kind]
        sent = [] if item_id in self.opened else self._announce(kind)
        if kind == "msg" and self.ids["rs"] in self.opened and self.ids["rs"] not in self.done:
            reasoning = responses.reasoning_item(self.ids["rs"], self.texts[self.ids["rs"]])
            sent = [*self._finish(reasoning), *sent]
        self.texts[item_id] += delta
        if logprobs:
            self.logprobs.setdefault(item_id, []).extend(logprobs)
        where = {"item_id": item_id, "output_index": self.opened[item_id], "content_index": 0}
        if kind == "rs":
            return [*sent, self.event("response.reasoning_text.delta", **where, delta=delta)]
        return [*sent, self.event("response.output_text.delta", **where, delta=delta, logprobs=logprobs or [])]

    def _announce(self, kind: str) -> list[str]:
        item_id = self.ids[kind]
        self.opened[item_id], self.texts[item_id] = len(self.opened), ""
        at = {"output_index": self.opened[item_id]}
        if kind == "rs":
            item = {**responses.reasoning_item(item_id, ""), "content": [], "status": "in_progress"}
            part = {"type": "reasoning_text", "text": ""}
        else:
            item = {**responses.message_item(item_id, "", None, "in_progress"), "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            self.event("response.output_item.added", **at, item=item),
            self.event("response.content_part.added", item_id=item_id, **at, content_index=0, part=part),
        ]

    def so_far(self) -> list[dict[str, Any]]:
        """The items announced so far, as a failed Response lists them: their text (and logprobs) until the failure,
        `incomplete` where the failure cut them."""
        items = []
        for item_id, text in self.texts.items():
            if item_id == self.ids["rs"]:
                status = "completed" if item_id in self.done else "incomplete"
                items.append({**responses.reasoning_item(item_id, text), "status": status})
            else:
                items.append(responses.message_item(item_id, text, self.logprobs.get(item_id), "incomplete"))
        return items

    def finish(self, final: dict[str, Any]) -> list[str]:
        """Every item of the final Response not finished yet, announcing any that sent no text (an empty answer)."""
        sent: list[str] = []
        for item in final["output"]:
            if item["id"] in self.done:
                continue
            if item["id"] not in self.opened:
                sent += self._announce("rs" if item["type"] == "reasoning" else "msg")
            sent += self._finish(item)
        return sent

    def _finish(self, item: dict[str, Any]) -> list[str]:
        self.done.add(item["id"])
        where = {"item_id": item["id"], "output_index": self.opened[item["id"]], "content_index": 0}
        part = item["content"][0]
        if item["type"] == "reasoning":
            text = self.event("response.reasoning_text.done", **where, text=part["text"])
        else:
            logprobs = part.get("logprobs") or []
            text = self.event("response.output_text.done", **where, text=part["text"], logprobs=logprobs)
        return [
            text,
            self.event("response.content_part.done", **where, part=part),
            self.event("response.output_item.done", output_index=where["output_index"], item=item),
        ]


async def _events(
    body: ResponsesRequest,
    chat_req: ChatRequest,
    ids: dict[str, str],
    model_id: str,
    first: Any,
    job: Job,
    fmt: Any,
    created: int,
) -> AsyncIterator[str]:
    """The Responses stream: `event:` and `data:` per event, numbered; an error ends it with `error`, then
    `response.failed` listing the items announced, cut where the error came. A client that leaves stops the decode."""
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(numbers), **fields})}\n\n"

    shell = responses.response_body(body, ids, model_id, created_at=created)
    yield event("response.created", response=shell)
    yield event("response.in_progress", response=shell)
    output, result = _Output(ids, event), None
    # the chat route's chunks as their fields (the chunk writer returns them, not their SSE text)
    chunks = openai.choice_chunks(first, job, lambda **fields: fields, req=chat_req, fmt=fmt)
    try:
        with named_as_sent(responses.names(body)):
            async for item in chunks:
                if isinstance(item, GenerationResult):
                    result = item
                    continue
                delta = item.get("delta") or {}
                if delta.get("reasoning"):
                    for sent in output.text("rs", delta["reasoning"]):
                        yield sent
                if delta.get("content"):
                    logprobs = (item.get("logprobs") or {}).get("content")
                    for sent in output.text("msg", delta["content"], logprobs):
                        yield sent
            if result is None:
                raise RuntimeError("the decode ended without its result")  # a bug: logged, answered as internal
            completion = chat.completion_response(model_id, [result], chat_req, fmt)
            final = responses.response_body(body, ids, model_id, completion, created_at=created)
    except Exception as exc:  # noqa: BLE001 - after the start, an error is the stream's last events
        status, message, error_type, param = stream_failure(exc)
        yield event("error", code=error_type, message=message, param=param)  # `code` free text here: ours
        # the Response's own `error.code` is one of OpenAI's codes, the nearest; the `error` event above names ours
        error = {"code": "rate_limit_exceeded" if status == 429 else "server_error", "message": message}
        failed = {**shell, "status": "failed", "output": output.so_far(), "error": error}
        yield event("response.failed", response=failed)
        return
    finally:
        await chunks.aclose()
        await first.aclose()
    for sent in output.finish(final):
        yield sent
    yield event("response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final)
