"""One error mapping for the whole HTTP API: TGI's `{"error", "error_type"}`, and OpenAI's
`{"error": {"message", "type", "param", "code"}}` (400 for an invalid request) on `/v1/*` (to every client but
huggingface_hub's, which reads TGI's shape everywhere)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from playground.errors import PlaygroundError
from playground.types.sizes import MAX_BODY_BYTES
from playground.wire.errors import error_field, validation_message

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


def tgi_error_type(status: int, error_type: str, *, started: bool = False) -> str:
    """The `error_type` TGI's clients read. TGI answers a request it refuses with 422 `validation`, and a stream
    that fails while generating with `generation`; huggingface_hub's InferenceClient raises its `ValidationError`
    and `GenerationError` by those words alone (any other is its `UnknownError`). Our finer kind (`constraint`,
    `processor`, `budget`, ...) stays in the message, in OpenAI's `code` and in `/metrics`."""
    if status != 422:
        return error_type
    return "generation" if started and error_type != "validation" else "validation"


_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",  # OpenAI's for a model that does not exist, as for any 400
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_route(path: str) -> bool:
    """OpenAI's routes answer errors in OpenAI's shape; every other route in TGI's."""
    return path.startswith("/v1/")


def hf_hub_client(headers: Mapping[str, str]) -> bool:
    """huggingface_hub's clients (their user agent names `hf_hub/`): they read an error as TGI writes it, `error` its
    message and `error_type` its exception, on every route (OpenAI's object came out as text in their exceptions,
    `{'message': ...}`); OpenAI's SDK reads `error.message` (a string there: "An error occurred during streaming")."""
    return "hf_hub/" in headers.get("user-agent", "")


def openai_shaped(path: str, headers: Mapping[str, str]) -> bool:
    """Whether an error goes out in OpenAI's shape: on OpenAI's routes, to every client but huggingface_hub's."""
    return openai_route(path) and not hf_hub_client(headers)


def openai_status(status: int) -> int:
    """OpenAI (and vLLM) answer an invalid request with 400 where TGI answers 422."""
    return 400 if status == 422 else status


def openai_error_body(
    status: int,
    message: str,
    error_type: str,
    param: str | None = None,
    code: str | None = None,
    kind: str | None = None,
) -> dict[str, Any]:
    """OpenAI's ErrorObject; `code` is OpenAI's own where it has one (model_not_found), else our error_type; `param`
    the field at fault when known; `kind` its `type` where the status alone does not say it."""
    kind = kind or _OPENAI_TYPES.get(status) or ("server_error" if status >= 500 else "invalid_request_error")
    body = {"message": shorten(message, MAX_ERROR_CHARS), "type": kind, "param": param, "code": code or error_type}
    return {"error": body}


def error_response(
    status: int,
    message: str,
    error_type: str,
    *,
    request: Request,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
    started: bool = False,
    code: str | None = None,
    kind: str | None = None,
) -> JSONResponse:
    """The error with the status the route's protocol uses, in the shape its client reads (openai_shaped; `started`:
    it came after tokens had been decoded; `code`, `kind`: OpenAI's own code and type for it)."""
    tgi_type = tgi_error_type(status, error_type, started=started)  # (by TGI's status, before OpenAI's)
    if openai_route(request.url.path):
        status = openai_status(status)
    elif tgi_type == "generation":
        status = 424  # TGI's Generation Error: the request was valid, its decoding failed
    if openai_shaped(request.url.path, request.headers):
        body = openai_error_body(status, message, error_type, param, code, kind)
        return JSONResponse(body, status_code=status, headers=headers)
    return JSONResponse(error_body(message, tgi_type), status_code=status, headers=headers)


async def _playground_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PlaygroundError)
    return error_response(
        exc.status,
        exc.message,
        exc.error_type,
        request=request,
        param=exc.field,
        started=exc.generating,
        code=exc.openai_code,
        kind=exc.openai_type,
    )


async def _request_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    sent = request.headers.get("content-type")
    media = (sent or "").partition(";")[0].strip().lower()
    body_sent = request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers
    at_body = any(tuple(e.get("loc", ())) == ("body",) for e in errors)
    if body_sent and at_body and media != "application/json" and not media.endswith("+json"):
        # FastAPI reads a body as JSON only under a JSON Content-Type (a browser's cross-site form or text/plain post
        # is never taken for one): say so, as TGI does with its 415, rather than that the body is no object
        got = f"got {shorten(sent, 100)!r}" if sent else "none was sent"
        message = f"the request body must be sent with `Content-Type: application/json` ({got})"
        return error_response(415, message, "unsupported_media_type", request=request)
    param = error_field(errors[0]) if errors else None
    return error_response(422, validation_message(errors), "validation", request=request, param=param or None)


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


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.detail == _BODY_PARSE_FAILED:
        encoding = request.headers.get("content-encoding", "").strip().lower() or "identity"
        if encoding != "identity":  # (a gzip body read as it came was "not valid UTF-8")
            message = f"Content-Encoding {shorten(encoding, 40)!r}: this server reads request bodies uncompressed"
            return error_response(415, message, "unsupported_media_type", request=request)
        return error_response(422, _parse_failure(exc.__cause__), "validation", request=request)
    error_type = _HTTP_ERROR_TYPES.get(exc.status_code, "http")
    detail = str(exc.detail)
    if exc.status_code == 413 and detail == "Content Too Large":  # a chunked body past the routes' max_body_size
        detail = f"request body is over {MAX_BODY_BYTES} bytes; this server takes at most {MAX_BODY_BYTES}"
    return error_response(exc.status_code, detail, error_type, request=request, headers=exc.headers)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    """A genuine server bug: log the traceback, answer without it."""
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    message = f"internal server error ({type(exc).__name__}); see the server log"
    return error_response(500, message, "internal", request=request)


def stream_failure(exc: BaseException) -> tuple[int, str, str, str | None]:
    """What a stream that failed after it started tells its client: status, message, error_type, param (a bug's
    traceback goes to the log, not to the client)."""
    if isinstance(exc, PlaygroundError):
        return exc.status, exc.message, exc.error_type, exc.field
    log.error("stream failed", exc_info=exc)
    return 500, f"internal server error ({type(exc).__name__}); see the server log", "internal", None


def exception_event(exc: BaseException, *, openai: bool = False) -> str:
    """The final SSE event of a stream that failed after it started (TGI's shape, or OpenAI's as vLLM sends it, with
    TGI's top-level `error_type` beside it, as a client that reads TGI's types may)."""
    status, message, error_type, param = stream_failure(exc)
    if openai:
        kind = exc.openai_type if isinstance(exc, PlaygroundError) else None
        body: dict[str, Any] = openai_error_body(openai_status(status), message, error_type, param, kind=kind)
        body["error_type"] = tgi_error_type(status, error_type, started=True)
    else:
        body = error_body(message, tgi_error_type(status, error_type, started=True))
    return f"data: {json.dumps(body)}\n\n"


def install_error_handlers(app: FastAPI) -> None:
    """Register the mapping once, at the edge."""
    app.add_exception_handler(PlaygroundError, _playground_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
