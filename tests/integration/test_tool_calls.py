"""Tool calls on /v1/chat/completions, through the openai SDK: each tool_choice, streaming, and errors."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from openai.lib._parsing._completions import type_to_response_format_param
from pydantic import BaseModel

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone", "parameters": TIME}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}


@pytest.fixture(scope="module")
def client(server_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=300, max_retries=0)


def create(client: openai.OpenAI, **kwargs):
    return client.chat.completions.create(model="embedded", messages=ASK, tools=TOOLS, max_tokens=60, seed=1, **kwargs)


def test_named_tool_choice_gives_that_call_with_valid_arguments(client: openai.OpenAI) -> None:
    choice = create(client, tool_choice={"type": "function", "function": {"name": "get_weather"}}).choices[0]
    assert choice.finish_reason == "stop" and choice.message.content is None  # a named call's, as OpenAI's and vLLM's
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    assert choice.model_extra["validation"]["valid"] is True


def test_required_picks_one_of_the_tools(client: openai.OpenAI) -> None:
    choice = create(client, tool_choice="required", temperature=0).choices[0]
    (call,) = choice.message.tool_calls
    schemas = {"get_weather": WEATHER, "get_time": TIME}
    assert call.function.name in schemas
    jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])


def test_allowed_tools_calls_only_the_tools_it_names_under_its_mode(client: openai.OpenAI) -> None:
    """OpenAI's allowed_tools tool_choice on chat (a 400 of union members before; the Responses route had it)."""
    allowed = {"mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]}
    choice = create(client, tool_choice={"type": "allowed_tools", "allowed_tools": allowed}, temperature=0).choices[0]
    (call,) = choice.message.tool_calls  # the question is about the weather: only the allowed tool may be called
    assert call.function.name == "get_time" and choice.finish_reason == "tool_calls"
    jsonschema.validate(json.loads(call.function.arguments), TIME)


def test_a_tool_declared_without_parameters_is_called_with_none(client: openai.OpenAI) -> None:
    ping = [{"type": "function", "function": {"name": "ping"}}]  # OpenAI: an empty parameter list
    choice = client.chat.completions.create(
        model="embedded",
        messages=[{"role": "user", "content": "Ping"}],
        tools=ping,
        tool_choice="required",
        max_tokens=40,
        temperature=0,  # (sampled, 1 seed in ~80 spent the 40 tokens on the 32 spaces of indentation pretty JSON allows)
    ).choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "ping" and json.loads(call.function.arguments) == {}


def test_auto_answers_text_or_a_call(client: openai.OpenAI) -> None:
    for seed in (1, 2, 3):
        choice = client.chat.completions.create(
            model="embedded", messages=ASK, tools=TOOLS, tool_choice="auto", max_tokens=60, seed=seed
        ).choices[0]
        assert choice.model_extra["constraint_kind"] == "grammar"
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name in {
                "get_weather",
                "get_time",
            }
        else:
            assert choice.message.content and not choice.message.content.lstrip().startswith("{")


class Verdict(BaseModel):
    city: str
    sunny: bool


def test_tools_beside_a_response_format_give_a_call_or_an_answer_in_the_format(client: openai.OpenAI) -> None:
    """As OpenAI answers an agent's request (pydantic-ai's NativeOutput, OpenAI's Agents SDK): auto is a call or the
    answer in the format's schema (its objects closed), streamed or not; a forced call is a call. It was a 400.
    The model calls whenever it may (greedy); an answer begun in the format (continue_final_message) goes on in it."""
    verdict = type_to_response_format_param(Verdict)
    both = {"tools": TOOLS, "tool_choice": "auto", "response_format": verdict, "max_tokens": 60, "temperature": 0}
    call = client.chat.completions.create(model="embedded", messages=ASK, **both).choices[0]
    assert call.finish_reason == "tool_calls"
    jsonschema.validate(json.loads(call.message.tool_calls[0].function.arguments), WEATHER)
    begun = [{"role": "user", "content": "Is it sunny in Paris?"}, {"role": "assistant", "content": '{"city": "'}]
    go_on = {"continue_final_message": True, "add_generation_prompt": False}
    answer = client.chat.completions.create(model="embedded", messages=begun, extra_body=go_on, **both).choices[0]
    assert answer.finish_reason == "stop" and answer.message.tool_calls is None
    assert set(json.loads('{"city": "' + answer.message.content)) == {"city", "sunny"}  # no invented key
    streamed = client.chat.completions.create(model="embedded", messages=begun, extra_body=go_on, stream=True, **both)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == answer.message.content
    forced = create(client, tool_choice="required", response_format=verdict)
    assert forced.choices[0].finish_reason == "tool_calls"


def test_none_leaves_the_answer_as_text(client: openai.OpenAI) -> None:
    choice = create(client, tool_choice="none").choices[0]
    assert choice.message.tool_calls is None and choice.message.content


def test_streamed_call_comes_head_first_then_adds_up_to_the_same_call(client: openai.OpenAI) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    whole = create(client, tool_choice=named, temperature=0).choices[0].message.tool_calls[0]
    chunks = list(create(client, tool_choice=named, temperature=0, stream=True))
    calls = [c for chunk in chunks for c in (chunk.choices[0].delta.tool_calls or []) if chunk.choices]
    head, *rest = calls  # OpenAI's order: the id, type and name first, then the arguments as they are decoded
    assert head.id.startswith("call_") and head.function.name == "get_weather" and head.function.arguments == ""
    assert len(rest) > 1 and all(c.id is None and c.function.name is None and c.index == 0 for c in rest)
    assert "".join(c.function.arguments for c in calls) == whole.function.arguments
    assert chunks[-1].choices[0].finish_reason == "stop"  # (named)
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content is None
    with client.chat.completions.stream(
        model="embedded", messages=ASK, tools=TOOLS, tool_choice=named, temperature=0, max_tokens=60
    ) as stream:  # the SDK's helper ends as the unstreamed answer does: content None, not ""
        assert stream.get_final_completion().choices[0].message.content is None


def test_a_streamed_call_s_logprobs_are_the_whole_answer_s(client: openai.OpenAI) -> None:
    """The call's last token (its closing `}`) made no delta of its own, and its logprobs entry was dropped."""
    whole = create(client, tool_choice="required", temperature=0, logprobs=True).choices[0].logprobs.content
    chunks = list(create(client, tool_choice="required", temperature=0, logprobs=True, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in whole] and whole
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in whole], abs=1e-4)


def test_a_past_call_and_its_result_go_back_to_the_model(client: openai.OpenAI) -> None:
    history = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]
    choice = client.chat.completions.create(
        model="embedded", messages=history, tools=TOOLS, tool_choice="none", max_tokens=20, seed=1
    ).choices[0]
    assert choice.message.content


def test_bad_tool_requests_are_400s(server_url: str) -> None:
    def status(body: dict) -> tuple[int, str]:
        response = httpx.post(f"{server_url}/v1/chat/completions", json={"messages": ASK, **body}, timeout=60)
        return response.status_code, response.json()["error"]["message"]

    assert status({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}) == (
        400,
        "tool_choice: no tool named 'nope' in `tools`",
    )
    assert status({"tool_choice": "required"}) == (400, "tool_choice: needs `tools`")
    code, error = status({"tools": TOOLS, "guided_regex": "a+"})
    assert code == 400 and error.startswith("tools: beside tools, a response format must be a JSON schema")
    code, error = status({"tools": [{"type": "function", "function": {"name": "bad name!"}}]})
    assert code == 400 and "tools" in error
