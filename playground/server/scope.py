"""Each HTTP request runs as its client (playground.client_scope): its address as the server sees it.

The prefix cache keeps each client's sequences apart, so what one client sent never makes another's
request faster or shows in a figure; fair queues, sandbox strikes and remembered compile failures count
per client. Clients are told apart as the key-guess limiter tells them apart (the address, or what
--forwarded-allow-ips proxies say it is), never by a header a client chooses: a made-up Authorization
header would otherwise be a new client on every request, first in every queue.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from playground import client_scope
from playground.server.guesses import client_of


class ClientScope:
    """ASGI middleware: the request's tasks and threads see its client scope."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            with client_scope.scoped(client_scope.of_client(client_of(scope))):
                await self.app(scope, receive, send)
            return
        await self.app(scope, receive, send)
