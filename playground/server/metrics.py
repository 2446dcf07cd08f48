"""GET /metrics: Prometheus' text format, with TGI's metric names where TGI has one.

Per local model (label `model`): generations started, succeeded and failed (label `err`: the error type, or
`cancelled` when the reader left), prompt and generated lengths, durations (from the request's arrival, its wait
for an admission slot included), the batch's rows and the requests waiting to join it. Server-wide: the requests
running and waiting for an admission slot, and those refused (429) for a full queue. Generations count wherever
they come from (the API and the UI alike); remote providers' work is their servers' to report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from playground.decoding.stats import EngineStats, Histogram
from playground.providers.base import EngineLender
from playground.server.tgi import registry_of

router = APIRouter(tags=["TGI-compatible"])

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@router.get(
    "/metrics",
    summary="Prometheus metrics (TGI's names), per local model",
    response_class=Response,  # errors stay JSON in the docs; the text is declared here
    responses={
        200: {"description": "Prometheus' text format", "content": {"text/plain": {"schema": {"type": "string"}}}}
    },
)
async def metrics(request: Request) -> PlainTextResponse:
    registry = registry_of(request)
    engines = [
        engine
        for provider in registry.providers.values()
        if provider.capabilities.local_engine
        for engine in cast(EngineLender, provider).loaded_engines()
    ]
    admission = request.app.state.admission
    text = render(
        [(engine.model_id, engine.stats.snapshot(), engine.scheduler.usage()) for engine in engines],
        running=admission.running,
        waiting=admission.waiting,
        refused=admission.refused,
    )
    return PlainTextResponse(text, media_type=CONTENT_TYPE)


def render(
    models: list[tuple[str, EngineStats, dict[str, int]]], *, running: int, waiting: int, refused: int = 0
) -> str:
    """The exposition text: each metric's HELP and TYPE once, then a sample per model."""
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], Any]]) -> None:
        out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"])
        out.extend(f"{name}{_labels(labels)} {_value(value)}" for labels, value in samples)

    def histogram(name: str, help_text: str, pick: str) -> None:
        out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} histogram"])
        for model, stats, _ in models:
            found: Histogram = getattr(stats, pick)
            for le, count in found.cumulative():
                bound = "+Inf" if math.isinf(le) else _value(le)
                out.append(f"{name}_bucket{_labels({'model': model, 'le': bound})} {count}")
            out.append(f"{name}_sum{_labels({'model': model})} {_value(found.total)}")
            out.append(f"{name}_count{_labels({'model': model})} {found.count}")

    def per_model(pick: Any) -> list[tuple[dict[str, str], Any]]:
        return [({"model": model}, pick(stats, usage)) for model, stats, usage in models]

    metric("tgi_request_count", "counter", "Generations started.", per_model(lambda s, u: s.started))
    metric("tgi_request_success", "counter", "Generations that finished.", per_model(lambda s, u: s.succeeded))
    metric(
        "tgi_request_failure",
        "counter",
        "Generations that failed, by error type (cancelled: the reader left).",
        [({"model": model, "err": err}, n) for model, stats, _ in models for err, n in sorted(stats.failed.items())],
    )
    histogram("tgi_request_input_length", "Prompt tokens of finished generations.", "input_length")
    histogram("tgi_request_generated_tokens", "Tokens generated (every best_of candidate).", "generated_tokens")
    histogram("tgi_request_duration", "Seconds from the request to its result.", "duration_s")
    histogram("tgi_request_first_token_duration", "Seconds to the first token.", "time_to_first_token_s")
    metric(
        "playground_finish_reason",
        "counter",
        "Finished generations by finish reason.",
        [
            ({"model": model, "reason": reason}, n)
            for model, stats, _ in models
            for reason, n in sorted(stats.finish_reasons.items())
        ],
    )
    metric("playground_prompt_tokens_total", "counter", "Prompt tokens.", per_model(lambda s, u: s.prompt_tokens_total))
    metric(
        "playground_generated_tokens_total",
        "counter",
        "Generated tokens.",
        per_model(lambda s, u: s.generated_tokens_total),
    )
    metric("tgi_batch_current_size", "gauge", "Rows decoding in the batch now.", per_model(lambda s, u: u["rows"]))
    metric("tgi_batch_current_max_size", "gauge", "The batch's row limit.", per_model(lambda s, u: u["max_batch_size"]))
    metric("tgi_queue_size", "gauge", "Requests waiting to join the batch.", per_model(lambda s, u: u["joining"]))
    metric("playground_requests_running", "gauge", "Requests holding an admission slot.", [({}, running)])
    metric("playground_requests_waiting", "gauge", "Requests waiting for an admission slot.", [({}, waiting)])
    metric(
        "playground_requests_refused_total",
        "counter",
        "Requests answered 429 because the admission queue was full (before any model was chosen).",
        [({}, refused)],
    )
    return "\n".join(out) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    escaped = (f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + ",".join(escaped) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
