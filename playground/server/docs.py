"""The published API description: our error answers in our shape, and the docs behind the key like the API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel


class ErrorResponse(BaseModel):
    """Every error the API answers (TGI's ErrorResponse): what went wrong, and its kind."""

    error: str
    error_type: str


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


API_ERRORS: dict[int | str, dict[str, Any]] = {
    401: _error("Missing or wrong API key (`Authorization: Bearer KEY`)."),
    403: _error("Not allowed on this server: loading models, an adapter the operator did not list."),
    404: _error("No provider serves the model, or no such provider."),
    413: _error("The request body is larger than the server takes."),
    415: _error("The request body was not sent as JSON (`Content-Type: application/json`)."),
    422: _error("Invalid request: the message names the field or the problem (a bad constraint, a limit)."),
    424: _error(
        "Decoding failed after it began (TGI's Generation Error), or a remote provider answered with an error."
    ),
    429: _error("Too many requests waiting (max_queue), or too many wrong API keys; see Retry-After."),
    502: _error("A remote provider could not be reached, or answered something that is not its protocol."),
}


class OpenAIError(BaseModel):
    """OpenAI's ErrorObject: `code` is our error kind, `param` the field at fault when there is one."""

    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorResponse(BaseModel):
    """Every error on /v1/* (OpenAI's shape, so OpenAI-based clients show the message)."""

    error: OpenAIError


def _openai_error(description: str) -> dict[str, Any]:
    return {"model": OpenAIErrorResponse, "description": description}


OPENAI_ERRORS: dict[int | str, dict[str, Any]] = {
    400: _openai_error("Invalid request: the message names the field or the problem (OpenAI's and vLLM's 400)."),
    # 422 is listed only so FastAPI does not add its own; the published description leaves it out.
    **{status: _openai_error(entry["description"]) for status, entry in API_ERRORS.items()},
}
HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {503: _error("An engine has made no progress for --stall-timeout.")}
SSE = {"text/event-stream": {"schema": {"description": "`data: {...}` events, one JSON object each"}}}
STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"description": "Server-sent events.", "content": SSE}}
JSON_OR_STREAM: dict[int | str, dict[str, Any]] = {
    200: {"description": "JSON, or server-sent events when `stream` is true.", "content": SSE}
}


def add_docs(app: FastAPI, guard: Callable[..., Any]) -> None:
    """/openapi.json, /docs and /redoc, each behind the same API key as the routes they describe."""
    checks = [Depends(guard)]

    @app.get("/openapi.json", include_in_schema=False, dependencies=checks)
    async def openapi() -> JSONResponse:
        return JSONResponse(_without_422_on_v1(app.openapi()))

    @app.get("/docs", include_in_schema=False, dependencies=checks)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - API docs")

    @app.get("/redoc", include_in_schema=False, dependencies=checks)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc")


def _without_422_on_v1(spec: dict[str, Any]) -> dict[str, Any]:
    """FastAPI documents a 422 for every body; OpenAI's routes answer an invalid request with 400 instead."""
    for path, operations in spec.get("paths", {}).items():
        if path.startswith("/v1/"):
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
    return spec
