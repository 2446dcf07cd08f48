"""Tool calls in a chat template's own envelope, on the tiny thinking model (Qwen3-style template, random weights):
the template describes the tools, the constraint writes `<tool_call>` envelopes, and the calls come back as
OpenAI's `tool_calls` with a verdict per call. Its text is noise: these tests read mechanics only."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}
ZONE = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}
SCHEMAS = {"get_weather": CITY, "get_time": ZONE}
TOOLS = [{"type": "function", "function": {"name": n, "description": n, "parameters": s}} for n, s in SCHEMAS.items()]
ASK = [{"role": "user", "content": "Weather in Paris, and the time?"}]
# The template closes the reasoning in the prompt: the turn is the calls alone (random weights might reason on).
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture(scope="module")
def client(thinking_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{thinking_url}/v1", api_key="unused", timeout=300, max_retries=0)


@pytest.fixture(scope="module")
def model(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def _parallel_calls(client: openai.OpenAI, model: str, **extra):
    """Both tools, in parallel: min_tokens keeps the end of sequence away until a second envelope has been written."""
    return client.chat.completions.create(
        model=model,
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        parallel_tool_calls=True,
        max_tokens=120,
        extra_body={"min_tokens": 40, **NO_THINKING},
        seed=1,
        **extra,
    )


def _check_calls(calls, verdicts: list[dict]) -> None:
    """Each call is one of the tools with arguments its schema accepts, and has a valid verdict of its own."""
    assert len(verdicts) == len(calls)
    for call, verdict in zip(calls, verdicts, strict=True):
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        assert verdict["valid"] is True and verdict["content"] == call.function.arguments
        assert verdict["begin"].startswith('<tool_call>\n{"name": "' + call.function.name)


def test_info_names_the_envelope_the_template_writes(thinking_url: str) -> None:
    info = httpx.get(f"{thinking_url}/info", timeout=60).json()
    assert info["tool_format"] == "hermes"


def test_a_named_call_comes_back_in_tool_calls_with_its_verdict(client: openai.OpenAI, model: str) -> None:
    choice = client.chat.completions.create(
        model=model,
        messages=ASK,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=40,
        seed=3,
        extra_body=NO_THINKING,
    ).choices[0]
    assert choice.finish_reason == "stop" and choice.model_extra["constraint_kind"] == "structural_tag"  # (named)
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_time" and call.id.startswith("call_")
    _check_calls([call], choice.model_extra["validation"]["segments"])


VERDICT = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}, "sunny": {"type": "boolean"}}}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_beside_a_response_format_auto_is_envelopes_or_an_answer_in_the_format(
    client: openai.OpenAI, model: str, seed: int
) -> None:
    """xgrammar's `or` of the envelopes and the format's json_schema: no free text; an answer without a call is
    JSON in the format, its objects closed (it was a 400)."""
    fmt = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT}}
    choice = client.chat.completions.create(
        model=model, messages=ASK, tools=TOOLS, response_format=fmt, max_tokens=60, seed=seed, extra_body=NO_THINKING
    ).choices[0]
    assert choice.model_extra["constraint_kind"] == "structural_tag"
    if choice.message.tool_calls:
        _check_calls(choice.message.tool_calls, choice.model_extra["validation"]["segments"])
    elif choice.finish_reason == "stop":
        answer = json.loads(choice.message.content)
        jsonschema.validate(answer, {**VERDICT, "additionalProperties": False})
        assert choice.model_extra["validation"]["valid"] is True


def test_parallel_calls_each_judged(client: openai.OpenAI, model: str) -> None:
    choice = _parallel_calls(client, model).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(choice.message.tool_calls) >= 2
    _check_calls(choice.message.tool_calls, choice.model_extra["validation"]["segments"])
    assert choice.model_extra["validation"]["valid"] is True


def test_streamed_calls_add_up_to_the_answer(client: openai.OpenAI, model: str) -> None:
    stream = _parallel_calls(client, model, stream=True)
    calls: dict[int, dict] = {}
    last = None
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"name": None, "arguments": ""})
            if delta.function.name:
                call["name"] = delta.function.name
            call["arguments"] += delta.function.arguments or ""
        if chunk.choices[0].finish_reason:
            last = chunk.choices[0]
    assert last is not None and last.finish_reason == "tool_calls"
    assert len(calls) >= 2
    segments = last.model_extra["validation"]["segments"]
    assert [c["arguments"] for c in calls.values()] == [s["content"] for s in segments]
    for call in calls.values():
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


def test_tool_results_go_back_through_the_template(client: openai.OpenAI, model: str) -> None:
    """A past call and its result, rendered by the template (`<tool_response>`), then the next answer."""
    past = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [past]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    choice = client.chat.completions.create(
        model=model,
        messages=messages,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=40,
        seed=2,
        extra_body=NO_THINKING,
    ).choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1


def test_the_prompt_is_the_templates_own(thinking_model) -> None:
    """The tools and the past call are written by the template, not by the generic instructions."""
    from playground.decoding import chat_template
    from playground.types import ChatMessage

    past = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    messages = [
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", content=None, tool_calls=[past]),
        ChatMessage(role="tool", content="sunny", tool_call_id="c"),
    ]
    tokenizer = thinking_model.tokenizer
    prompt = chat_template.render(tokenizer, [chat_template.message(m) for m in messages], True, None, TOOLS)
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in prompt
    assert "<tool_response>\nsunny\n</tool_response>" in prompt
    assert chat_template.tool_format(tokenizer) == "hermes"


def test_the_ui_tools_kind_shows_each_call_in_the_templates_envelope(thinking_model) -> None:
    """The UI's tools kind on a template with an envelope: no generic instructions, the calls judged one by one."""
    from playground.decoding.engine import Engine
    from playground.providers.local import LocalProvider
    from playground.providers.registry import Registry
    from playground.ui import handlers
    from playground.ui.state import ChatState, Form

    registry = Registry([LocalProvider([Engine(thinking_model)])])
    spec = json.dumps({"tools": TOOLS, "tool_choice": "required"})
    # the model thinks first (the UI cannot turn that off): a short budget closes its reasoning, then the calls
    form = Form(
        model=registry.default_model,
        kind="tools",
        constraint_text=spec,
        max_new_tokens=60,
        max_reasoning_tokens=4,
        seed=1,
    )
    state = ChatState()
    final = list(handlers.chat(registry, form, state, "Weather?"))[-1]
    assert final.error == "" and state.result.constraint_kind == "structural_tag"
    assert "You can call these functions" not in str(state.request.inputs)
    (verdict,) = state.result.best.validation.segments
    assert verdict.valid is True and verdict.begin.startswith("<tool_call>")
    assert '<li class="pg-segment" data-valid="valid">' in final.verdict and "&lt;tool_call&gt;" in final.verdict
    free, bound = handlers.compare(registry, form, ChatState(), "Weather?")
    assert "invalid (structural_tag)" in free or "valid (structural_tag)" in free  # judged by the envelope too
    assert 'data-valid="valid"' in bound and "pg-segment" in bound


def test_tool_choice_none_shows_the_template_its_tools_and_answers_in_text(client: openai.OpenAI, model: str) -> None:
    """OpenAI shows the model its tools under `none`, and vLLM renders them by default: they were left out of the
    prompt (the same prompt_tokens as with no tools)."""
    ask = {"model": model, "messages": ASK, "max_tokens": 4, "temperature": 0, "extra_body": NO_THINKING}
    bare = client.chat.completions.create(**ask)
    none = client.chat.completions.create(**ask, tools=TOOLS, tool_choice="none")
    assert none.usage.prompt_tokens > bare.usage.prompt_tokens + 40  # the tools' descriptions
    assert none.choices[0].message.tool_calls is None and none.choices[0].finish_reason in ("stop", "length")
