"""The one FastAPI app: TGI and OpenAI routes, one error mapping, optional API key, the Gradio UI at "/"."""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import RedirectResponse

from playground.providers.registry import Registry
from playground.server import openai, tgi
from playground.server.convert import VERSION
from playground.server.errors import install_error_handlers

DESCRIPTION = """Constrained decoding over TGI- and OpenAI-compatible routes.

Constraints: TGI `parameters.grammar` (`json`, `json_schema`, `regex`, plus `choice` and `grammar`),
OpenAI `response_format`, vLLM `structured_outputs` and `guided_*`. Every output carries a `validation`
verdict. Errors are `{"error", "error_type"}`."""


def api_key_guard(api_key: str | None):
    """A dependency that demands `Authorization: Bearer KEY` when the server has a key."""

    async def check(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), api_key.encode()):
            raise HTTPException(
                status_code=401,
                detail="missing or wrong API key: send the header `Authorization: Bearer <key>`",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return check


def create_app(
    registry: Registry,
    *,
    api_key: str | None = None,
    ui: bool = True,
    ui_options: dict[str, Any] | None = None,
) -> FastAPI:
    """The API on every route it names, and the UI (when asked) on everything else under "/"."""
    app = FastAPI(title="Structured Playground", version=VERSION, description=DESCRIPTION)
    app.state.registry = registry
    install_error_handlers(app)
    guard = [Depends(api_key_guard(api_key))]
    app.include_router(tgi.open_router)
    app.include_router(tgi.router, dependencies=guard)
    app.include_router(openai.router, dependencies=guard)
    if ui:
        return _mount_ui(app, registry, ui_options or {})

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/docs")

    return app


def _mount_ui(app: FastAPI, registry: Registry, options: dict[str, Any]) -> FastAPI:
    """Gradio's Blocks under "/"; the API routes were added first, so they win."""
    import gradio as gr

    from playground.ui import create_ui

    blocks = create_ui(registry, **options)
    return gr.mount_gradio_app(app, blocks, path="/")
