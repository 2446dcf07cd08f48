"""Run the Code tab's snippets as a user would: curl commands (sent with httpx) and Python scripts."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Mapping

import httpx

from tests.support import child_env


def post_like_curl(command: str, env: Mapping[str, str] | None = None) -> dict:
    """Send what the curl command sends (parsed as a shell would, expanding `env`'s variables), with httpx."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    assert words[:2] == ["curl", "-s"] and words[3:5] == ["-H", "Content-Type: application/json"]
    headers = dict(words[i + 1].split(": ", 1) for i, word in enumerate(words) if word == "-H")
    for name, value in headers.items():
        for variable, setting in (env or {}).items():
            value = value.replace(f"${variable}", setting)
        assert "$" not in value, f"{name}: {value} needs a variable the shell would not have"
        headers[name] = value
    response = httpx.post(words[2], content=words[words.index("-d") + 1], headers=headers, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def run_python(code: str, env: Mapping[str, str] | None = None) -> str:
    """Run a snippet as a user would (with `env` set); huggingface_hub refuses even 127.0.0.1 in offline mode."""
    env = child_env({"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None, **(env or {})})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def answer_of(name: str, code: str) -> str:
    """The answer text a snippet gets back (the first printed line for huggingface_hub's two lines)."""
    if name == "curl_generate":
        return post_like_curl(code)["generated_text"]
    if name == "curl_chat":
        return post_like_curl(code)["choices"][0]["message"]["content"]
    out = run_python(code)
    if name == "huggingface_hub":
        return out.rsplit("\n", 2)[0]
    return out.removesuffix("\n")
