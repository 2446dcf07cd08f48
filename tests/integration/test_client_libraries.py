"""The client libraries people already use, against the live server on the embedded model: TGI's own
`text-generation`, instructor, langchain-openai, pydantic-ai and OpenAI's Agents SDK. Each parses a structured
answer or runs a function tool, and the test checks the parsed object validates (closed schemas with short
fields: the embedded model is tiny)."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import agents
import httpx
import huggingface_hub
import instructor
import jsonschema
import openai
import pytest
from huggingface_hub import ChatCompletionInputFunctionName, ChatCompletionInputToolChoiceClass, InferenceClient
from langchain_core.exceptions import ContextOverflowError
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from text_generation import Client as TGIClient
from text_generation.types import Grammar, GrammarType, Message, Tool

from tests.spec import validate


class Pet(BaseModel):
    """A pet."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["cat", "dog"]
    age: int = Field(ge=0, le=30)


class Owner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=10)


class OwnedPet(BaseModel):
    """A pet and its owner: a nested model, so the schema has $defs."""

    model_config = ConfigDict(extra="forbid")
    pet: Pet
    owner: Owner


PET_SCHEMA = Pet.model_json_schema()
ASK = "Describe a pet."


def test_tgi_client_chat_with_its_nulls_and_a_bare_string_tool_choice(server_url: str) -> None:
    client = TGIClient(server_url, timeout=120)
    answer = client.chat(messages=[Message(role="user", content="Hi")], max_tokens=4, seed=1)
    assert answer.choices[0].message.content and answer.usage["completion_tokens"] <= 4
    tool = Tool(type="function", function={"name": "describe_pet", "parameters": PET_SCHEMA})
    called = client.chat(
        messages=[Message(role="user", content=ASK)], tools=[tool], tool_choice="describe_pet", max_tokens=30
    )
    (call,) = called.choices[0].message.tool_calls
    assert call["function"]["name"] == "describe_pet" and called.choices[0].finish_reason == "stop"  # (named)
    Pet.model_validate_json(call["function"]["arguments"])


def test_tgi_client_generate_with_a_json_grammar(server_url: str) -> None:
    client = TGIClient(server_url, timeout=120)
    response = client.generate(
        "A pet as JSON: ", max_new_tokens=30, grammar=Grammar(type=GrammarType.Json, value=PET_SCHEMA)
    )
    jsonschema.validate(json.loads(response.generated_text), PET_SCHEMA)
    assert response.details.finish_reason.value == "eos_token"


@pytest.mark.parametrize("mode", [instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA])
def test_instructor_returns_a_valid_model(server_url: str, mode: instructor.Mode) -> None:
    client = instructor.from_openai(
        openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=120, max_retries=0), mode=mode
    )
    pet = client.chat.completions.create(
        model="embedded",
        response_model=Pet,
        messages=[{"role": "user", "content": ASK}],
        max_tokens=40,
        temperature=0,
        max_retries=0,
    )
    assert isinstance(pet, Pet) and Pet.model_validate(pet.model_dump()).model_dump() == pet.model_dump()


def _langchain(server_url: str) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=f"{server_url}/v1", api_key="unused", model="embedded", max_tokens=40, temperature=0, max_retries=0
    )


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_structured_output(server_url: str, method: str) -> None:
    pet = _langchain(server_url).with_structured_output(Pet, method=method).invoke(ASK)
    assert isinstance(pet, Pet) and Pet.model_validate(pet.model_dump()).model_dump() == pet.model_dump()


def test_langchain_reads_a_prompt_past_the_context_as_its_context_overflow(server_url: str) -> None:
    """The error clients fall back to a longer model on: OpenAI's `context_length_exceeded` code."""
    with pytest.raises(ContextOverflowError, match="This model's maximum context length is 8192 tokens"):
        _langchain(server_url).invoke("word " * 9000)


def test_langchain_bind_tools_with_a_named_tool(server_url: str) -> None:
    message = _langchain(server_url).bind_tools([Pet], tool_choice="Pet").invoke(ASK)
    (call,) = message.tool_calls
    assert call["name"] == "Pet"
    Pet.model_validate(call["args"])


