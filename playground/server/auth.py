"""The API key, on the whole server: a Bearer header on API routes, a login (the key as password) on the UI."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from fastapi import FastAPI, HTTPException, Request
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.routing import Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from playground.server.bodies import rewriting
from playground.server.errors import error_body
from playground.server.guesses import KeyGuesses, client_of

LOGIN_MESSAGE = "This server needs its API key: log in with any user name and the API key as the password."
# Gradio's routes that run handlers, upload, stream or cancel all live under this prefix.
GRADIO_API_PREFIX = "/gradio_api/"
LOGIN_PATH = "/login"
# Gradio's page carries the UI's whole API description (every endpoint, its parameters and choices: the served
# models, the processors, the default prompt), login or not
API_INFO = b"window.gradio_api_info = "
EMPTY_API_INFO = (
    b'{"named_endpoints": {}, "unnamed_endpoints": {}};'  # (`{}` alone: the page read `.named_endpoints[...]`)
)


def key_matches(given: str, api_key: str) -> bool:
    """Constant-time comparison that also accepts non-ASCII keys (compare_digest refuses non-ASCII str)."""
    return secrets.compare_digest(given.encode(), api_key.encode())


def has_api_key(scope: Scope, api_key: str | None) -> bool:
    """Whether a request carries `Authorization: Bearer KEY` (always true on a server without a key)."""
    if api_key is None:
        return True
    scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and key_matches(token.strip(), api_key)


def api_key_guard(api_key: str | None, guesses: KeyGuesses | None = None):
    """A dependency that demands `Authorization: Bearer KEY` when the server has a key; guessing gets 429."""
    guesses = guesses or KeyGuesses()

    async def check(request: Request) -> None:
        if api_key is None:
            return
        client = client_of(request.scope)
        wait = guesses.retry_after_s(client)
        if wait:
            raise HTTPException(status_code=429, detail=guesses.message(wait), headers={"Retry-After": str(wait)})
        if not has_api_key(request.scope, api_key):
            if "authorization" in request.headers:  # a wrong key is a guess; no key at all guesses nothing
                guesses.failed(client)
            raise HTTPException(
                status_code=401,
                detail="missing or wrong API key: send the header `Authorization: Bearer <key>`",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return check


def ui_login(api_key: str) -> Callable[[str, str], bool]:
    """Gradio's `auth` callable: any user name, the API key as the password."""

    def check(username: str, password: str) -> bool:
        return key_matches(password or "", api_key)

    return check


def mounted_gradio(app: FastAPI) -> ASGIApp:
    """The Gradio app that mount_gradio_app put under "/" (it holds the login tokens)."""
    for route in app.routes:
        if isinstance(route, Mount) and hasattr(route.app, "tokens") and hasattr(route.app, "cookie_id"):
            return route.app
    raise RuntimeError("no Gradio app is mounted on this FastAPI app")


class GradioLoginGate:
    """Refuse every /gradio_api/* request without Gradio's login cookie, and serve the login page without the UI's
    API description.

    Gradio guards its handler routes itself, but not all of them (cancel, heartbeat, stream, reset);
    this closes the rest, so nothing of the UI's backend answers before a login. Its page embeds the API
    description (the served models, processors and defaults among the endpoints' choices) login or not.
    """

    def __init__(self, app: ASGIApp, *, gradio_app: ASGIApp, guesses: KeyGuesses | None = None) -> None:
        self.app = app
        self.gradio_app = gradio_app
        self.guesses = guesses or KeyGuesses()

    def logged_in(self, scope: Scope) -> bool:
        """Whether the request carries a token Gradio issued at /login."""
        cookies = HTTPConnection(scope).cookies
        cookie_id = self.gradio_app.cookie_id  # type: ignore[attr-defined]
        token = cookies.get(f"access-token-{cookie_id}") or cookies.get(f"access-token-unsecure-{cookie_id}")
        return token is not None and token in self.gradio_app.tokens  # type: ignore[attr-defined]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Gradio answers its login at /login and /login/: both count guesses
        login = scope["type"] == "http" and scope["path"].rstrip("/") == LOGIN_PATH and scope["method"] == "POST"
        if login:
            await self._login(scope, receive, send)
            return
        if scope["type"] not in ("http", "websocket") or self.logged_in(scope):  # (lifespan has no cookies)
            await self.app(scope, receive, send)
            return
        if not scope["path"].startswith(GRADIO_API_PREFIX):
            await self.app(scope, receive, _without_api_info(send) if scope["type"] == "http" else send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = error_body(
            "not logged in: log in to the UI at / (any user name, the API key as password)", "authentication"
        )
        await JSONResponse(body, status_code=401)(scope, receive, send)

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Gradio's login, with the same limit on guessing as the API key."""
        client = client_of(scope)
        wait = self.guesses.retry_after_s(client)
        if wait:
            body = error_body(self.guesses.message(wait), "too_many_attempts")
            await JSONResponse(body, status_code=429, headers={"Retry-After": str(wait)})(scope, receive, send)
            return

        async def counted(message: Message) -> None:  # (422: no username and password form to guess with)
            if message["type"] == "http.response.start" and message["status"] not in (200, 422):
                self.guesses.failed(client)
            await send(message)

        await self.app(scope, receive, counted)


def _without_api_info(send: Send) -> Send:
    """`send` for a page served before a login: an HTML page goes out with an empty API description (the login
    form needs none); every other answer as it is."""

    def html(start: Message) -> bool:
        return Headers(raw=start["headers"]).get("content-type", "").startswith("text/html")

    return rewriting(send, html, lambda start, page: (start, blank_api_info(page)))


def blank_api_info(page: bytes) -> bytes:
    """`page` with its `window.gradio_api_info` object replaced by an empty one: the object runs to the end of its script
    (Gradio writes it as JSON with `<` escaped, so no `</script>` inside)."""
    at = page.find(API_INFO)
    end = page.find(b"</script>", at)
    if at < 0 or end < 0:
        return page
    return page[: at + len(API_INFO)] + EMPTY_API_INFO + page[end:]
