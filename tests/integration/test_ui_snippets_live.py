"""The Code tab's snippets, run against the live server: each one gets an answer that obeys the constraint."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import httpx
import pytest

from playground.types import ChatMessage, GenerateParameters, GrammarType
from playground.ui import snippets
from tests.support import child_env

DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"  # \d admits any Unicode digit
INPUTS = [ChatMessage(role="system", content="Answer briefly."), ChatMessage(role="user", content="Give me a date.")]
PROMPT = "<|im_start|>user\nGive me a date.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def code(server_url: str) -> dict[str, str]:
    params = GenerateParameters(
        max_new_tokens=24, seed=1, grammar=GrammarType(type="regex", value=DATE), top_n_tokens=2
    )
    return snippets.snippets(server_url, "embedded", INPUTS, PROMPT, params)


def post_like_curl(command: str) -> dict:
    """Send what the curl command sends (parsed as a shell would), with httpx."""
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:2] == ["curl", "-s"] and words[3:5] == ["-H", "Content-Type: application/json"]
    response = httpx.post(
        words[2], content=words[words.index("-d") + 1], headers={"Content-Type": "application/json"}, timeout=120
    )
    assert response.status_code == 200, response.text
    return response.json()


def run_python(code: str) -> str:
    """Run a snippet as a user would; huggingface_hub refuses even 127.0.0.1 in offline mode."""
    env = child_env({"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


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
