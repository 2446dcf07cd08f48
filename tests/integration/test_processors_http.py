"""A plugin's processor over HTTP, loaded by its entry point (no flag), used by both bodies.

`--custom-modules` through a live server is shown by test_admission.py and test_health_stall.py (their gate plugin).
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.support import REPO_ROOT

PLUGIN_PATH = str(REPO_ROOT / "tests" / "plugins")
PROMPT = "Count from 1 to 20 with digits: 1, 2, 3,"


@pytest.fixture(scope="module")
def plugin_server(start_module_server) -> str:
    """The plugin is installed (its dist-info on the path), and no flag names it."""
    return start_module_server("--no-ui", env={"PYTHONPATH": PLUGIN_PATH})


def test_the_entry_point_loads_without_the_flag(plugin_server):
    names = {p["name"] for p in httpx.get(f"{plugin_server}/info").json()["processors"]}
    assert {"no_digits", "ban_strings", "max_whitespace"} <= names


def test_generate_with_the_plugin_has_no_digits(plugin_server):
    body = {"inputs": PROMPT, "parameters": {"max_new_tokens": 20}}
    plain = httpx.post(f"{plugin_server}/generate", json=body, timeout=120).json()["generated_text"]
    assert re.search(r"\d", plain), plain  # the model does write digits here
    body["parameters"]["logits_processors"] = [{"name": "no_digits"}]
    text = httpx.post(f"{plugin_server}/generate", json=body, timeout=120).json()["generated_text"]
    assert text and not re.search(r"\d", text), text


def test_chat_body_with_the_plugin_and_a_builtin(plugin_server):
    body = {
        "messages": [{"role": "user", "content": "Write the numbers from one to five with digits."}],
        "max_tokens": 20,
        "logits_processors": [{"name": "no_digits"}, {"name": "max_whitespace", "params": ["1"]}],
    }
    answer = httpx.post(f"{plugin_server}/v1/chat/completions", json=body, timeout=120).json()
    text = answer["choices"][0]["message"]["content"]
    assert text and not re.search(r"\d", text) and not re.search(r"\s{2,}", text), text


def test_bad_params_and_unknown_names_are_422(plugin_server):
    bad = httpx.post(
        f"{plugin_server}/generate",
        json={"inputs": "hi", "parameters": {"logits_processors": [{"name": "no_digits", "params": ["x"]}]}},
    )
    assert bad.status_code == 422 and "no_digits takes no parameters" in bad.json()["error"]
    unknown = httpx.post(
        f"{plugin_server}/generate", json={"inputs": "hi", "parameters": {"logits_processors": [{"name": "nope"}]}}
    )
    assert unknown.status_code == 422 and "nope" in unknown.json()["error"] and "no_digits" in unknown.json()["error"]
