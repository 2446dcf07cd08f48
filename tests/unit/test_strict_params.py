"""Parameters take JSON's own types: no booleans or strings as numbers, no Infinity or NaN; errors stay short."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Registry([]), ui=False))


def post_raw(client: TestClient, path: str, text: str):
    """Post JSON text as is: Python's json writes Infinity and NaN, which only the raw form keeps."""
    return client.post(path, content=text.encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize(
    ("parameters", "field", "message"),
    [
        ('{"temperature": Infinity}', "parameters.temperature", "finite number"),
        ('{"temperature": NaN}', "parameters.temperature", "finite number"),
        ('{"top_p": -Infinity}', "parameters.top_p", "finite number"),
        ('{"max_new_tokens": true}', "parameters.max_new_tokens", "valid integer"),
        ('{"max_new_tokens": "3"}', "parameters.max_new_tokens", "valid integer"),
        ('{"max_new_tokens": 3.0}', "parameters.max_new_tokens", "valid integer"),
        ('{"seed": false}', "parameters.seed", "valid integer"),
        ('{"temperature": "0.5"}', "parameters.temperature", "valid number"),
        ('{"repetition_penalty": true}', "parameters.repetition_penalty", "valid number"),
        ('{"do_sample": "true"}', "parameters.do_sample", "valid boolean"),
        ('{"do_sample": 1}', "parameters.do_sample", "valid boolean"),
    ],
)
def test_tgi_parameters_are_strict(client: TestClient, parameters: str, field: str, message: str) -> None:
    response = post_raw(client, "/generate", f'{{"inputs": "x", "parameters": {parameters}}}')
    assert response.status_code == 422, response.text
    assert response.json()["error_type"] == "validation"
    assert response.json()["error"].startswith(f"{field}: ")
    assert message in response.json()["error"]


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ('"temperature": Infinity', "temperature", "finite number"),
        ('"top_p": NaN', "top_p", "finite number"),
        ('"max_tokens": true', "max_tokens", "valid integer"),
        ('"max_tokens": "3"', "max_tokens", "valid integer"),
        ('"n": 2.0', "n", "valid integer"),
        ('"logprobs": "yes"', "logprobs", "valid boolean"),
        ('"frequency_penalty": Infinity', "frequency_penalty", "finite number"),
    ],
)
def test_chat_parameters_are_strict(client: TestClient, extra: str, field: str, message: str) -> None:
    response = post_raw(
        client, "/v1/chat/completions", f'{{"messages": [{{"role": "user", "content": "x"}}], {extra}}}'
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith(f"{field}: ")
    assert message in response.json()["error"]["message"]
    assert response.json()["error"]["param"] == field


def test_next_token_top_k_is_strict(client: TestClient) -> None:
    response = post_raw(client, "/next_token", '{"inputs": "x", "top_k": "5"}')
    assert response.status_code == 422
    assert response.json()["error"].startswith("top_k: ")


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": "x", "parameters": {"k" * 400_000: 1}},
        {"messages": [{"role": "user", "content": [{"type": "t" * 400_000}]}]},
    ],
)
def test_errors_never_echo_huge_values(client: TestClient, body: dict) -> None:
    path = "/v1/chat/completions" if "messages" in body else "/generate"
    response = client.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
    assert response.status_code == (400 if path.startswith("/v1/") else 422)
    assert len(response.text) < 3000
