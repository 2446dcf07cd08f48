"""The constraint debugger's routes: POST /check (test an instance) and POST /reason (why a token is refused)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from playground.debug.check import CheckRequest, CheckResult, check_text
from playground.debug.why import ReasonRequest, ReasonResult, reasons_at
from playground.providers import base
from playground.server.tgi import ModelQuery, resolve

if TYPE_CHECKING:
    from playground.decoding.engine import Engine

router = APIRouter(tags=["Constraint debugger"])


def local_engine(request: Request, model: str | None, what: str) -> Engine:
    """The local engine serving `model` (TGI clients' 'tgi' and 'dummy' mean the default one)."""
    provider, model_id = resolve(request, model)
    return base.local_engine(provider, model_id, what)


@router.post("/check", summary="Test an instance: walk a text through the constraint's masks and EOS gate")
async def check(request: Request, body: CheckRequest, model: str | None = ModelQuery) -> CheckResult:
    """Accepted, or the first refused token with its reason; plus the final verdict and whether they agree."""
    engine = local_engine(request, body.model or model, "checking an instance")
    return await run_in_threadpool(check_text, engine, body.grammar, body.text, body.constraint_engine)


@router.post("/reason", summary="Why each token is allowed or refused after an answer prefix")
async def reason(request: Request, body: ReasonRequest, model: str | None = ModelQuery) -> ReasonResult:
    """One plain reason per token id, from the constraint's state after `prefix`."""
    engine = local_engine(request, body.model or model, "explaining a token")
    return await run_in_threadpool(reasons_at, engine, body.grammar, body.prefix, body.tokens, body.constraint_engine)
