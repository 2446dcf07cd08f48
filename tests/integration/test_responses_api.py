"""POST /v1/responses through the openai SDK's Responses client: text.format under a schema (`parse` to a pydantic
model, streamed too), the stream's events as the SDK accumulates them, an answer cut by max_output_tokens,
logprobs, function tools (a call, streamed, then the conversation going on with its output), a thinking model's
reasoning item, and what this server refuses."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from pydantic import BaseModel

from tests.integration.test_api_tgi import PET_SCHEMA


class Pet(BaseModel):
    kind: str
    age: int


def pet_format() -> dict:
    return {"format": {"type": "json_schema", "name": "pet", "schema": PET_SCHEMA, "strict": True}}


@pytest.fixture(scope="module")
def client(server_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=300, max_retries=0)


def test_a_response_under_a_schema_with_usage(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="embedded",
        input="Describe a pet as JSON.",
        instructions="Answer in JSON.",
        text=pet_format(),
        max_output_tokens=40,
        temperature=0,
        store=False,
    )
    assert response.object == "response" and response.id.startswith("resp_") and response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), PET_SCHEMA)
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert response.usage.output_tokens >= 1 and response.usage.input_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    extra = response.model_extra
    assert extra["validation"]["valid"] is True and extra["constraint_kind"] == "json_schema"
    assert any(w.startswith("store: accepted and ignored") for w in extra["warnings"])
    again = client.responses.create(
        model="embedded",
        input=[
            {"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": [{"type": "input_text", "text": "Describe a pet as JSON."}]},
        ],
        text=pet_format(),
        max_output_tokens=40,
        temperature=0,
    )
    assert again.output_text == response.output_text  # the same prompt, as messages


def test_parse_and_stream_to_a_pydantic_model(client: openai.OpenAI) -> None:
    parsed = client.responses.parse(model="embedded", input="A pet, please.", text_format=Pet, temperature=0)
    assert isinstance(parsed.output_parsed, Pet)
    with client.responses.stream(model="embedded", input="A pet, please.", text_format=Pet, temperature=0) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == parsed.output_text
    assert final.output_parsed == parsed.output_parsed


def test_a_raw_stream_numbers_its_events_and_ends_incomplete_when_cut(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(
            model="embedded", input="Count to fifty.", max_output_tokens=4, stream=True, temperature=0
        )
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    final = events[-1].response
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert final.usage.output_tokens == 4 and final.output[0].status == "incomplete"
    parts = [e.part for e in events if e.type.startswith("response.content_part")] + [
        e.item.content[0] for e in events if e.type == "response.output_item.done"
    ]
    assert [part.logprobs for part in [*parts, final.output[0].content[0]]] == [[]] * 4  # as OpenAI's: [], never absent
    whole = client.responses.create(model="embedded", input="Count to fifty.", max_output_tokens=4, temperature=0)
    assert whole.status == "incomplete" and whole.output_text == final.output_text


def test_logprobs_ride_on_the_output_text(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="embedded",
        input="Say yes.",
        max_output_tokens=3,
        temperature=0,
        top_logprobs=2,
        include=["message.output_text.logprobs"],
    )
    logprobs = response.output[0].content[0].logprobs
    assert "".join(entry.token for entry in logprobs) == response.output_text
    assert all(entry.logprob <= 0 and 1 <= len(entry.top_logprobs) <= 2 for entry in logprobs)


def test_current_sdk_reasoning_efforts_and_cache_fields_are_taken(client: openai.OpenAI) -> None:
    """The SDK's efforts past `high` and its newer fields are accepted: a model without reasoning sets no budget for
    `max`, and the fields that cannot change the tokens are named in `warnings`."""
    response = client.responses.create(
        model="embedded",
        input="Hi",
        max_output_tokens=2,
        reasoning={"effort": "max"},
        extra_body={"prompt_cache_retention": "24h", "max_tool_calls": 1},
    )
    assert response.status == "incomplete" and response.completed_at is None
    assert any("prompt_cache_retention" in w for w in response.model_extra["warnings"])
    assert any("max_tool_calls" in w for w in response.model_extra["warnings"])
    boolean = {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "boolean"}}}
    done = client.responses.create(model="embedded", input="Is it?", text=boolean, max_output_tokens=8)
    assert done.status == "completed" and done.completed_at >= done.created_at


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
CLOCK = {**WEATHER, "name": "get_time", "description": "The time in a time zone."}


def test_function_tools_call_stream_and_go_on_with_the_output(client: openai.OpenAI) -> None:
    ask = {"model": "embedded", "input": "What's the weather in Paris?", "temperature": 0, "max_output_tokens": 60}
    named = {"tools": [WEATHER, CLOCK], "tool_choice": {"type": "function", "name": "get_weather"}}
    response = client.responses.create(**ask, **named)
    (call,) = response.output
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert call.call_id.startswith("call_") and call.id == "fc_" + call.call_id.removeprefix("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    assert response.status == "completed" and [tool.name for tool in response.tools] == ["get_weather", "get_time"]

    # streamed: the item announced, its arguments as deltas, then done; the Response the SDK returns agrees
    with client.responses.stream(**ask, **named) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    (streamed,) = final.output
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == streamed.arguments == call.arguments and events[2].item.id == streamed.id != call.id
    assert streamed.parsed_arguments == json.loads(call.arguments)  # the SDK parsed it (a strict tool)

    # allowed_tools: the model calls one of the tools it names, under its mode
    subset = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]}
    chosen = client.responses.create(**ask, tools=[WEATHER, CLOCK], tool_choice=subset)
    assert [item.name for item in chosen.output] == ["get_time"]

    # the conversation goes on with the call's output: the prompt holds the call and its output, the answer is text
    history = [
        {"role": "user", "content": ask["input"]},
        *[item.model_dump(exclude_none=True) for item in response.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 C and sunny"},
    ]
    answer = client.responses.create(**{**ask, "input": history}, tools=[WEATHER], tool_choice="none")
    (message,) = answer.output
    assert message.type == "message" and answer.output_text and answer.status in ("completed", "incomplete")
    alone = client.responses.create(**{**ask, "max_output_tokens": 1}, tools=[WEATHER], tool_choice="none")
    assert answer.usage.input_tokens > alone.usage.input_tokens + response.usage.output_tokens  # the call, its output


def test_a_streamed_call_cut_by_max_output_tokens_is_listed_as_streamed(client: openai.OpenAI) -> None:
    ask = {"model": "embedded", "input": "What's the weather in Paris?", "temperature": 0, "tools": [WEATHER]}
    whole = client.responses.create(**ask, tool_choice="required", max_output_tokens=60)
    arguments = whole.output[0].arguments
    for cut in range(whole.usage.output_tokens - 1, 0, -1):  # the first cut inside the arguments, from the end
        events = list(client.responses.create(**ask, tool_choice="required", max_output_tokens=cut, stream=True))
        deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        if deltas and deltas != arguments:
            break
    final = events[-1].response
    assert events[-1].type == "response.incomplete" and final.incomplete_details.reason == "max_output_tokens"
    (item,) = final.output  # the call as far as it came, and no empty message beside it
    assert item.type == "function_call" and item.status == "incomplete" and item.name == "get_weather"
    assert item.arguments == deltas and arguments.startswith(deltas)
    assert [e.item.status for e in events if e.type == "response.output_item.done"] == ["incomplete"]


def test_a_cut_call_s_warning_and_verdict_name_max_output_tokens(client: openai.OpenAI) -> None:
    ask = {"model": "embedded", "input": "What's the weather in Paris?", "temperature": 0, "tools": [WEATHER]}
    cut = client.responses.create(**ask, tool_choice="required", max_output_tokens=3)
    assert cut.status == "incomplete" and cut.output == []  # cut inside the call's name: no item, no empty message
    said = [*cut.model_extra["warnings"], cut.model_extra["validation"]["message"]]
    assert all("max_output_tokens" in text for text in said), said
    assert not any(name in text for text in said for name in ("max_tokens", "max_new_tokens")), said


def test_after_two_calls_in_its_prompt_one_call_is_no_list_of_calls_written_as_text(client: openai.OpenAI) -> None:
    """The model copies the list of calls it sees in its prompt; with one call allowed (parallel_tool_calls unset)
    that list came back as the message's text. Free text never opens like a call, one or a list."""
    history = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": "rainy"},
        {"role": "user", "content": "And in Oslo and Bergen?"},
    ]
    response = client.responses.create(
        model="embedded", input=history, tools=[WEATHER], instructions="Be brief.", max_output_tokens=60, temperature=0
    )
    assert response.parallel_tool_calls is False
    assert not response.output_text.lstrip().startswith(("[", "{")), response.output_text
    assert len([item for item in response.output if item.type == "function_call"]) <= 1


