"""Every size a request can blow up is bounded: a clear 422 naming the field and the limit, before any work."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app
from playground.types import sizes
from tests.support import error_of

USER = {"role": "user", "content": "x"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Registry([]), ui=False))


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (
            "/tokenize",
            {"inputs": "a" * (sizes.MAX_INPUT_CHARS + 1)},
            f"inputs: String should have at most {sizes.MAX_INPUT_CHARS} characters",
        ),
        (
            "/generate",
            {"inputs": "a" * (sizes.MAX_INPUT_CHARS + 1)},
            f"inputs: String should have at most {sizes.MAX_INPUT_CHARS} characters",
        ),
        (
            "/next_token",
            {"inputs": "x", "prefix": "a" * (sizes.MAX_PREFIX_CHARS + 1)},
            f"prefix: String should have at most {sizes.MAX_PREFIX_CHARS} characters",
        ),
        (
            "/next_token",
            {"messages": [{"role": "user", "content": "a" * (sizes.MAX_INPUT_CHARS + 1)}]},
            f"messages: {sizes.MAX_INPUT_CHARS + 1} characters in all messages; at most {sizes.MAX_INPUT_CHARS}",
        ),
        (
            "/generate",
            {"inputs": "x", "parameters": {"continue_from": "a" * (sizes.MAX_PREFIX_CHARS + 1)}},
            f"parameters.continue_from: String should have at most {sizes.MAX_PREFIX_CHARS} characters",
        ),
        (
            "/generate",
            {"inputs": "x", "parameters": {"stop": ["s" * (sizes.MAX_STOP_CHARS + 1)]}},
            f"parameters.stop[0]: String should have at most {sizes.MAX_STOP_CHARS} characters",
        ),
        (
            "/generate",
            {
                "inputs": "x",
                "parameters": {"logits_processors": [{"name": "ban_strings"}] * (sizes.MAX_PROCESSORS + 1)},
            },
            f"parameters.logits_processors: List should have at most {sizes.MAX_PROCESSORS} items",
        ),
        (
            "/generate",
            {"inputs": "x", "parameters": {"logits_processors": [{"name": "ban_strings", "params": ["b" * 5000]}]}},
            f"parameters.logits_processors[0].params[0]: String should have at most {sizes.MAX_PROCESSOR_PARAM_CHARS}",
        ),
        (
            "/generate",
            {"inputs": "x", "parameters": {"adapter_id": "a" * (sizes.MAX_NAME_CHARS + 1)}},
            f"parameters.adapter_id: String should have at most {sizes.MAX_NAME_CHARS} characters",
        ),
        (
            "/v1/chat/completions",
            {"messages": [USER] * (sizes.MAX_MESSAGES + 1)},
            f"messages: List should have at most {sizes.MAX_MESSAGES} items",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a" * 70_000}, {"role": "user", "content": "a" * 70_000}]},
            f"messages: 140000 characters in all messages; at most {sizes.MAX_INPUT_CHARS}",
        ),
        (
            "/v1/chat/completions",
            {"messages": [USER], "stop": "s" * (sizes.MAX_STOP_CHARS + 1)},
            f"stop: String should have at most {sizes.MAX_STOP_CHARS} characters",
        ),
        (
            "/v1/models",
            {"id": "m" * (sizes.MAX_NAME_CHARS + 1), "provider_id": "local"},
            f"id: String should have at most {sizes.MAX_NAME_CHARS} characters",
        ),
    ],
)
def test_oversized_requests_are_422_naming_the_limit(client: TestClient, path: str, body: dict, message: str) -> None:
    response = client.post(path, json=body)
    assert response.status_code == (400 if path.startswith("/v1/") else 422), response.text[:500]
    text, error_type = error_of(path, response.json())
    assert error_type == "validation"
    assert message in text
