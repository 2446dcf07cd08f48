"""The Code tab's snippets, run against the live server: each one gets an answer that obeys the constraint."""

from __future__ import annotations

import re

import pytest

from playground.types import ChatMessage, GenerateParameters, GrammarType
from playground.ui import snippets
from tests.snippet_run import answer_of, post_like_curl, run_python

DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"  # \d admits any Unicode digit
INPUTS = [ChatMessage(role="system", content="Answer briefly."), ChatMessage(role="user", content="Give me a date.")]
PROMPT = "<|im_start|>user\nGive me a date.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def code(server_url: str) -> dict[str, str]:
    params = GenerateParameters(
        max_new_tokens=24, seed=1, grammar=GrammarType(type="regex", value=DATE), top_n_tokens=2
    )
    return snippets.snippets(server_url, "embedded", INPUTS, PROMPT, params)


def test_curl_generate_snippet(code: dict[str, str]) -> None:
    body = post_like_curl(code["curl_generate"])
    assert re.fullmatch(DATE, body["generated_text"]) and body["details"]["tokens"]


def test_curl_chat_snippet(code: dict[str, str]) -> None:
    body = post_like_curl(code["curl_chat"])
    assert re.fullmatch(DATE, body["choices"][0]["message"]["content"])
    assert body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]


@pytest.mark.parametrize("name", ["openai", "outlines"])
def test_python_chat_snippets(code: dict[str, str], name: str) -> None:
    assert re.fullmatch(DATE, run_python(code[name]).strip())


def test_huggingface_hub_snippet(code: dict[str, str]) -> None:
    text, details = run_python(code["huggingface_hub"]).strip().splitlines()
    assert re.fullmatch(DATE, text) and details.startswith(("eos_token", "length"))


@pytest.fixture(scope="module")
def greedy_code(server_url: str) -> dict[str, str]:
    """A greedy, unconstrained turn without a seed: only greedy decoding can repeat its answer."""
    params = GenerateParameters(max_new_tokens=12, do_sample=False)
    inputs = [
        ChatMessage(role="system", content="Answer briefly."),
        ChatMessage(role="user", content="Name three colours."),
    ]
    prompt = (
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n"
        "<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n"
    )
    return snippets.snippets(server_url, "embedded", inputs, prompt, params)


@pytest.mark.parametrize("name", ["curl_chat", "openai", "huggingface_hub", "outlines"])
def test_every_snippet_repeats_a_greedy_turn(greedy_code: dict[str, str], name: str) -> None:
    expected = answer_of("curl_generate", greedy_code["curl_generate"])
    assert len(expected) > 10
    assert answer_of(name, greedy_code[name]) == expected
