"""Schemathesis over every API route of a real server: no 5xx, and every answer as the published OpenAPI says
(status codes, content types, response schemas), for schema-valid and schema-breaking requests alike.

Generation is kept small (max_new_tokens, n and best_of clamped to 2, short /next_token prefixes) so the
few hundred cases run in about a minute on two shared cores; the cases are derandomized, so a failure
repeats.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support import LiveServer, start_app

# Cases per operation and mode; routes that decode get fewer, the rest answer in milliseconds.
EXAMPLES = {GenerationMode.POSITIVE: 30, GenerationMode.NEGATIVE: 8}
DECODING = {
    "POST /generate",
    "POST /generate_stream",
    "POST /",
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /invocations",
    "POST /v1/responses",
    "POST /reason",
    "POST /score",
    "POST /evaluate",
}
DECODING_EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 4}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
SMALL = {
    "max_new_tokens": 2,
    "max_tokens": 2,
    "max_completion_tokens": 2,
    "max_output_tokens": 2,
    "n": 2,
    "best_of": 2,
    "top_n_tokens": 3,
}


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = start_app("--no-ui", "--max-new-tokens", "2", "--compile-timeout", "3")
    yield live
    live.stop()


def shrink(value: Any) -> Any:
    """The same request with small generation sizes: a valid body decodes two tokens at most."""
    if isinstance(value, dict):
        small = {k: shrink(v) for k, v in value.items()}
        for key, limit in SMALL.items():
            if isinstance(small.get(key), int) and not isinstance(small[key], bool) and small[key] > limit:
                small[key] = limit
        if isinstance(small.get("prefix"), str):
            small["prefix"] = small["prefix"][:32]
        for key in ("prompts", "conversations", "expected"):  # /evaluate: two rows at most
            if isinstance(small.get(key), list):
                small[key] = small[key][:2]
        return small
    if isinstance(value, list):
        return [shrink(item) for item in value]
    return value


def test_every_route_answers_as_documented_and_never_5xx(server: LiveServer) -> None:
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    ran: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        budget = DECODING_EXAMPLES if operation.label in DECODING else EXAMPLES
        for mode, examples in budget.items():

            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def call(case: schemathesis.Case) -> None:
                if isinstance(case.body, (dict, list)):
                    case.body = shrink(case.body)
                case.call_and_validate(base_url=server.url, checks=CHECKS, timeout=60)
                ran[case.operation.label] = ran.get(case.operation.label, 0) + 1

            try:
                call()
            except Unsatisfiable:  # nothing to break in a route without parameters or body (GET /health)
                assert mode is GenerationMode.NEGATIVE, operation.label
    print(f"schemathesis: {sum(ran.values())} cases over {len(ran)} operations")
    assert len(ran) >= 12, ran
    assert sum(ran.values()) >= 250, ran
