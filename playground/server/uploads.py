"""Gradio's upload route, bounded: the UI's only upload is a session file, so uploads are small and few.

Without a key anyone may upload, and Gradio keeps each file in its cache and serves it back at its URL;
unbounded, one client filled the disk at 250 MB/s. Here each upload is at most MAX_UPLOAD_BYTES (Gradio's
own check, by the file), each client may upload UPLOADS_PER_MINUTE files a minute and all clients together
ALL_UPLOADS_PER_MINUTE (429 past that), and Gradio deletes uploads after 10 minutes (create_ui).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from playground.server.errors import error_body
from playground.server.guesses import client_of

GRADIO_API = "/gradio_api/"
UPLOAD_PATH = "/gradio_api/upload"
MAX_UPLOAD_BYTES = 4 << 20  # a session file of a long conversation with every token's details
UPLOADS_PER_MINUTE = 20
ALL_UPLOADS_PER_MINUTE = 60  # all clients together: with Gradio deleting uploads after 10 min, the disk
# holds at most ~60 x 15 x 4 MiB of them
MAX_CLIENTS = 10_000
ALL = "\0all"


class UploadLimit:
    """ASGI middleware: at most UPLOADS_PER_MINUTE uploads per client, and no body over the size bound."""

    def __init__(
        self, app: ASGIApp, *, per_minute: int = UPLOADS_PER_MINUTE, all_per_minute: int = ALL_UPLOADS_PER_MINUTE
    ) -> None:
        self.app = app
        self.per_minute = per_minute
        self.all_per_minute = all_per_minute
        self._recent: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _allowed(self, client: str) -> bool:
        now = time.monotonic()
        with self._lock:
            mine = [t for t in self._recent.pop(client, []) if now - t < 60.0]
            everyone = [t for t in self._recent.pop(ALL, []) if now - t < 60.0]
            allowed = len(mine) < self.per_minute and len(everyone) < self.all_per_minute
            self._recent[client] = mine + [now] if allowed else mine
            self._recent[ALL] = everyone + [now] if allowed else everyone
            while len(self._recent) > MAX_CLIENTS:
                self._recent.popitem(last=False)
        return allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != UPLOAD_PATH:
            await self.app(scope, receive, send)
            return
        if not self._allowed(client_of(scope)):
            body = error_body(f"at most {self.per_minute} uploads a minute", "too_many_attempts")
            await JSONResponse(body, status_code=429, headers={"Retry-After": "60"})(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES + 64 * 1024:  # the file plus its form fields
            body = error_body(f"an upload may be at most {MAX_UPLOAD_BYTES} bytes", "payload_too_large")
            await JSONResponse(body, status_code=413)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class FileInputGuard:
    """ASGI middleware: a UI call's input file is one uploaded here, never a URL. Gradio downloads an input file
    whose `path` is an http(s) URL into its cache (public addresses only) before any handler runs, so a call naming
    one made this server fetch it; such a call is refused (400) before Gradio reads it, and a call's body past
    MAX_UPLOAD_BYTES (none of the UI's comes near) with 413, unread."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        gradio_call = path.startswith(GRADIO_API) and path != UPLOAD_PATH
        if scope["type"] != "http" or scope["method"] != "POST" or not gradio_call:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        body = b""
        while True:
            message = await receive()
            messages.append(message)
            body += message.get("body", b"")
            if len(body) > MAX_UPLOAD_BYTES:
                answer = error_body(f"a UI call's body may be at most {MAX_UPLOAD_BYTES} bytes", "payload_too_large")
                await JSONResponse(answer, status_code=413)(scope, receive, send)
                return
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        fetched = _url_input(body)
        if fetched is not None:
            answer = error_body(f"an input file must be uploaded here, not fetched: {fetched[:200]}", "validation")
            await JSONResponse(answer, status_code=400)(scope, receive, send)
            return

        async def replayed() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replayed, send)


def _url_input(body: bytes) -> str | None:
    """The first input file of a call's JSON body whose path is a URL; None when there is none (or no JSON)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    stack: list[Any] = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            meta, found = item.get("meta"), item.get("path")
            if isinstance(meta, dict) and meta.get("_type") == "gradio.FileData" and isinstance(found, str):
                if found.strip().lower().startswith(("http://", "https://")):
                    return found
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None