def test_langchain_structured_output_through_the_responses_api(server_url: str) -> None:
    llm = ChatOpenAI(
        base_url=f"{server_url}/v1", api_key="unused", model="embedded", max_tokens=40, temperature=0,
        max_retries=0, use_responses_api=True,
    )  # fmt: skip
    pet = llm.with_structured_output(Pet, method="json_schema").invoke(ASK)
    assert isinstance(pet, Pet)


def test_pydantic_ai_native_output_through_the_responses_api(server_url: str) -> None:
    model = OpenAIResponsesModel("embedded", provider=OpenAIProvider(base_url=f"{server_url}/v1", api_key="unused"))
    agent = Agent(model, output_type=NativeOutput(OwnedPet))
    result = agent.run_sync("A pet and its owner.", model_settings={"max_tokens": 80, "temperature": 0})
    assert isinstance(result.output, OwnedPet)


def test_langchain_bind_tools_through_the_responses_api(server_url: str) -> None:
    llm = ChatOpenAI(
        base_url=f"{server_url}/v1", api_key="unused", model="embedded", max_tokens=60, temperature=0,
        max_retries=0, use_responses_api=True,
    )  # fmt: skip
    (call,) = llm.bind_tools([Pet], tool_choice="Pet").invoke(ASK).tool_calls
    assert call["name"] == "Pet" and call["id"].startswith("call_")
    Pet.model_validate(call["args"])


def test_pydantic_ai_tool_output_through_the_responses_api(server_url: str) -> None:
    """pydantic-ai's default output: a `final_result` function tool the model must call."""
    model = OpenAIResponsesModel("embedded", provider=OpenAIProvider(base_url=f"{server_url}/v1", api_key="unused"))
    result = Agent(model, output_type=Pet).run_sync(ASK, model_settings={"max_tokens": 60, "temperature": 0})
    assert isinstance(result.output, Pet)
    assert [part.tool_name for part in result.all_messages()[1].parts] == ["final_result"]


def test_openai_agents_sdk_runs_a_function_tool_and_answers_with_its_output(server_url: str) -> None:
    """The Agents SDK on the Responses API: the model calls the tool, the SDK runs it and sends its output back."""
    agents.set_tracing_disabled(True)
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"18 C and sunny in {city}"

    async def run() -> tuple[agents.RunResult, agents.RunResult, list[str]]:
        client = openai.AsyncOpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0, timeout=120)
        agent = agents.Agent(
            name="weather",
            instructions="Answer with the tools.",
            tools=[get_weather],
            model=agents.OpenAIResponsesModel(model="embedded", openai_client=client),
            model_settings=agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=60),
            tool_use_behavior="stop_on_first_tool",
        )
        called = await agents.Runner.run(agent, "What's the weather in Paris?")
        # the run's items (the call and its output) go back as the next run's input; now the model answers
        answering = agent.clone(
            model_settings=agents.ModelSettings(tool_choice="none", temperature=0, max_tokens=30),
            tool_use_behavior="run_llm_again",
        )
        answered = await agents.Runner.run(answering, called.to_input_list())
        streamed = agents.Runner.run_streamed(agent, "And in Rome?")
        kinds = [event.type async for event in streamed.stream_events()]
        return called, answered, [*kinds, str(streamed.final_output)]

    called, answered, streamed = asyncio.run(run())
    assert called.final_output == f"18 C and sunny in {asked[0]}" and asked[0]
    kinds = [item["type"] for item in called.to_input_list()[1:]]
    assert kinds == ["function_call", "function_call_output"]
    assert isinstance(answered.final_output, str) and answered.final_output
    assert "run_item_stream_event" in streamed and streamed[-1] == f"18 C and sunny in {asked[1]}"


def test_pydantic_ai_nested_output_model(server_url: str) -> None:
    model = OpenAIChatModel("embedded", provider=OpenAIProvider(base_url=f"{server_url}/v1", api_key="unused"))
    agent = Agent(model, output_type=OwnedPet)
    result = agent.run_sync("A pet and its owner.", model_settings={"max_tokens": 80, "temperature": 0})
    assert isinstance(result.output, OwnedPet)
    OwnedPet.model_validate(result.output.model_dump())


