"""TGI's SageMaker route, /invocations: one body, answered by the route its fields name, in TGI's order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Body, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from playground.errors import ParameterError
from playground.server import completions, openai, tgi
from playground.server.docs import JSON_OR_STREAM
from playground.types import GenerateRequest
from playground.wire.completions import CompletionRequest
from playground.wire.inbound import ChatRequest

router = APIRouter(tags=["TGI-compatible"])

Route = Callable[[Request, Any, "str | None"], Awaitable[Any]]
# TGI tries the three request shapes in this order: the first whose required field is there answers. A chat or
# completion body names its own model; `?model=` picks one for TGI's shape, as on TGI's other routes.
SHAPES: tuple[tuple[str, type[BaseModel], Route], ...] = (
    ("inputs", GenerateRequest, tgi.generate_or_stream),
    ("messages", ChatRequest, lambda request, body, _: openai.chat_completions(request, body)),
    ("prompt", CompletionRequest, lambda request, body, _: completions.create_completion(request, body)),
)
_SCHEMA = {"oneOf": [{"$ref": f"#/components/schemas/{shape.__name__}"} for _, shape, _ in SHAPES]}


@router.post(
    "/invocations",
    summary="Generate, chat or complete, by the body's fields (TGI's SageMaker route)",
    responses=JSON_OR_STREAM,
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": _SCHEMA}}}},
)
async def invocations(request: Request, body: dict[str, Any] = Body(...), model: str | None = tgi.ModelQuery) -> Any:
    """`inputs`: TGI's generate (`stream` streams it); `messages`: a chat completion; `prompt`: a completion.
    Each answers as its own route does, errors in TGI's shape."""
    for field, shape, route in SHAPES:
        if field in body:
            try:
                parsed = shape.model_validate(body)
            except ValidationError as exc:
                raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None
            return await route(request, parsed, model)
    raise ParameterError(
        "an /invocations body needs `inputs` (TGI's generate), `messages` (a chat completion) or `prompt` "
        "(a completion)",
        field="inputs",
    )
