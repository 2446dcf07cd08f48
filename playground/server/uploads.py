"""Gradio's upload route, bounded: the UI's only upload is a session file, so uploads are small and few.

Without a key anyone may upload, and Gradio keeps each file in its cache and serves it back at its URL;
unbounded, one client filled the disk at 250 MB/s. Here each upload is at most MAX_UPLOAD_BYTES (Gradio's
own check, by the file), each client may upload UPLOADS_PER_MINUTE files a minute and all clients together
ALL_UPLOADS_PER_MINUTE (429 past that), and Gradio deletes uploads after 10 minutes (create_ui).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from playground.server.errors import error_body
from playground.server.guesses import client_of

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
