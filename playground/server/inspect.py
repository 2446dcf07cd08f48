"""POST /inspect: what every engine makes of a constraint, for the API and the UI's inspect panel."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from playground.constraints import Constraint
from playground.constraints.inspection import InspectResponse, inspect_constraint
from playground.server.debug import local_engine
from playground.server.tgi import ModelQuery
from playground.types import GrammarType, Strict

router = APIRouter(tags=["Constraints"])


class InspectRequest(Strict):
    """Body of POST /inspect: a constraint in TGI's `grammar` shape, and the model whose tokenizer compiles it."""

    grammar: GrammarType
    model: str | None = None


@router.post("/inspect", summary="Compile a constraint with every engine: compiled, time, errors, ignored keywords")
async def inspect(request: Request, body: InspectRequest, model: str | None = ModelQuery) -> InspectResponse:
    """One report per engine (llguidance, xgrammar, outlines_core) with the form each compiled."""
    engine = local_engine(request, body.model or model, "inspecting a constraint")
    # reading the constraint may wait seconds for its pre-check (a sandbox): never on the event loop
    return await run_in_threadpool(lambda: inspect_constraint(engine.compiler, Constraint.from_grammar(body.grammar)))
