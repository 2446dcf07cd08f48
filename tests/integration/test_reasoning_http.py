"""A thinking model served from a local folder (no flag, no trust_remote_code): reasoning on the wire as vLLM
puts it (`reasoning`, `reasoning_content`, streamed before the content), reasoning_tokens in usage, and TGI's
/generate keeping the raw text and saying where the constraint engaged."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.spec import validate

CHAT = [{"role": "user", "content": "Is the sky blue?"}]
YES_NO = {"choice": ["yes", "no"]}


@pytest.fixture(scope="module")
def client(thinking_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{thinking_url}/v1", api_key="unused", timeout=120, max_retries=0)


def ask(client: openai.OpenAI, stream: bool = False, **extra):
    """The yes/no question, greedy; streamed (usage in the last chunk) when asked."""
    streamed = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    return client.chat.completions.create(
        model="tgi",
        messages=CHAT,
        temperature=0,
        max_tokens=24,
        extra_body={"structured_outputs": YES_NO, **extra},
        **streamed,
    )


def test_the_answer_carries_the_reasoning_apart_and_usage_counts_it(client: openai.OpenAI) -> None:
    answer = ask(client, max_reasoning_tokens=5)
    message = answer.choices[0].message
    assert message.content in ("yes", "no")  # the constraint judged and shaped the answer only
    assert message.reasoning and message.reasoning == message.reasoning_content
    assert "<think>" not in message.reasoning and "</think>" not in message.reasoning
    assert answer.choices[0].validation["valid"] is True
    assert answer.usage.completion_tokens_details.reasoning_tokens == 6  # <think> (counted), four of thought, </think>
    effort = ask(client, reasoning_effort="minimal").choices[0].message  # a budget of 0: the end comes at once
    assert effort.reasoning == "" and effort.content in ("yes", "no")


def test_streamed_reasoning_comes_before_the_content_and_adds_up_to_the_answer(client: openai.OpenAI) -> None:
    whole = ask(client, max_reasoning_tokens=5).choices[0].message
    stream = ask(client, stream=True, max_reasoning_tokens=5)
    kinds, reasoning, content, usage = [], "", "", None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            delta = choice.delta.model_extra or {}
            if delta.get("reasoning"):
                assert delta["reasoning_content"] == delta["reasoning"]
                reasoning += delta["reasoning"]
                kinds.append("reasoning")
            if choice.delta.content:
                content += choice.delta.content
                kinds.append("content")
    assert kinds and kinds == sorted(kinds, key=lambda k: k == "content")  # all reasoning first
    assert (reasoning, content) == (whole.reasoning, whole.content)
    assert usage.completion_tokens_details.reasoning_tokens == 6


def test_enable_thinking_false_answers_without_reasoning(client: openai.OpenAI) -> None:
    message = ask(client, chat_template_kwargs={"enable_thinking": False}).choices[0].message
    assert message.content in ("yes", "no") and getattr(message, "reasoning", None) is None


def test_tgi_generate_keeps_the_raw_text_and_says_where_the_constraint_engaged(thinking_url: str) -> None:
    body = {
        "inputs": "Is the sky blue?\n<think>",
        "parameters": {"grammar": {"type": "regex", "value": "(yes|no)"}, "max_new_tokens": 20, "details": True},
    }
    body["parameters"]["max_reasoning_tokens"] = 4
    answer = httpx.post(f"{thinking_url}/generate", json=body, timeout=120).json()
    validate(answer, "GenerateResponse")  # our extensions ride in fields TGI's schema leaves open
    span, tokens = answer["details"]["reasoning"], answer["details"]["tokens"]
    assert span["ended_by"] == "budget" and span["answer_token"] == 5
    assert [t["segment"] for t in tokens[:5]] == ["reasoning"] * 5 and tokens[4]["text"] == "</think>"
    assert tokens[4]["forced"] and all(t["segment"] == "answer" for t in tokens[5:])
    raw = answer["generated_text"]
    assert raw.endswith("</think>" + raw[span["answer_char"] :]) and raw[span["answer_char"] :] in ("yes", "no")
    assert answer["validation"]["valid"] is True


def test_a_stop_sequence_inside_the_reasoning_ends_it_there_streamed_or_not(client: openai.OpenAI) -> None:
    """As vLLM stops on the whole output: the reasoning is cut before the stop, as content would be."""
    free = {"model": "tgi", "messages": CHAT, "temperature": 0, "max_tokens": 16}
    thought = client.chat.completions.create(**free).choices[0].message.model_extra["reasoning"]
    assert len(thought) > 8
    stop = thought[4:7]
    cut = thought[: thought.find(stop)]
    answer = client.chat.completions.create(**free, stop=[stop]).choices[0]
    assert answer.finish_reason == "stop" and not answer.message.content
    assert answer.message.model_extra["reasoning"] == cut
    streamed = ""
    for chunk in client.chat.completions.create(**free, stop=[stop], stream=True):
        for choice in chunk.choices:
            streamed += (choice.delta.model_extra or {}).get("reasoning") or ""
    assert streamed == cut
