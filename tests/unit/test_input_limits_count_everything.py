"""Every input that reaches the prompt counts toward the input limit, after the escaping that grows it.

On the old code tools (described to the model as JSON, where `é` becomes `\\u00e9`) and past tool-call
arguments were not counted: 64 tools of 15,000 characters became millions of tokens. Malformed past
tool calls were a 500.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from playground.decoding.engine import Engine
from playground.errors import PromptTooLongError
from playground.providers.registry import Registry
from playground.server import create_app
from playground.types.sizes import MAX_INPUT_CHARS, MAX_PROMPT_CHARS
from tests.fakes import FakeProvider

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Registry([FakeProvider("done")]), ui=False))


def _tool(name: str, description: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {}}}


def test_tool_descriptions_count_after_json_escaping(client: TestClient) -> None:
    # 30,000 characters in all, well under the limit raw; sixfold once written as JSON escapes
    tools = [_tool(f"t{i}", "é" * 7_500) for i in range(4)]
    reply = client.post("/v1/chat/completions", json={"messages": USER, "tools": tools})
    assert reply.status_code in (400, 422) and "characters in all messages and tools" in reply.text
    small = [_tool("t0", "é" * 100)]
    assert client.post("/v1/chat/completions", json={"messages": USER, "tools": small}).status_code == 200


def test_past_tool_call_arguments_count(client: TestClient) -> None:
    arguments = json.dumps({"x": "é" * 30_000}, ensure_ascii=False)  # 30 KB sent, 180 KB in the prompt
    call = {"id": "c1", "type": "function", "function": {"name": "t0", "arguments": arguments}}
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "user", "content": "?"}]
    reply = client.post("/v1/chat/completions", json={"messages": messages, "tools": [_tool("t0", "d")]})
    assert reply.status_code in (400, 422) and f"at most {MAX_INPUT_CHARS}" in reply.text


@pytest.mark.parametrize(
    "calls",
    [[{"function": {"name": "t0"}}], [{"function": {"name": "t0", "arguments": "{nope"}}], ["x"], [{"id": 1}]],
)
def test_malformed_past_tool_calls_are_a_4xx_not_a_500(client: TestClient, calls: list) -> None:
    messages = [*USER, {"role": "assistant", "content": None, "tool_calls": calls}, {"role": "user", "content": "?"}]
    reply = client.post("/v1/chat/completions", json={"messages": messages, "tools": [_tool("t0", "d")]})
    assert reply.status_code in (400, 422), reply.text


def test_the_prompt_as_the_model_reads_it_is_bounded_before_tokenizing() -> None:
    tokenized = []
    engine = SimpleNamespace(
        render_prompt=lambda inputs, params=None: "x" * (MAX_PROMPT_CHARS + 1),  # a template or tool text grew it
        _encode=lambda text, add_special_tokens: tokenized.append(text) or [1],
        max_input_tokens=10**9,
    )
    with pytest.raises(PromptTooLongError, match="as the model reads it"):
        Engine.encode_prompt(engine, "hi")
    assert not tokenized
