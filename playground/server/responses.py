"""OpenAI's Responses API, `POST /v1/responses`: the chat route's answer as a Response, or as the typed events a
Responses stream sends (created, the output items and their deltas, then completed or incomplete)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from playground.providers.base import local_engine
from playground.server import chat, openai
from playground.server.answers import Job, events, named_as_sent
from playground.server.docs import JSON_OR_STREAM
from playground.server.errors import stream_failure
from playground.server.streaming import generate_while_connected, started
from playground.server.tgi import chat_prompt, echoed_model, resolve_with_adapter
from playground.types import GenerationResult
from playground.wire import responses
from playground.wire.inbound import ChatRequest
from playground.wire.responses import ResponsesRequest

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])


@router.post(
    "/responses",
    summary="A response with guided decoding (OpenAI's Responses API: text and function calls; as vLLM serves it)",
    responses=JSON_OR_STREAM,
)
async def create_response(request: Request, body: ResponsesRequest) -> Any:
    """One answer to `input` under `text.format`, or function calls under `tools`; `stream` sends it as Responses
    events. Nothing is stored."""
    names = responses.names(body)
    with named_as_sent(names):
        chat_req = responses.chat_request(body)
        provider, model_id, fmt, jobs = await openai.chat_jobs(request, chat_req)
    ids, created, shown = responses.new_ids(), int(time.time()), echoed_model(model_id, jobs[0][1])
    if body.stream:
        with named_as_sent(names):
            first = await started(events(provider, model_id, jobs[0]), request)
        stream = _events(body, chat_req, ids, shown, first, jobs[0], fmt, created)
        return StreamingResponse(stream, media_type="text/event-stream")
    with named_as_sent(names):
        result = await generate_while_connected(request, provider, model_id, *jobs[0])
    if result is None:
        return Response(status_code=499)
    completion = chat.completion_response(shown, [result], chat_req, fmt)
    return responses.response_body(body, ids, shown, completion, created_at=created)


@router.post("/responses/input_tokens", summary="How many tokens a Responses request's input is to the model")
async def input_tokens(request: Request, body: ResponsesRequest) -> dict[str, Any]:
    """OpenAI's `responses.input_tokens.count`: the tokens the model would read for this request (instructions,
    input, tools and the chat template's own), counted as a response's `usage.input_tokens` is. Local models only.
    """
    with named_as_sent(responses.names(body)):
        chat_req = responses.chat_request(body)
        provider, model_id, _ = resolve_with_adapter(request, chat_req.model)  # (an adapter reads as its model)
        engine = local_engine(provider, model_id, "/v1/responses/input_tokens")
        _, tokens = await run_in_threadpool(chat_prompt, engine, chat_req)
    return {"object": "response.input_tokens", "input_tokens": len(tokens)}


@router.get("/responses/{response_id}", summary="Stored responses: none are kept (404)", include_in_schema=False)
@router.delete("/responses/{response_id}", include_in_schema=False)
@router.post("/responses/{response_id}/cancel", include_in_schema=False)
@router.get("/responses/{response_id}/input_items", include_in_schema=False)
async def stored_response(response_id: str) -> None:
    """The SDK's `responses.retrieve`, `delete`, `cancel` and `input_items.list`: a 404 that says why (it was a bare
    "Not Found")."""
    raise HTTPException(
        status_code=404,
        detail=f"no response {response_id[:64]!r}: this server keeps no responses (`store` is not supported); "
        "the answer of POST /v1/responses is all there is",
    )


class _Output:
    """The output items of a stream, each announced when its first text comes and finished before the next starts,
    as OpenAI streams them: the reasoning, the message, each function call with its arguments' deltas; the last is
    finished at the end, as the final Response lists them."""

    def __init__(self, ids: dict[str, str], event: Callable[..., str]) -> None:
        self.ids, self.event = ids, event
        self.opened: dict[str, int] = {}  # item id -> output index
        self.texts: dict[str, str] = {}  # item id -> its text, or a call's arguments, so far
        self.logprobs: dict[str, list[dict[str, Any]]] = {}  # the message's, where they were asked for
        self.calls: list[dict[str, Any]] = []  # the function calls announced, as chat wrote them
        self.done: set[str] = set()

    def text(self, kind: str, delta: str, logprobs: list[dict[str, Any]] | None = None) -> list[str]:
        """A reasoning ("rs") or message ("msg") delta, its item announced first if it is new."""
        item_id = self.ids[kind]
        if item_id in self.done:  # text after the calls (a template's envelope): in the final Response only
            return []
        # the reasoning finished before the message opens, in the order the events are numbered (they were numbered
        # announce first, then sent after the reasoning's end)
        sent = self._reasoning_done() if kind == "msg" else []
        if item_id not in self.opened:
            sent += self._announce(self._empty(kind))
        self.texts[item_id] += delta
        if logprobs:
            self.logprobs.setdefault(item_id, []).extend(logprobs)
        where = {"item_id": item_id, "output_index": self.opened[item_id], "content_index": 0}
        if kind == "rs":
            return [*sent, self.event("response.reasoning_text.delta", **where, delta=delta)]
        return [*sent, self.event("response.output_text.delta", **where, delta=delta, logprobs=logprobs or [])]

    def call(self, piece: dict[str, Any]) -> list[str]:
        """A chat tool call delta: a new call's head (its item announced), or more of a call's arguments."""
        sent: list[str] = []
        if piece["index"] == len(self.calls):
            head = {"id": piece["id"], "type": "function", "function": {**piece["function"], "arguments": ""}}
            sent += [*self._reasoning_done(), *self._others_done()]
            self.calls.append(head)
            sent += self._announce(responses.function_call_item(head, "in_progress"))
        item_id = responses.function_call_id(self.calls[piece["index"]])
        delta = piece["function"].get("arguments") or ""
        if delta:
            self.texts[item_id] += delta
            where = {"item_id": item_id, "output_index": self.opened[item_id]}
            sent.append(self.event("response.function_call_arguments.delta", **where, delta=delta))
        return sent

    def same_calls(self, completion: dict[str, Any]) -> dict[str, Any]:
        """The completion with the call ids this stream announced (the whole answer's reading gives new ones)."""
        message = completion["choices"][0]["message"]
        for call, streamed in zip(message.get("tool_calls") or [], self.calls):
            call["id"] = streamed["id"]
        return completion

    def _empty(self, kind: str) -> dict[str, Any]:
        if kind == "rs":
            return {**responses.reasoning_item(self.ids["rs"], ""), "content": [], "status": "in_progress"}
        return {**responses.message_item(self.ids["msg"], "", None, "in_progress"), "content": []}

    def _others_done(self) -> list[str]:
        """Before a call starts: the message and the call before it, as they were streamed."""
        earlier = [self.ids["msg"], *(responses.function_call_id(c) for c in self.calls[-1:])]
        sent: list[str] = []
        for item_id in earlier:
            if item_id in self.opened and item_id not in self.done:
                sent += self._finish({**self._cut(item_id), "status": "completed"})
        return sent

    def _reasoning_done(self) -> list[str]:
        item_id = self.ids["rs"]
        if item_id not in self.opened or item_id in self.done:
            return []
        return self._finish(responses.reasoning_item(item_id, self.texts[item_id]))

    def _announce(self, item: dict[str, Any]) -> list[str]:
        item_id = item["id"]
        self.opened[item_id], self.texts[item_id] = len(self.opened), ""
        at = {"output_index": self.opened[item_id]}
        sent = [self.event("response.output_item.added", **at, item=item)]
        if item["type"] == "reasoning":
            part = {"type": "reasoning_text", "text": ""}
        elif item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        else:
            return sent
        return [*sent, self.event("response.content_part.added", item_id=item_id, **at, content_index=0, part=part)]

    def _cut(self, item_id: str) -> dict[str, Any]:
        """An announced item as streamed so far: `incomplete`, unless it was finished."""
        text, status = self.texts[item_id], "completed" if item_id in self.done else "incomplete"
        if item_id == self.ids["rs"]:
            return {**responses.reasoning_item(item_id, text), "status": status}
        if item_id == self.ids["msg"]:
            return responses.message_item(item_id, text, self.logprobs.get(item_id), status)
        call = next(c for c in self.calls if responses.function_call_id(c) == item_id)
        return responses.function_call_item({**call, "function": {**call["function"], "arguments": text}}, status)

    def so_far(self) -> list[dict[str, Any]]:
        """The items announced so far, as a failed Response lists them: cut where the failure came."""
        return [self._cut(item_id) for item_id in self.opened]

    def finish(self, final: dict[str, Any]) -> list[str]:
        """Every item not finished yet, announcing any that sent no text (an empty answer). The final Response lists
        the items at the indexes they were streamed at; one the whole answer's reading dropped (a call cut off) as
        streamed, `incomplete`, and no empty message beside it (response_body lists none for an answer cut by
        max_output_tokens; one cut by a stop sequence is an empty answer there)."""
        listed = {item["id"]: item for item in final["output"]}
        unsent = [item for item in final["output"] if item["id"] not in self.opened]
        if self.calls:
            unsent = [item for item in unsent if item["type"] != "message" or item["content"][0]["text"]]
        final["output"] = [listed.get(i) or self._cut(i) for i in self.opened] + unsent
        sent: list[str] = []
        for item in final["output"]:
            if item["id"] in self.done:
                continue
            if item["id"] not in self.opened:
                kind = {"reasoning": "rs", "message": "msg"}.get(item["type"])
                sent += self._announce(
                    self._empty(kind) if kind else {**item, "arguments": "", "status": "in_progress"}
                )
            sent += self._finish(item)
        return sent

    def _finish(self, item: dict[str, Any]) -> list[str]:
        self.done.add(item["id"])
        at = {"output_index": self.opened[item["id"]]}
        if item["type"] == "function_call":
            return [
                self.event(
                    "response.function_call_arguments.done", item_id=item["id"], **at, arguments=item["arguments"]
                ),
                self.event("response.output_item.done", **at, item=item),
            ]
        where = {"item_id": item["id"], **at, "content_index": 0}
        part = item["content"][0]
        if item["type"] == "reasoning":
            text = self.event("response.reasoning_text.done", **where, text=part["text"])
        else:
            logprobs = part.get("logprobs") or []
            text = self.event("response.output_text.done", **where, text=part["text"], logprobs=logprobs)
        return [
            text,
            self.event("response.content_part.done", **where, part=part),
            self.event("response.output_item.done", **at, item=item),
        ]


async def _events(
    body: ResponsesRequest,
    chat_req: ChatRequest,
    ids: dict[str, str],
    shown: str,
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

    shell = responses.response_body(body, ids, shown, created_at=created)
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
                for piece in delta.get("tool_calls") or []:
                    for sent in output.call(piece):
                        yield sent
            if result is None:
                raise RuntimeError("the decode ended without its result")  # a bug: logged, answered as internal
            completion = output.same_calls(chat.completion_response(shown, [result], chat_req, fmt))
            final = responses.response_body(body, ids, shown, completion, created_at=created)
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
