"""vLLM's `structural_tag` response format on the embedded model: free text, with the JSON inside a ```json fence
constrained and judged on its own, through each engine that compiles it."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

POINT = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]}
FENCE = {
    "type": "structural_tag",
    "structures": [{"begin": "```json\n", "schema": POINT, "end": "\n```"}],
    "triggers": ["```json"],
}
ASK = [{"role": "user", "content": "Give a point as JSON in a ```json block."}]


@pytest.fixture(scope="module")
def client(server_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=300, max_retries=0)


@pytest.mark.parametrize("engine", ["llguidance", "xgrammar"])
def test_a_fence_segment_is_valid_json_with_free_text_before_it(client: openai.OpenAI, engine: str) -> None:
    """xgrammar's `format` form, stop after the first fence: the answer continues a free preamble that opens the
    fence (forced through the constraint), the JSON inside is the schema's, and the answer ends with the fence."""
    fmt = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["```json"],
            "tags": [{"begin": "```json\n", "content": {"type": "json_schema", "json_schema": POINT}, "end": "\n```"}],
            "stop_after_first": True,
        },
    }
    preamble = {"role": "assistant", "content": "Here is a point.\n```json\n"}
    choice = client.chat.completions.create(
        model="embedded",
        messages=[*ASK, preamble],
        response_format=fmt,
        max_tokens=60,
        seed=1,
        extra_body={"constraint_engine": engine, "continue_final_message": True, "add_generation_prompt": False},
    ).choices[0]
    extras = choice.model_extra
    assert extras["constraint_kind"] == "structural_tag" and extras["constraint_engine"] == engine
    (segment,) = extras["validation"]["segments"]
    jsonschema.validate(json.loads(segment["content"]), POINT)
    assert segment["valid"] is True and extras["validation"]["valid"] is True
    assert choice.message.content.endswith(segment["content"] + "\n```")


def test_the_legacy_form_streams_and_judges_every_segment(server_url: str) -> None:
    """vLLM's {structures, triggers}: no segment is required; whatever fences appear are judged one by one."""
    body = {"messages": ASK, "response_format": FENCE, "max_tokens": 40, "seed": 2, "stream": True}
    text, last = "", None
    with httpx.stream("POST", f"{server_url}/v1/chat/completions", json=body, timeout=300) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                choice = json.loads(line[6:])["choices"][0]
                text += choice["delta"].get("content") or ""
                last = choice if choice.get("finish_reason") else last
    assert last is not None and last["constraint_kind"] == "structural_tag"
    verdict = last["validation"]
    assert verdict["valid"] is True and verdict["segments"] == [s for s in verdict["segments"] if s["valid"]]
    assert text.count("```json") == len(verdict["segments"])


def test_tgi_grammar_and_structured_outputs_take_it_too(server_url: str) -> None:
    tag = {k: v for k, v in FENCE.items() if k != "type"}
    grammar = {"type": "structural_tag", "value": tag}
    params = {"max_new_tokens": 8, "grammar": grammar, "details": True}
    generated = httpx.post(f"{server_url}/generate", json={"inputs": "Point:", "parameters": params}, timeout=300)
    assert generated.status_code == 200 and "segments" in generated.json()["validation"]
    body = {"messages": ASK, "structured_outputs": {"structural_tag": json.dumps(tag)}, "max_tokens": 8}
    answer = httpx.post(f"{server_url}/v1/chat/completions", json=body, timeout=300).json()
    assert answer["choices"][0]["constraint_kind"] == "structural_tag"


@pytest.mark.parametrize(
    ("response_format", "engine", "words"),
    [
        ({"type": "structural_tag", "structures": [], "triggers": ["<a>"]}, "auto", "structures must list 1 to"),
        (
            {
                "type": "structural_tag",
                "structures": [{"begin": "<b>", "schema": {}, "end": "</b>"}],
                "triggers": ["<a>"],
            },
            "auto",
            "starts with none of the triggers",
        ),
        ({"type": "structural_tag", "format": {"type": "regex", "pattern": "a"}}, "auto", "format 'regex' is not"),
        (FENCE, "outlines_core", "outlines_core does not support structural_tag constraints"),
        ({"type": "structural_tag"}, "auto", "needs structures and triggers, or format"),
    ],
)
def test_bad_structural_tags_are_named(server_url: str, response_format: dict, engine: str, words: str) -> None:
    body = {"messages": ASK, "response_format": response_format, "max_tokens": 4, "constraint_engine": engine}
    response = httpx.post(f"{server_url}/v1/chat/completions", json=body, timeout=300)
    assert response.status_code in (400, 422), response.text
    assert words in json.dumps(response.json())


def test_check_and_inspect_take_a_structural_tag(server_url: str) -> None:
    """/check judges a text segment by segment; /inspect shows each engine's compiled form, or why it cannot."""
    grammar = {"type": "structural_tag", "value": {k: v for k, v in FENCE.items() if k != "type"}}
    text = 'A point: ```json\n{"x": 1, "y": "two"}\n```'
    checked = httpx.post(f"{server_url}/check", json={"grammar": grammar, "text": text}, timeout=300).json()
    assert checked["accepted"] is False and checked["validation"]["segments"][0]["valid"] is False
    engines = httpx.post(f"{server_url}/inspect", json={"grammar": grammar}, timeout=300).json()["engines"]
    by_name = {e["engine"]: e for e in engines}
    assert by_name["llguidance"]["compiled"] and "%json" in by_name["llguidance"]["compiled_form"]
    assert by_name["xgrammar"]["compiled"]
    assert "outlines_core does not read structural_tag" in by_name["outlines_core"]["error"]
