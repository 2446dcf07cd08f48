"""Tool calls that survive real schemas (closed objects: the tiny model rambles in open ones): `$defs`/`$ref` under every tool_choice, errors that name the tool,
parallel calls, a call cut off by max_tokens, and the inputs the peers refuse."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import openai
import pytest

PET_OWNED = {
    "$defs": {
        "Owner": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 12}},
            "required": ["name"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {"kind": {"enum": ["cat", "dog"]}, "owner": {"$ref": "#/$defs/Owner"}},
    "required": ["kind", "owner"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "PetOwned", "parameters": PET_OWNED}},
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {
                "definitions": {"Zone": {"enum": ["UTC", "CET"]}},
                "type": "object",
                "properties": {"zone": {"$ref": "#/definitions/Zone"}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        },
    },
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "A pet and its owner"}]


def post(url: str, **fields: Any) -> httpx.Response:
    body = {"model": "embedded", "messages": ASK, "max_tokens": 60, "temperature": 0, **fields}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


@pytest.mark.parametrize(
    "tool_choice", ["required", "auto", {"type": "function", "function": {"name": "PetOwned"}}, "PetOwned"]
)
def test_refs_in_parameters_resolve_under_every_tool_choice(server_url: str, tool_choice: Any) -> None:
    response = post(server_url, tools=TOOLS, tool_choice=tool_choice)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    for call in choice["message"].get("tool_calls") or []:
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[call["function"]["name"]])
    if tool_choice != "auto":
        # a named tool_choice's call ends with "stop", as OpenAI and vLLM answer
        assert choice["finish_reason"] == ("tool_calls" if tool_choice == "required" else "stop")
        assert choice["message"]["tool_calls"]


def test_the_issue_body_with_a_ref_is_a_valid_call(server_url: str) -> None:
    response = post(server_url, tools=TOOLS[:1], tool_choice="required")
    assert response.status_code == 200, response.text
    (call,) = response.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "PetOwned"
    jsonschema.validate(json.loads(call["function"]["arguments"]), PET_OWNED)


@pytest.mark.parametrize("tool_choice", ["auto", "required", "PetOwned"])
def test_a_bad_tool_schema_names_the_tool_not_a_grammar(server_url: str, tool_choice: str) -> None:
    tools = [{"type": "function", "function": {"name": "PetOwned", "parameters": {"type": 12}}}]
    response = post(server_url, tools=tools, tool_choice=tool_choice)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (
        error["message"].startswith("tools[0].function.parameters (PetOwned): ") and "grammar" not in error["message"]
    )
    assert error["param"] == "tools[0].function.parameters"


def test_parallel_tool_calls_false_is_exactly_one_true_is_one_or_more(server_url: str) -> None:
    one = post(server_url, tools=TOOLS, tool_choice="required", parallel_tool_calls=False).json()["choices"][0]
    assert len(one["message"]["tool_calls"]) == 1
    many = post(server_url, tools=TOOLS, tool_choice="required", parallel_tool_calls=True, max_tokens=120)
    choice = many.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and 1 <= len(choice["message"]["tool_calls"]) <= 8, choice
    for call in choice["message"]["tool_calls"]:
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[call["function"]["name"]])


@pytest.mark.parametrize("tool_choice", ["required", "PetOwned"])
def test_a_call_cut_off_by_max_tokens_is_length_without_a_call(server_url: str, tool_choice: str) -> None:
    choice = post(server_url, tools=TOOLS, tool_choice=tool_choice, max_tokens=4).json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"].get("tool_calls") is None and choice["message"]["content"] == ""
    assert any("cut off" in w for w in choice["warnings"]), choice["warnings"]


def test_a_cut_off_streamed_call_ends_with_length_and_the_warning(server_url: str) -> None:
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=120, max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="embedded", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=4, stream=True
        )
    )
    last = chunks[-1].choices[0]
    assert last.finish_reason == "length" and any("cut off" in w for w in last.model_extra["warnings"])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tools": []}, "tools: List should have at least 1 item"),
        ({"tools": TOOLS[:1] + TOOLS[:1]}, "tools: two tools are named 'PetOwned'"),
        ({"tools": TOOLS, "tool_choice": "nope"}, "tool_choice: no tool named 'nope'"),
        (
            {"messages": [*ASK, {"role": "assistant", "tool_calls": [{"function": {"name": "PetOwned"}}]}]},
            "messages[1].tool_calls[0].function.arguments: field required",
        ),
    ],
)
def test_inputs_the_peers_refuse_are_400(server_url: str, fields: dict[str, Any], message: str) -> None:
    body = {"tools": TOOLS, **fields}
    response = post(server_url, **body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith(message)


ODD_NOT = {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}
ODD_EMPTY = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}, "required": ["a"]}


def test_a_schema_no_answer_satisfies_under_auto_names_the_tool(server_url: str) -> None:
    tools = [{"type": "function", "function": {"name": "odd", "parameters": ODD_EMPTY}}]
    response = post(server_url, tools=tools, tool_choice="auto", max_tokens=3)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert message.startswith("tools[0].function.parameters (odd): ") and "grammar" not in message, message
    assert "nsatisfiable" in message


UNIQUE_TAGS = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True}},
}


@pytest.mark.parametrize(("parameters", "keyword"), [(ODD_NOT, "not"), (UNIQUE_TAGS, "uniqueItems")])
def test_a_keyword_llguidance_cannot_enforce_under_auto_is_ignored_and_named(
    server_url: str, parameters: dict, keyword: str
) -> None:
    """As under `required` (auto's lenient llguidance), the keyword is ignored and named (pydantic's set fields carry
    uniqueItems); before, every such request was a 400."""
    tools = [*TOOLS[1:], {"type": "function", "function": {"name": "odd", "parameters": parameters}}]
    response = post(server_url, tools=tools, tool_choice="auto", max_tokens=3)
    assert response.status_code == 200, response.text
    warnings = response.json()["choices"][0]["warnings"]
    assert any("does not enforce these keywords here (lenient)" in w and keyword in w for w in warnings), warnings
