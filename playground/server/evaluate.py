"""POST /evaluate: one constraint over many prompts, streamed as server-sent events, then a summary.

Each row is an ordinary generation: on a local model it joins the batch like any request. The evaluation
holds one admission slot; up to EVAL_PARALLEL - 1 more rows run at once only on slots they wait for in
the queue like any request (never past its limit), so a public Space is not monopolised. One evaluation
per client at a time; a client that hangs up stops the remaining rows (noticed when the next row's event
cannot be sent: the rows running then finish, no other starts).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import Field, field_validator
from starlette.concurrency import run_in_threadpool

from playground import client_scope
from playground.debug.evaluation import MAX_EVAL_ROWS, EvalRow, failed_row, row_of, summary
from playground.debug.state import LocalEngine
from playground.errors import ParameterError, PlaygroundError
from playground.providers import base
from playground.providers.base import Provider
from playground.server.admission import Admission, Displaced
from playground.server.docs import STREAM_RESPONSES
from playground.server.streaming import iterate_in_thread, sse
from playground.server.tgi import ModelQuery, resolve
from playground.types import ChatMessage, GenerateParameters, GenerationResult, Strict
from playground.types.base import InputText, Name
from playground.types.chat import check_messages_size
from playground.types.sizes import MAX_MESSAGES
from playground.wire import checks

router = APIRouter(tags=["Scoring and evaluation"])
EVAL_PARALLEL = 4
Prompt = str | list[ChatMessage]


class EvaluationRunning(PlaygroundError):
    """This client's previous evaluation has not finished."""

    status = 429
    error_type = "overloaded"


class EvaluateRequest(Strict):
    """Body of POST /evaluate: `prompts` (or chat `conversations`), optional `expected` answers, one `parameters`."""

    prompts: list[InputText] | None = Field(default=None, min_length=1, max_length=MAX_EVAL_ROWS)
    conversations: list[list[ChatMessage]] | None = Field(default=None, min_length=1, max_length=MAX_EVAL_ROWS)
    expected: list[str | None] | None = Field(default=None, max_length=MAX_EVAL_ROWS)
    parameters: GenerateParameters = Field(default_factory=GenerateParameters)
    model: Name | None = None

    @field_validator("conversations")
    @classmethod
    def _sizes(cls, conversations: list[list[ChatMessage]] | None) -> list[list[ChatMessage]] | None:
        for messages in conversations or []:
            if not 1 <= len(messages) <= MAX_MESSAGES:
                raise ValueError(f"each conversation holds 1 to {MAX_MESSAGES} messages")
            check_messages_size(messages)
        return conversations

    def rows(self) -> list[tuple[Prompt, str | None]]:
        """(prompt, expected answer) per row."""
        if (self.prompts is None) == (self.conversations is None):
            raise ParameterError("give exactly one of `prompts` or `conversations` (chats)", field="prompts")
        prompts: list[Prompt] = list(self.prompts or []) or list(self.conversations or [])
        expected = self.expected if self.expected is not None else [None] * len(prompts)
        if len(expected) != len(prompts):
            raise ParameterError(
                f"expected: one answer (or null) per prompt: {len(expected)} for {len(prompts)} prompts",
                field="expected",
            )
        return list(zip(prompts, expected))


