"""The constraint debugger's routes: POST /check (test an instance) and POST /reason (why a token is refused)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from playground.debug.check import CheckRequest, CheckResult, check_text
from playground.debug.why import ReasonRequest, ReasonResult, reasons_at
from playground.errors import ParameterError
from playground.server.tgi import resolve

router = APIRouter(tags=["Constraint debugger"])


def local_engine(request: Request, model: str | None, what: str):
    """The local engine serving `model`; a remote model can't show masks, and the error says so."""
    provider, model_id = resolve(request, model)
    engine_of = getattr(provider, "engine", None)
    if engine_of is None:
        raise ParameterError(
            f"{what} needs the model's tokenizer and masks, which provider {provider.provider_id!r} "
            f"({provider.provider_type}) does not expose; use a local model",
            field="model",
        )
    return engine_of(model_id)


@router.post("/check", summary="Test an instance: walk a text through the constraint's masks and EOS gate")
async def check(request: Request, body: CheckRequest) -> CheckResult:
    """Accepted, or the first refused token with its reason; plus the final verdict and whether they agree."""
    engine = local_engine(request, body.model, "checking an instance")
    return await run_in_threadpool(check_text, engine, body.grammar, body.text, body.constraint_engine)


@router.post("/reason", summary="Why each token is allowed or refused after an answer prefix")
async def reason(request: Request, body: ReasonRequest) -> ReasonResult:
    """One plain reason per token id, from the constraint's state after `prefix`."""
    engine = local_engine(request, body.model, "explaining a token")
    return await run_in_threadpool(reasons_at, engine, body.grammar, body.prefix, body.tokens, body.constraint_engine)
