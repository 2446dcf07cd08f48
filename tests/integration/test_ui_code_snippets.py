"""The Code tab reproduces a turn it has no result for: a stopped one, or none yet (the kind's example)."""

from __future__ import annotations

import json
import shlex

from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.types import ChatMessage, GenerateParameters
from playground.ui import controls
from playground.ui.state import ChatState, Form, LastRequest, UISettings


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
    prompt = _generate_body(code["curl_generate"])["inputs"]
    assert prompt == engine.render_prompt(inputs, GenerateParameters()) and "<|im_start|>user" in prompt
    chat = json.loads(shlex.split(code["curl_chat"].replace("\\\n", " "))[-1])
    assert [m["content"] for m in chat["messages"]] == ["Write a long story about a dragon."]
    fresh = controls.code_snippets(registry, form, ChatState(), UISettings())
    assert _generate_body(fresh["curl_generate"])["inputs"].startswith("<|im_start|>system")
