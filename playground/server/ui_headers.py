"""Headers on the UI's answers (everything the mounted Gradio app serves; the API's routes are untouched)."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
