"""The one FastAPI app: TGI and OpenAI routes, one error mapping, optional API key, the Gradio UI at "/"."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import RedirectResponse

from playground.options import SERVER
from playground.providers.registry import Registry
from playground.server import (
    completions,
    debug,
    evaluate,
    inspect,
    invocations,
    metrics,
    openai,
    responses,
    score,
    tgi,
)
from playground.server.admission import Admission, AdmissionGate, AdmissionLimits
from playground.server.auth import (
    LOGIN_MESSAGE,
    GradioLoginGate,
    api_key_guard,
    has_api_key,
    mounted_gradio,
    ui_login,
)
from playground.server.convert import VERSION
from playground.server.docs import API_ERRORS, OPENAI_ERRORS, add_docs
from playground.server.errors import install_error_handlers
from playground.server.guards import (
    ApiCors,
    DeclaredBodyLimit,
    ErrorShape,
    HostCheck,
    add_method_not_allowed,
    api_methods,
    valid_unicode,
)
from playground.server.guesses import KeyGuesses, client_of
from playground.server.scope import ClientScope
from playground.server.ui_headers import AddressLimit, FrameAncestors, LateRefusals, OwnOriginOnly, frame_ancestors
from playground.server.uploads import MAX_UPLOAD_BYTES, FileInputGuard, UploadLimit
from playground.space import on_space
from playground.types.sizes import MAX_BODY_BYTES

DESCRIPTION = """Constrained decoding over TGI- and OpenAI-compatible routes.

Constraints: TGI `parameters.grammar` (`json`, `json_schema`, `regex`, plus `choice` and `grammar`),
OpenAI `response_format`, vLLM `structured_outputs` and `guided_*`. Every output carries a `validation`
verdict. Errors are `{"error", "error_type"}`."""


def create_app(
    registry: Registry,
    *,
    api_key: str | None = None,
    ui: bool = True,
    ui_options: dict[str, Any] | None = None,
    admission: AdmissionLimits | None = None,
    stall_timeout_s: float = SERVER.stall_timeout,
    allowed_hosts: list[str] | None = None,
    cors_origins: list[str] | None = None,
) -> FastAPI:
    """The API on every route it names, and the UI (when asked) on everything else under "/"; `allowed_hosts`: the
    Host header names it answers to (None: any); `cors_origins`: the web origins whose pages may call the API."""
    app = FastAPI(
        title="Structured Playground",
        version=VERSION,
        description=DESCRIPTION,
        openapi_url=None,  # served by add_docs, behind the key like the routes it describes
        docs_url=None,
        redoc_url=None,
    )
    app.state.registry = registry
    app.state.admission = Admission(admission or AdmissionLimits())
    app.state.stall_timeout_s = stall_timeout_s
    install_error_handlers(app)
    guesses = KeyGuesses()
    guard = api_key_guard(api_key, guesses)
    checks = [Depends(guard), Depends(valid_unicode)]
    app.include_router(tgi.open_router)
    guarded = (
        tgi.router,
        openai.router,
        completions.router,
        responses.router,
        invocations.router,
        debug.router,
        inspect.router,
        score.router,
        evaluate.router,
        metrics.router,
    )
    for router in guarded:
        errors = OPENAI_ERRORS if router.prefix == "/v1" else API_ERRORS
        app.include_router(router, dependencies=checks, max_body_size=MAX_BODY_BYTES, responses=errors)
    add_docs(app, guard)
    methods = api_methods([tgi.open_router, *guarded])
    add_method_not_allowed(app, methods)
    work = {path for path, allowed in methods.items() if "POST" in allowed}
    app.add_middleware(
        AdmissionGate,
        admission=app.state.admission,
        paths=work,
        max_body_bytes=MAX_BODY_BYTES,
        # no key, or a client waiting out its guesses: the guard answers from the headers, the body unread
        refused_anyway=lambda scope: not has_api_key(scope, api_key) or bool(guesses.retry_after_s(client_of(scope))),
    )
    app.add_middleware(DeclaredBodyLimit, paths=set(methods), max_bytes=MAX_BODY_BYTES)
    app.add_middleware(ErrorShape)
    app.add_middleware(ClientScope)
    if ui:
        _mount_ui(app, registry, ui_options or {}, api_key, guesses)
    else:

        @app.get("/", include_in_schema=False)
        async def root() -> RedirectResponse:
            return RedirectResponse("/docs")

    if cors_origins:  # a preflight is answered before the key is asked for (it carries none)
        app.add_middleware(ApiCors, origins=cors_origins, paths=methods)
    if allowed_hosts is not None:  # outermost: before the login, the UI and every route
        app.add_middleware(HostCheck, names=allowed_hosts)
    return app


def _mount_ui(
    app: FastAPI, registry: Registry, options: dict[str, Any], api_key: str | None, guesses: KeyGuesses
) -> FastAPI:
    """Gradio's Blocks under "/"; the API routes were added first, so they win. A key puts the UI behind a login."""
    import gradio as gr

    from playground.ui import UISettings, create_ui, page_assets

    if api_key is not None:  # the Code tab's snippets send the key (from the environment) the API will want
        options = {**options, "settings": dataclasses.replace(options.get("settings") or UISettings(), keyed=True)}
    blocks = create_ui(registry, **options)
    # The UI's own queue is bounded like the API's, and as many chats run at once as API requests: a local
    # model decodes them in one batch, so a Space's users do not wait for each other's answers.
    limits = app.state.admission.limits
    blocks.queue(max_size=limits.max_in_flight, default_concurrency_limit=limits.max_running)
    bounded = {"max_file_size": MAX_UPLOAD_BYTES, **page_assets()}
    app.add_middleware(UploadLimit)
    app.add_middleware(FileInputGuard)
    if api_key is None:
        gr.mount_gradio_app(app, blocks, path="/", **bounded)
    else:
        gr.mount_gradio_app(app, blocks, path="/", auth=ui_login(api_key), auth_message=LOGIN_MESSAGE, **bounded)
        app.add_middleware(GradioLoginGate, gradio_app=mounted_gradio(app), guesses=guesses)
    mounted_gradio(app).add_middleware(FrameAncestors, sources=frame_ancestors(on_space()))
    mounted_gradio(app).add_middleware(OwnOriginOnly)
    mounted_gradio(app).add_middleware(LateRefusals)
    mounted_gradio(app).add_middleware(AddressLimit)
    # Gradio checks a file input's path (only its upload folder) only once `launch()` has run, which a mounted app
    # never calls: without this, a call naming `/etc/...` or `/dev/zero` as an input file was read (and froze the
    # event loop hashing /dev/zero).
    blocks.has_launched = True
    return app