def test_a_forced_call_s_errors_name_the_tools_and_an_unused_format_is_still_checked(client: openai.OpenAI) -> None:
    never = {"type": "object", "properties": {}, "required": ["x"], "additionalProperties": False}
    impossible = {**WEATHER, "name": "impossible", "parameters": never}
    bogus = {"format": {"type": "json_schema", "name": "x", "schema": {"type": "bogus"}}}
    for extra, param, words in [
        ({"tools": [impossible], "tool_choice": "required"}, "tools", "no value satisfies the schema"),
        ({"tools": [WEATHER, impossible], "tool_choice": {"type": "function", "name": "impossible"}},
         "tools[1].parameters", "no value satisfies the schema"),
        ({"tools": [WEATHER], "tool_choice": "required", "text": bogus}, "text.format", "not a valid JSON Schema"),
    ]:  # fmt: skip
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="embedded", input="Hi", max_output_tokens=20, **extra)
        assert caught.value.body["param"] == param and words in caught.value.body["message"], caught.value.body


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id: not supported here"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type: 'web_search' tools are not supported here"),
        (
            {"tools": [{"type": "function", "name": "f", "parameters": {"type": 5}}], "tool_choice": "required"},
            "tools[0].parameters (f): not a valid JSON Schema",
        ),
        ({"tool_choice": "required"}, "tool_choice: 'required' needs function `tools`"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
            "input[0].call_id: no function_call item before it has call_id 'c'",
        ),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 5}}}}, "not a valid JSON Schema"),
        ({"temperature": 3}, "temperature"),
        (
            {"max_output_tokens": 10**7},
            "tokens + max_output_tokens must be <=",
        ),  # the chat route's check, named as sent
    ],
)
def test_what_this_server_cannot_do_is_a_400_naming_it(client: openai.OpenAI, extra: dict, message: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**{"model": "embedded", "input": "Hi", "max_output_tokens": 2, **extra})
    assert message in str(caught.value) and "max_completion_tokens" not in str(caught.value)


