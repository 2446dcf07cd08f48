"""Checks at the HTTP edge for every API route: body size, valid Unicode, and the methods each path takes."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from playground.errors import ParameterError
from playground.server.bodies import rewriting
from playground.server.errors import error_body, openai_error_body, openai_shaped, openai_status, shorten
from playground.wire.errors import field_name

# Only a JSON escape can put a lone UTF-16 surrogate into a string (raw surrogate bytes are not UTF-8).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
_SHAPED = {404: "not_found", 405: "method_not_allowed"}


def _is_invalid(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def invalid_unicode_field(data: Any) -> str | None:
    """The first field (as `a.b[0]`) holding a string no UTF-8 codec, tokenizer or grammar compiler takes."""
    stack: list[tuple[tuple[Any, ...], Any]] = [((), data)]
    while stack:  # iterative: bodies may nest as deep as the JSON parser allows
        path, value = stack.pop()
        if isinstance(value, str) and _is_invalid(value):
            return field_name(path) or "request body"
        if isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if _is_invalid(key):
                    return field_name((*path, key.encode("utf-8", "backslashreplace").decode()))
                stack.append(((*path, key), item))
        elif isinstance(value, list):
            stack.extend(((*path, index), item) for index, item in reversed(list(enumerate(value))))
    return None


async def valid_unicode(request: Request) -> None:
    """Refuse strings with lone surrogates (`"\\ud800"`), naming the field, before any provider sees them."""
    body = await request.body()
    if not _SURROGATE_ESCAPE.search(body):
        return
    try:
        data = json.loads(body)
    except ValueError:  # FastAPI has already answered a body that is not JSON
        return
    field = invalid_unicode_field(data)
    if field is not None:
        raise ParameterError(
            f"{field}: contains invalid Unicode (a lone surrogate escape such as \\ud800); send valid UTF-8 text",
            field=field,
        )


def api_methods(routers: Iterable[APIRouter]) -> dict[str, set[str]]:
    """Every API path with the methods it takes."""
    methods: dict[str, set[str]] = defaultdict(set)
    for router in routers:
        for route in router.routes:
            if isinstance(route, APIRoute):
                methods[route.path] |= route.methods
    return methods


def add_method_not_allowed(app: FastAPI, methods: dict[str, set[str]]) -> None:
    """A wrong method on an API path answers 405 in our error shape (with the UI at "/" it fell through to 404).

    "/" itself is left alone: the UI serves GET / there.
    """
    for path, allowed in methods.items():
        others = _METHODS - allowed
        if path != "/" and others:
            app.add_api_route(path, _refuse(path, allowed), methods=sorted(others), include_in_schema=False)


def _refuse(path: str, methods: set[str]):
    allow = ", ".join(sorted(methods))

    async def refuse(request: Request) -> None:
        where = shorten(request.url.path, 200)  # the path as sent (`path` is the route's template, {model:path})
        raise HTTPException(
            status_code=405, detail=f"{request.method} is not allowed on {where}; use {allow}", headers={"Allow": allow}
        )

    return refuse


class DeclaredBodyLimit:
    """413 in our error shape for an API request whose Content-Length is over the limit, before it is read.

    The routers' own max_body_size still stops chunked bodies as they arrive; with a declared length,
    Starlette would replace our JSON answer with a plain-text one.
    """

    def __init__(self, app: ASGIApp, *, paths: set[str], max_bytes: int) -> None:
        self.app = app
        self.paths = paths
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in self.paths:
            declared = Headers(scope=scope).get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                message = f"request body is {int(declared)} bytes; this server takes at most {self.max_bytes}"
                await JSONResponse(error_body(message, "request_too_large"), status_code=413)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def host_name(host: str) -> str:
    """A Host header's name: without its port, IPv6 brackets off, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host[1:]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class HostCheck:
    """400 for a request whose Host header names none of `names`: a server on 127.0.0.1 answers only to its
    loopback names, so a web page whose domain an attacker rebinds to 127.0.0.1 (DNS rebinding) cannot call it
    with the visitor's browser, nor read what it answers."""

    def __init__(self, app: ASGIApp, *, names: Iterable[str]) -> None:
        self.app = app
        self.names = {host_name(n) for n in names}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            sent = Headers(scope=scope)
            host = host_name(sent.get("host", ""))
            if host not in self.names:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                message = (
                    f"Host {host!r} is not a name of this server ({', '.join(sorted(self.names))}); "
                    "its operator can add names with --allowed-hosts"
                )
                shaped = (  # (this layer sits outside ErrorShape: it shapes its own answer as the route's)
                    openai_error_body(400, message, "forbidden_host")
                    if openai_shaped(scope["path"], sent)
                    else error_body(message, "forbidden_host")
                )
                await JSONResponse(shaped, status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class ApiCors:
    """CORS on the API's routes for the origins the operator named (`--cors-allow-origin`): a web page there may call
    the API from its visitor's browser, preflight included. The key travels in a header, never a cookie, so no
    credentials are allowed; the UI's routes keep Gradio's own rules, and "/" (the UI's page) is left out."""

    def __init__(self, app: ASGIApp, *, origins: list[str], paths: Iterable[str]) -> None:
        self.app = app
        self.exact = {p for p in paths if "{" not in p and p != "/"}
        self.prefixes = tuple(p.split("{", 1)[0] for p in paths if "{" in p)
        self.cors = CORSMiddleware(
            app,
            allow_origins=origins,
            allow_methods=["GET", "POST"],
            allow_headers=["*"],
            expose_headers=["Retry-After"],
            max_age=600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path in self.exact or path.startswith(self.prefixes)):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)


class ErrorShape:
    """Error answers in our shapes: FastAPI's `{"detail": ...}` 404 and 405 (the mounted UI's) in TGI's, and on
    `/v1/*` every error from the layers around the routes (401, 413, 429) in OpenAI's (errors.openai_shaped: not to
    huggingface_hub's clients)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        openai = openai_shaped(scope["path"], Headers(scope=scope))

        def reshape(start: Message, body: bytes) -> tuple[Message, bytes]:
            status, body = _reshaped(body, start["status"], openai)
            return {**start, "status": status}, body

        await self.app(scope, receive, rewriting(send, lambda start: _detail_error(start, openai), reshape))


def _detail_error(start: Message, openai: bool) -> bool:
    content_type = dict(start.get("headers", [])).get(b"content-type", b"")
    shaped = start["status"] >= 400 if openai else start["status"] in _SHAPED
    return shaped and content_type.startswith(b"application/json")


def _reshaped(body: bytes, status: int, openai: bool) -> tuple[int, bytes]:
    """The status and body to send: unchanged unless the body is FastAPI's or, on /v1/*, TGI's error shape."""
    try:
        data = json.loads(body)
    except ValueError:
        return status, body
    if not isinstance(data, dict):
        return status, body
    if "detail" in data and "error" not in data:
        message, error_type = str(data["detail"]), _SHAPED.get(status, "http")
    elif openai and isinstance(data.get("error"), str):
        message, error_type = data["error"], str(data.get("error_type", "http"))
    else:
        return status, body
    if not openai:
        return status, json.dumps(error_body(message, error_type)).encode()
    status = openai_status(status)
    return status, json.dumps(openai_error_body(status, message, error_type)).encode()
