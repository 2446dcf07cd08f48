"""Parameters take JSON's own types: no booleans or strings as numbers, no Infinity or NaN; errors stay short."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app
from tests.support import table_rows


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Registry([]), ui=False))


def post_raw(client: TestClient, path: str, text: str):
    """Post JSON text as is: Python's json writes Infinity and NaN, which only the raw form keeps."""
    return client.post(path, content=text.encode(), headers={"content-type": "application/json"})


# Each message, and the (parameter, JSON value) pairs that earn it; the error names the parameter.
TGI_REFUSED = {
    "finite number": [("temperature", "Infinity"), ("temperature", "NaN"), ("top_p", "-Infinity")],
    "valid integer": [*(("max_new_tokens", value) for value in ("true", '"3"', "3.0")), ("seed", "false")],
    "valid number": [("temperature", '"0.5"'), ("repetition_penalty", "true")],
    "valid boolean": [("do_sample", '"true"'), ("do_sample", "1")],
    # an int64, as TGI's spec types it (2**64 wrapped to 0 before: details.seed said 0)
    "less than or equal to 9223372036854775807": [("seed", str(2**63)), ("seed", str(2**64))],
}
CHAT_REFUSED = {
    "finite number": [("temperature", "Infinity"), ("top_p", "NaN"), ("frequency_penalty", "Infinity")],
    "valid integer": [("max_tokens", "true"), ("max_tokens", '"3"'), ("n", "2.0")],
    "valid boolean": [("logprobs", '"yes"')],
    "less than or equal to 9223372036854775807": [("seed", str(2**63))],
}


@pytest.mark.parametrize(("message", "name", "value"), table_rows(TGI_REFUSED))
def test_tgi_parameters_are_strict(client: TestClient, message: str, name: str, value: str) -> None:
    response = post_raw(client, "/generate", f'{{"inputs": "x", "parameters": {{"{name}": {value}}}}}')
    assert response.status_code == 422, response.text
    assert response.json()["error_type"] == "validation"
    assert response.json()["error"].startswith(f"parameters.{name}: ")
    assert message in response.json()["error"]


@pytest.mark.parametrize(("message", "name", "value"), table_rows(CHAT_REFUSED))
def test_chat_parameters_are_strict(client: TestClient, message: str, name: str, value: str) -> None:
    response = post_raw(
        client, "/v1/chat/completions", f'{{"messages": [{{"role": "user", "content": "x"}}], "{name}": {value}}}'
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith(f"{name}: ")
    assert message in response.json()["error"]["message"]
    assert response.json()["error"]["param"] == name


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