def test_huggingface_hub_chat_completion_with_a_bare_string_tool_choice(
    server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the suite is offline; ours is local
    client = InferenceClient(base_url=server_url, timeout=120)
    tools = [{"type": "function", "function": {"name": "describe_pet", "parameters": PET_SCHEMA}}]
    output = client.chat_completion(  # logit_bias typed as TGI's spec types it: a list, unused there and here
        messages=[{"role": "user", "content": ASK}],
        tools=tools,
        tool_choice="describe_pet",
        max_tokens=30,
        logit_bias=[0.5],
    )
    (call,) = output.choices[0].message.tool_calls
    arguments = call.function.arguments
    Pet.model_validate(json.loads(arguments) if isinstance(arguments, str) else arguments)

    # its typed forms, as TGI's spec writes them: a tool's `arguments` schema, an object tool_choice without
    # `type`, and the call just answered sent back as a JSON object
    typed = [{"type": "function", "function": {"name": "describe_pet", "arguments": PET_SCHEMA}}]
    named = ChatCompletionInputToolChoiceClass(function=ChatCompletionInputFunctionName(name="describe_pet"))
    history = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "describe_pet", "arguments": json.loads(arguments) if isinstance(arguments, str) else arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Noted."},
        {"role": "user", "content": ASK},
    ]  # fmt: skip
    again = client.chat_completion(messages=history, tools=typed, tool_choice=named, max_tokens=30)
    (call,) = again.choices[0].message.tool_calls
    assert call.function.name == "describe_pet"


def test_a_chat_error_raises_the_server_s_message_in_each_client(
    server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """huggingface_hub's clients take an error's `error` as their message (TGI's string: OpenAI's object came out as
    `{'message': ...}`), refused at once or after the stream started; OpenAI's SDK takes `error.message`. The mask
    writes `[1, 1]`, whose end the EOS gate refuses (uniqueItems), after the stream started. Greedy: sampled (the
    clients' default temperature is 1), a CI run once spent the 12 tokens before the end and got no error."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the suite is offline; ours is local
    schema = {"type": "array", "items": {"const": 1}, "minItems": 2, "maxItems": 2, "uniqueItems": True}
    ask = [{"role": "user", "content": "Two ones."}]
    hub = InferenceClient(base_url=server_url, timeout=120)
    with pytest.raises(huggingface_hub.errors.BadRequestError) as refused:
        hub.chat_completion(ask, max_tokens=2, response_format={"type": "regex", "value": "(("})
    assert str(refused.value).endswith(
        "\ninvalid regex at position 1: unclosed group (the engines read Rust regex syntax)"
    )
    assert refused.value.response.json()["error_type"] == "validation"  # TGI's word for a refused request
    chunks = hub.chat_completion(
        ask, max_tokens=12, temperature=0, stream=True, response_format={"type": "json", "value": schema}
    )
    with pytest.raises(huggingface_hub.errors.GenerationError) as hub_failed:
        for _ in chunks:
            pass
    assert str(hub_failed.value).startswith("the output breaks the schema (schema violation at (root): [1, 1]")
    grammar = {"type": "json", "value": schema}
    body = {"inputs": "Two ones: ", "parameters": {"max_new_tokens": 12, "grammar": grammar}}
    failed = httpx.post(f"{server_url}/generate", json=body, timeout=120)
    assert failed.status_code == 424 and failed.json()["error_type"] == "generation"  # TGI's Generation Error (422)
    validate(failed.json(), "ErrorResponse")
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    response_format = {"type": "json_schema", "json_schema": {"name": "ones", "schema": schema}}
    stream = client.chat.completions.create(
        model="embedded", messages=ask, max_tokens=12, temperature=0, stream=True, response_format=response_format
    )
    with pytest.raises(openai.APIError) as openai_failed:
        for _ in stream:
            pass
    assert openai_failed.value.message == str(hub_failed.value)
