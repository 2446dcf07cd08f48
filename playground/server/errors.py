"""One error mapping for the whole HTTP API: every failure becomes `{"error", "error_type"}`."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from playground.errors import PlaygroundError
from playground.wire.errors import validation_message

log = logging.getLogger("playground.server")

_HTTP_ERROR_TYPES = {
    401: "authentication",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    429: "too_many_attempts",
}
# FastAPI's answer when json.loads itself fails (not UTF-8, nested too deep, a huge integer literal).
_BODY_PARSE_FAILED = "There was an error parsing the body"
# An error names what was wrong; it never echoes a huge value (a field name, a schema, a string) back.
MAX_ERROR_CHARS = 2000


def shorten(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def error_body(message: str, error_type: str) -> dict[str, str]:
    """The one error shape, TGI's ErrorResponse."""
    return {"error": shorten(message, MAX_ERROR_CHARS), "error_type": error_type}


def error_response(status: int, message: str, error_type: str) -> JSONResponse:
    return JSONResponse(error_body(message, error_type), status_code=status)


async def _playground_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PlaygroundError)
    return error_response(exc.status, exc.message, exc.error_type)


async def _request_validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(422, validation_message(exc.errors()), "validation")


def _parse_failure(cause: BaseException | None) -> str:
    """Why the body could not be read, in words a client can act on."""
    if isinstance(cause, UnicodeDecodeError):
        reason = "it is not valid UTF-8"
    elif isinstance(cause, RecursionError):
        reason = "it is nested too deeply"
    elif isinstance(cause, ValueError):
        reason = str(cause).split(";")[0]
    else:
        reason = "it is not valid JSON"
    return f"request body could not be parsed: {reason}"


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.detail == _BODY_PARSE_FAILED:
        return error_response(422, _parse_failure(exc.__cause__), "validation")
    error_type = _HTTP_ERROR_TYPES.get(exc.status_code, "http")
    return JSONResponse(error_body(str(exc.detail), error_type), status_code=exc.status_code, headers=exc.headers)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    """A genuine server bug: log the traceback, answer without it."""
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, f"internal server error ({type(exc).__name__}); see the server log", "internal")


def exception_event(exc: BaseException) -> str:
    """The final SSE event of a stream that failed after it started (TGI sends the same shape)."""
    if isinstance(exc, PlaygroundError):
        body = error_body(exc.message, exc.error_type)
    else:
        log.error("stream failed", exc_info=exc)
        body = error_body(f"internal server error ({type(exc).__name__}); see the server log", "internal")
    return f"data: {json.dumps(body)}\n\n"


def install_error_handlers(app: FastAPI) -> None:
    """Register the mapping once, at the edge."""
    app.add_exception_handler(PlaygroundError, _playground_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
