"""Through the live server, no schema reads outside the request: /generate, /v1/chat/completions and /check."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.listener import Listener, listening
from tests.support import error_of


@pytest.fixture
def listener() -> Iterator[Listener]:
    with listening() as server:
        yield server


def _generate(schema: Any) -> tuple[str, dict]:
    grammar = {"type": "json", "value": schema}
    return "/generate", {"inputs": "Number: ", "parameters": {"max_new_tokens": 3, "grammar": grammar, "seed": 1}}


def _chat(schema: Any) -> tuple[str, dict]:
    response_format = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    return "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "A number"}],
        "max_tokens": 3,
        "response_format": response_format,
    }


def _check(schema: Any) -> tuple[str, dict]:
    return "/check", {"grammar": {"type": "json", "value": schema}, "text": '"guess"'}


ROUTES = [pytest.param(_generate, id="generate"), pytest.param(_chat, id="chat"), pytest.param(_check, id="check")]


def _refused(url: str, route: Callable[[Any], tuple[str, dict]], schema: Any) -> str:
    path, body = route(schema)
    response = httpx.post(f"{url}{path}", json=body, timeout=120)
    assert response.status_code == (400 if path.startswith("/v1/") else 422), response.text
    message, error_type = error_of(path, response.json())
    assert error_type == ("constraint" if path.startswith("/v1/") else "validation")
    return message


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("keyword", ["$ref", "$dynamicRef"])
def test_a_url_reference_is_refused_and_the_listener_never_contacted(server_url, listener, route, keyword):
    schema = {"type": "object", "properties": {"a": {keyword: f"{listener.url}/dyn.json"}}}
    message = _refused(server_url, route, schema)
    assert keyword in message and "never fetched" in message
    assert listener.connections == 0


@pytest.mark.parametrize("route", ROUTES)
def test_an_id_relative_reference_is_refused_and_the_listener_never_contacted(server_url, listener, route):
    schema = {"$id": f"{listener.url}/root.json", "$dynamicRef": "dyn.json"}
    assert "'dyn.json'" in _refused(server_url, route, schema)
    assert listener.connections == 0


@pytest.mark.parametrize("route", ROUTES)
def test_a_file_reference_never_leaks_the_file(server_url, tmp_path, route):
    secret = tmp_path / "secret.json"
    secret.write_text('{"const": "TOP-SECRET-VALUE"}')
    for schema in ({"$ref": secret.as_uri()}, {"$id": tmp_path.as_uri() + "/", "$dynamicRef": "secret.json"}):
        assert "TOP-SECRET-VALUE" not in _refused(server_url, route, schema)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("schema", [{"$dynamicRef": "#/$defs/nope"}, {"$schema": {"x": 1}}])
def test_odd_references_are_422_not_500(server_url, route, schema):
    _refused(server_url, route, schema)


def test_an_internal_reference_still_decodes_and_validates(server_url):
    schema = {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"}
    path, body = _generate(schema)
    response = httpx.post(f"{server_url}{path}", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["validation"]["valid"] is True
