"""Headers on the UI's answers (everything the mounted Gradio app serves; the API's routes are untouched): who may
frame the page, and which web origins may read it; and Gradio's refusals inside its own streams, kept out of the
log's tracebacks."""

from __future__ import annotations

import logging

from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from playground.server.errors import error_body

log = logging.getLogger(__name__)

# A Space shows the app inside an iframe on its huggingface.co page (the app itself is served from *.hf.space).
SPACE_FRAME_ANCESTORS = ("'self'", "https://huggingface.co", "https://*.hf.space")


def frame_ancestors(space: bool) -> str:
    """Who may show the UI in a frame: this server's own pages, and on a Space the hub's page around it."""
    return " ".join(SPACE_FRAME_ANCESTORS if space else ("'self'",))


class FrameAncestors:
    """`Content-Security-Policy: frame-ancestors ...` on every answer: without it any site could frame the UI under
    its own page and lure its visitors into clicks on it (clickjacking)."""

    def __init__(self, app: ASGIApp, *, sources: str) -> None:
        self.app = app
        self.policy = f"frame-ancestors {sources}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["Content-Security-Policy"] = self.policy
            await send(message)

        await self.app(scope, receive, framed)


class OwnOriginOnly:
    """No CORS grant for another origin: Gradio answers a request from any localhost origin (when the Host is
    loopback) or from any origin at all (otherwise) with that origin and `Allow-Credentials: true`, so another web
    app could read /gradio_api/* with the visitor's login cookie. The UI's page calls only its own origin, and a
    request whose Origin is this server's (the Host it was sent to) keeps Gradio's answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if scope["type"] != "http" or origin is None or _netloc(origin) == headers.get("host", "").lower():
            await self.app(scope, receive, send)
            return

        async def ungranted(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer = MutableHeaders(scope=message)
                for name in ("access-control-allow-origin", "access-control-allow-credentials"):
                    del answer[name]
            await send(message)

        await self.app(scope, receive, ungranted)


# The longest address the UI answers: Gradio reads the page's whole URL into httpx, which refuses one past 65,536
# characters with an exception (a 500 and two tracebacks per request; in an event, a page left waiting for ever).
# A share link is at most 60,000 (ui/sharing.py).
MAX_ADDRESS_CHARS = 64_000


class AddressLimit:
    """A 414 naming the limit for an address Gradio cannot read (a share link pasted twice, an edited one)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            length = len(scope.get("raw_path") or scope["path"]) + len(scope.get("query_string", b""))
            if length > MAX_ADDRESS_CHARS:
                message = (
                    f"the address has {length} characters, at most {MAX_ADDRESS_CHARS} here (a share link holds at "
                    "most 60000: a longer session goes as a file)"
                )
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1009})
                    return
                await JSONResponse(error_body(message, "uri_too_long"), status_code=414)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class LateRefusals:
    """Gradio refuses some stream requests after it has started answering them (`/gradio_api/queue/data` for an
    unknown session: its `session_not_found` event, then an HTTPException). Starlette can no longer send that
    refusal, so it raised a RuntimeError, and each such request wrote ~110 lines of traceback to the log: anyone
    could fill it. The client has had its answer: its stream is ended, and the log gets one line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = ended = False

        async def watched(message: Message) -> None:
            nonlocal started, ended
            started = started or message["type"] == "http.response.start"
            ended = ended or (message["type"] == "http.response.body" and not message.get("more_body", False))
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except RuntimeError as exc:
            refusal = exc.__cause__
            if not (started and isinstance(refusal, HTTPException)):
                raise
            log.info(
                "%s %s: %d %s after the answer started",
                scope.get("method"),
                scope["path"],
                refusal.status_code,
                refusal.detail,
            )
            if not ended:  # (else uvicorn logs that the app "returned without completing response")
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def _netloc(origin: str) -> str:
    """An Origin's host and port, as a Host header names them (`http://127.0.0.1:7860` -> `127.0.0.1:7860`)."""
    return origin.partition("://")[2].lower()