def test_a_thinking_models_reasoning_is_its_own_output_item(thinking_url: str) -> None:
    client = openai.OpenAI(base_url=f"{thinking_url}/v1", api_key="unused", timeout=120, max_retries=0)
    ask = {
        "model": "tgi",
        "input": "Is the sky blue?",
        "temperature": 0,
        "max_output_tokens": 24,
        "extra_body": {"max_reasoning_tokens": 5, "structured_outputs": {"choice": ["yes", "no"]}},
    }
    response = client.responses.create(**ask)
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text and "<think>" not in reasoning.content[0].text
    assert message.type == "message" and response.output_text in ("yes", "no")
    assert response.usage.output_tokens_details.reasoning_tokens == 6
    events = list(client.responses.create(**ask, stream=True))
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert thought == reasoning.content[0].text
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1]
    items = [
        (e.type, e.output_index) for e in events if e.type.startswith(("response.output_item.", "response.content"))
    ]
    assert items == [  # the reasoning is done before the message starts, as OpenAI and vLLM stream it
        ("response.output_item.added", 0),
        ("response.content_part.added", 0),  # each item's part, announced and finished as OpenAI's are
        ("response.content_part.done", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.content_part.added", 1),
        ("response.content_part.done", 1),
        ("response.output_item.done", 1),
    ]
    parts = [e.part for e in events if e.type.startswith("response.content_part.") and e.output_index == 0]
    assert [p.type for p in parts] == ["reasoning_text", "reasoning_text"] and parts[1].text == thought
    assert events[-1].response.output_text == response.output_text
    # numbered as sent (the message's opening events were numbered before the reasoning's closing ones)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # the message's logprobs are its own tokens' (the reasoning's were listed with them)
    scored = client.responses.create(**ask, top_logprobs=1)
    (text,) = scored.output[1].content
    assert "".join(entry.token for entry in text.logprobs) == scored.output_text


def test_a_stored_response_is_a_404_that_says_none_are_kept(client: openai.OpenAI) -> None:
    """responses.retrieve was a bare "Not Found"; every stored-response call now says why."""
    calls = [
        lambda: client.responses.retrieve("resp_abc"),
        lambda: client.responses.delete("resp_abc"),
        lambda: client.responses.cancel("resp_abc"),
        lambda: client.responses.input_items.list("resp_abc"),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError, match="this server keeps no responses"):
            call()


def test_input_tokens_counts_what_a_response_reads(client: openai.OpenAI) -> None:
    """The SDK's responses.input_tokens.count was a 405 naming the stored responses' route; a past call whose
    arguments are empty (a tool without parameters, as other servers' histories carry it) was a 400."""
    history = [
        {"role": "user", "content": "What time is it?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_time", "arguments": ""},
        {"type": "function_call_output", "call_id": "call_1", "output": "12:00"},
    ]
    ask = {
        "model": "embedded",
        "input": history,
        "instructions": "Be brief.",
        "tools": [WEATHER, CLOCK],
        "tool_choice": "required",  # the tools are described in the prompt (under `none` they are not, here)
    }
    counted = client.responses.input_tokens.count(**ask)
    assert counted.object == "response.input_tokens"
    answered = client.responses.create(**ask, max_output_tokens=1, temperature=0)
    assert counted.input_tokens == answered.usage.input_tokens
    bare = client.responses.input_tokens.count(model="embedded", input="What time is it?")
    assert 0 < bare.input_tokens < counted.input_tokens
