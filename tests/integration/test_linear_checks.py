"""Through the live server: checks that once froze it stay bounded, and regexes and grammars read as the engines do."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

# A liveness bound for a request that once took minutes, not a speed assert.
ANSWERS_WITHIN_S = 120


def _generate(url: str, inputs: str, **parameters: Any) -> httpx.Response:
    return httpx.post(f"{url}/generate", json={"inputs": inputs, "parameters": parameters}, timeout=ANSWERS_WITHIN_S)


def _health_answers_while(url: str, inputs: str, **parameters: Any) -> dict:
    """Run the request in a thread; /health must answer while it runs; returns the request's body."""
    answer: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: answer.append(_generate(url, inputs, **parameters)), daemon=True)
    worker.start()
    health = httpx.get(f"{url}/health", timeout=ANSWERS_WITHIN_S)
    worker.join(ANSWERS_WITHIN_S)
    assert health.status_code == 200
    assert answer, f"/generate still running after {ANSWERS_WITHIN_S} s"
    assert answer[0].status_code == 200, answer[0].text
    return answer[0].json()


def test_a_backtracking_regex_with_a_banned_ending_does_not_freeze_the_server(server_url):
    body = _health_answers_while(
        server_url,
        "aaaaaaaaaaaaaaaa",
        max_new_tokens=29,
        grammar={"type": "regex", "value": "(a+)+b"},
        logits_processors=[{"name": "ban_strings", "params": ["b"]}],
    )
    assert "b" not in body["generated_text"]
    assert body["validation"]["valid"] is False


def test_an_ambiguous_grammar_gets_a_bounded_verdict(server_url):
    body = _health_answers_while(
        server_url, "Say a: ", max_new_tokens=80, grammar={"type": "grammar", "value": 'start: x\nx: x x | x x x | "a"'}
    )
    assert body["validation"]["valid"] in (True, None)
    assert set(body["generated_text"]) <= {"a"}


def test_a_long_banned_string_is_refused_by_name(server_url):
    processors = [{"name": "ban_strings", "params": ["x" * 2000]}]
    response = _generate(server_url, "Hi", max_new_tokens=2, logits_processors=processors)
    assert response.status_code == 422, response.text
    assert "at most 1024 bytes" in response.json()["error"]


def test_a_unicode_class_regex_decodes_and_its_verdict_agrees(server_url):
    response = _generate(server_url, "A word: ", max_new_tokens=8, grammar={"type": "regex", "value": r"\p{L}{3,6}"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["validation"]["valid"] is True
    assert 3 <= len(body["generated_text"]) <= 6 and body["generated_text"].isalpha()


@pytest.mark.parametrize("engine", ["auto", "llguidance", "xgrammar"])
def test_a_gbnf_grammar_decodes_with_a_verdict(server_url, engine):
    grammar = {"type": "grammar", "value": 'root ::= "yes" | "no"'}
    response = _generate(server_url, "Yes or no? ", max_new_tokens=4, grammar=grammar, constraint_engine=engine)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["generated_text"] in ("yes", "no")
    assert body["validation"]["valid"] is True


def test_xgrammar_refuses_a_lark_grammar_by_name(server_url):
    grammar = {"type": "grammar", "value": 'start: "yes" | "no"'}
    response = _generate(server_url, "Yes or no? ", max_new_tokens=4, grammar=grammar, constraint_engine="xgrammar")
    assert response.status_code == 422, response.text
    assert "xgrammar reads GBNF grammars" in response.json()["error"]