@router.post(
    "/evaluate",
    summary="Evaluate one constraint over many prompts: an event per finished row, then the summary",
    response_class=StreamingResponse,
    responses=STREAM_RESPONSES,
)
async def evaluate(request: Request, body: EvaluateRequest, model: str | None = ModelQuery) -> StreamingResponse:
    """`data: {"row": {...}}` per finished row (in the order they finish), then `data: {"summary", "rows"}`."""
    provider, model_id = resolve(request, body.model or model)
    checks.check_limits(body.parameters, await run_in_threadpool(provider.info, model_id), streaming=False)
    if body.parameters.best_of not in (None, 1):
        raise ParameterError("best_of: an evaluation decodes one answer per prompt", field="best_of")
    rows = body.rows()
    engine = base.local_engine(provider, model_id, "") if provider.capabilities.local_engine else None
    client = client_scope.current()
    running: set[str] | None = getattr(request.app.state, "evaluations", None)
    if running is None:
        running = request.app.state.evaluations = set()
    if client in running:
        raise EvaluationRunning("one evaluation per client at a time: yours is still running")
    running.add(client)
    admission: Admission = request.app.state.admission
    run = _Evaluation(provider, model_id, body.parameters, engine, admission, client)
    return _ClosingStream(_events(run, rows, running, client), media_type="text/event-stream")


async def _events(
    run: _Evaluation, rows: list[tuple[Prompt, str | None]], running: set[str], client: str
) -> AsyncIterator[str]:
    finished: asyncio.Queue[EvalRow] = asyncio.Queue()
    pending = list(enumerate(rows))
    workers = [asyncio.create_task(run.worker(pending, finished, own_slot=k == 0)) for k in range(EVAL_PARALLEL)]

    def stop() -> None:
        """The remaining rows never start, running ones leave the batch, and the client may evaluate again."""
        pending.clear()
        for task in workers:
            task.cancel()
        running.discard(client)

    done: list[EvalRow] = []
    try:
        while len(done) < len(rows):
            row = await finished.get()
            done.append(row)
            yield sse({"row": row.model_dump()})
        ordered = sorted(done, key=lambda r: r.index)
        yield sse({"summary": summary(ordered, len(rows)), "rows": [r.model_dump(exclude={"tokens"}) for r in ordered]})
    finally:
        stop()
        await asyncio.gather(*workers, return_exceptions=True)


class _ClosingStream(StreamingResponse):
    """A stream whose events stop being produced as soon as one cannot be sent (the client hung up)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


class _Evaluation:
    """What every row of one evaluation shares, and the workers that run them."""

    def __init__(
        self,
        provider: Provider,
        model_id: str,
        params: GenerateParameters,
        engine: LocalEngine | None,
        admission: Admission,
        client: str,
    ) -> None:
        self.provider, self.model_id, self.params, self.engine = provider, model_id, params, engine
        self.admission, self.client = admission, client

    async def worker(
        self, pending: list[tuple[int, tuple[Prompt, str | None]]], out: asyncio.Queue[EvalRow], own_slot: bool
    ) -> None:
        """Run rows until none is left: on the evaluation's own slot, or each on a slot waited for."""
        while pending:
            if not own_slot:
                if self.admission.queue_full():
                    return
                try:
                    await self.admission.acquire(self.client)
                except Displaced:  # its place went to another client's request: the own slot runs the rest
                    return
                if not pending:
                    self.admission.release(client=self.client)
                    return
            index, (prompt, expected) = pending.pop(0)
            try:
                await out.put(await self._row(index, prompt, expected))
            finally:
                if not own_slot:
                    self.admission.release(client=self.client)

    async def _row(self, index: int, prompt: Prompt, expected: str | None) -> EvalRow:
        try:
            result = await self._generate(prompt)
            return await run_in_threadpool(row_of, index, prompt, result, expected, self.engine, self.params)
        except PlaygroundError as exc:
            return failed_row(index, prompt, expected, exc.message)

    async def _generate(self, prompt: Prompt) -> GenerationResult:
        """One ordinary generation; a local one as a stream, so cancelling it leaves the batch at once."""
        params = self.params.model_copy(update={"details": True})
        if not self.provider.capabilities.decodes_here:
            return await run_in_threadpool(self.provider.generate, self.model_id, prompt, params)
        last: Any = None
        stream = iterate_in_thread(lambda: self.provider.stream(self.model_id, prompt, params))
        try:
            async for last in stream:  # noqa: B007 - the last event is the result
                pass
        finally:
            await stream.aclose()
        return last
