"""A schema no value satisfies is a 422 for every engine, never a fall-through to one that ignores it."""

from __future__ import annotations

import httpx
import pytest

UNSATISFIABLE = [
    (False, "the schema is `false`"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "minimum (5) is greater than maximum (1)"),
    ({"type": "object", "additionalProperties": False, "required": ["a"]}, "required property 'a'"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength (5) is greater than maxLength (2)"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "incompatible types"),
]


@pytest.mark.parametrize("engine", ["auto", "llguidance", "xgrammar", "outlines_core"])
@pytest.mark.parametrize(("schema", "reason"), UNSATISFIABLE)
def test_unsatisfiable_schema_is_422_whatever_the_engine(server_url, schema, reason, engine):
    parameters = {"max_new_tokens": 5, "constraint_engine": engine, "grammar": {"type": "json", "value": schema}}
    response = httpx.post(f"{server_url}/generate", json={"inputs": "JSON: ", "parameters": parameters}, timeout=120)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error_type"] == "validation"  # TGI's word; OpenAI's `code` says constraint
    assert "satisfies" in body["error"] and reason in body["error"], body["error"]


def test_unsatisfiable_response_format_is_400_in_chat(server_url):
    schema = {"type": "object", "properties": {"a": False}, "required": ["a"]}
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }
    response = httpx.post(f"{server_url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 400, response.text
    assert "no value satisfies the schema" in response.json()["error"]["message"]
