"""The Code tab reproduces a turn: a stopped one, none yet (the kind's example), a thinking model's, a tools turn."""

from __future__ import annotations

import json
import re
import shlex

from playground.decoding.engine import Engine
from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.types import ChatMessage, GenerateParameters
from playground.ui import controls, handlers, snippets
from playground.ui.state import ChatState, Form, LastRequest, UISettings
from tests.snippet_run import post_like_curl, run_python

CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather.", "parameters": CITY}}]


def _generate_body(code: str) -> dict:
    words = shlex.split(code.replace("\\\n", " "), comments=True)
    return json.loads(words[words.index("-d") + 1])


def test_the_generate_snippet_of_a_stopped_turn_is_its_templated_conversation(engine) -> None:
    """After a Stop (no result) the snippets fell back to the example: "Hello!" raw on /generate, and the
    stopped conversation plus a "Hello!" turn on the chat route."""
    registry = Registry([LocalProvider([engine])])
    form = Form(model=registry.default_model)
    inputs = [ChatMessage(role="user", content="Write a long story about a dragon.")]
    stopped = ChatState(request=LastRequest(model=form.model, inputs=inputs, params=GenerateParameters()))
    code = controls.code_snippets(registry, form, stopped, UISettings())
    assert "PLAYGROUND_API_KEY" not in code["openai"]
    keyed = controls.code_snippets(registry, form, stopped, UISettings(keyed=True))
    assert 'Authorization: Bearer $PLAYGROUND_API_KEY"' in keyed["curl_chat"] and "'k'" not in keyed["openai"]
    prompt = _generate_body(code["curl_generate"])["inputs"]
    assert prompt == engine.render_prompt(inputs, GenerateParameters()) and "<|im_start|>user" in prompt
    chat = json.loads(shlex.split(code["curl_chat"].replace("\\\n", " "))[-1])
    assert [m["content"] for m in chat["messages"]] == ["Write a long story about a dragon."]
    fresh = controls.code_snippets(registry, form, ChatState(), UISettings())
    assert _generate_body(fresh["curl_generate"])["inputs"].startswith("<|im_start|>system")


def _turn(registry: Registry, form: Form, text: str) -> ChatState:
    state = ChatState()
    final = list(handlers.chat(registry, form, state, text))[-1]
    assert final.error == "", final.error
    return state


def test_a_thinking_turn_s_generate_snippet_opens_the_reasoning_the_chat_turn_forced(
    thinking_model, thinking_url: str
) -> None:
    """A Qwen3-style template leaves `<think>` to the model, and a chat turn forces it; /generate got the bare
    template, so its prompt said no reasoning was open and the constraint bound the first token."""
    registry = Registry([LocalProvider([Engine(thinking_model)])])
    form = Form(
        model=registry.default_model, kind="regex", constraint_text="(yes|no)", max_new_tokens=12,
        max_reasoning_tokens=4,
    )  # fmt: skip
    state = _turn(registry, form, "Is the sky blue?")
    best = state.result.best
    assert best.tokens[0].forced and best.tokens[0].segment == "reasoning"
    code = controls.code_snippets(registry, form, state, UISettings(base_url=thinking_url))
    assert "max_reasoning_tokens is 1 less here" in code["curl_generate"]  # the turn's budget counted `<think>`
    generated = post_like_curl(code["curl_generate"])
    assert best.tokens[0].text + generated["generated_text"] == best.generated_text
    assert generated["details"]["reasoning"]["answer_token"] == best.reasoning.answer_token - 1


def _calls_in_envelopes(text: str) -> list[dict]:
    return [json.loads(found) for found in re.findall(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", text, re.S)]


def _calls_answered(body: dict) -> list[dict]:
    calls = body["choices"][0]["message"]["tool_calls"]
    return [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])} for c in calls]


def test_the_tools_kind_s_chat_snippets_send_the_tools_where_the_template_renders_them(
    thinking_model, thinking_url: str
) -> None:
    """On a template with its own envelope the chat snippets sent neither the tools (the template never described
    them) nor the envelope's constraint: a plain JSON schema, which the server answered as text."""
    registry = Registry([LocalProvider([Engine(thinking_model)])])
    spec = json.dumps({"tools": TOOLS, "tool_choice": "required"})
    form = Form(
        model=registry.default_model, kind="tools", constraint_text=spec, max_new_tokens=60, max_reasoning_tokens=4
    )
    state = _turn(registry, form, "Weather?")
    shown = _calls_in_envelopes(state.result.best.answer)
    assert shown and shown[0]["name"] == "get_weather"
    code = controls.code_snippets(registry, form, state, UISettings(base_url=thinking_url))
    body = json.loads(shlex.split(code["curl_chat"].replace("\\\n", " "))[-1])
    assert body["tools"] == TOOLS and body["tool_choice"] == "required"
    assert not {"response_format", "structured_outputs"} & set(body)
    assert _calls_answered(post_like_curl(code["curl_chat"])) == shown
    assert "get_weather" in run_python(code["openai"])
    assert code["outlines"] == snippets.OUTLINES_NO_TOOLS


def test_the_tools_kind_s_chat_snippets_send_the_conversation_before_the_ui_described_the_tools(
    engine, server_url: str
) -> None:
    """Without an envelope the UI describes the tools in the system prompt; the chat snippets send the tools and
    the typed conversation, and the server describes them the same way: the same call comes back as tool_calls."""
    registry = Registry([LocalProvider([engine])])
    form = Form(
        model=registry.default_model, kind="tools", max_new_tokens=40, system_prompt="Be brief.",
        constraint_text=json.dumps({"tools": TOOLS, "tool_choice": "required"}),
    )  # fmt: skip
    state = _turn(registry, form, "Weather in Oslo?")
    code = controls.code_snippets(registry, form, state, UISettings(base_url=server_url))
    body = json.loads(shlex.split(code["curl_chat"].replace("\\\n", " "))[-1])
    assert [m["content"] for m in body["messages"]] == ["Be brief.", "Weather in Oslo?"] and body["tools"] == TOOLS
    assert _calls_answered(post_like_curl(code["curl_chat"])) == [json.loads(state.result.best.answer)]


def test_a_sampled_turn_with_a_blank_seed_box_gets_the_seed_it_drew(engine) -> None:
    """top_k samples even with do_sample off (TGI's rule); the snippets sent no seed, so each run drew anew."""
    registry = Registry([LocalProvider([engine])])
    form = Form(model=registry.default_model, top_k=5, max_new_tokens=6)
    state = _turn(registry, form, "Name a city.")
    drawn = state.result.best.seed
    assert drawn is not None
    code = controls.code_snippets(registry, form, state, UISettings())
    assert _generate_body(code["curl_generate"])["parameters"]["seed"] == drawn
    assert json.loads(shlex.split(code["curl_chat"].replace("\\\n", " "))[-1])["seed"] == drawn
    greedy = controls.code_snippets(registry, form.model_copy(update={"top_k": 0}), state, UISettings())
    assert "seed" not in _generate_body(greedy["curl_generate"])["parameters"]
