"""The Code tab's snippets carry the request exactly: bodies parse, Python compiles, constraints map right."""

from __future__ import annotations

import ast
import json
import shlex

from playground.types import ChatMessage, GenerateParameters, GrammarType, ProcessorSpec
from playground.ui import snippets

BASE = "http://127.0.0.1:7860"
INPUTS = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="It's a 'test'")]
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def curl_body(command: str) -> tuple[str, dict]:
    """(url, JSON body) of a curl snippet, parsed the way a shell would."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    return words[2], json.loads(words[words.index("-d") + 1])


def params(**kwargs) -> GenerateParameters:
    return GenerateParameters(max_new_tokens=20, details=True, **kwargs)


def test_generate_body_is_the_tgi_request() -> None:
    p = params(grammar=GrammarType(type="json", value=SCHEMA), seed=4, do_sample=True, top_n_tokens=3, stop=["\n\n"])
    url, body = curl_body(snippets.snippets(BASE, "m", INPUTS, "<prompt>", p)["curl_generate"])
    assert url == f"{BASE}/generate?model=m"
    assert body == {
        "inputs": "<prompt>",
        "parameters": {
            "details": True,
            "do_sample": True,
            "grammar": {"type": "json", "value": SCHEMA},
            "max_new_tokens": 20,
            "seed": 4,
            "stop": ["\n\n"],
            "top_n_tokens": 3,
        },
    }


def test_tgi_snippets_name_the_picked_model() -> None:
    """TGI's routes decode on the server's default model, and TGI's body names none: the /generate and
    huggingface_hub snippets ran another model than the turn's when the user had picked one."""
    code = snippets.snippets(BASE, "org/Model-1.5B", INPUTS, "<prompt>", params())
    assert curl_body(code["curl_generate"])[0] == f"{BASE}/generate?model=org/Model-1.5B"
    assert f"InferenceClient(base_url='{BASE}/?model=org/Model-1.5B')" in code["huggingface_hub"]


def test_chat_body_uses_response_format_for_schemas() -> None:
    url, body = curl_body(
        snippets.snippets(
            BASE, "m", INPUTS, "p", params(grammar=GrammarType(type="json", value=SCHEMA), top_n_tokens=2)
        )["curl_chat"]
    )
    assert url == f"{BASE}/v1/chat/completions"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "It's a 'test'"},
    ]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {**SCHEMA, "additionalProperties": False}, "strict": True},
    }
    assert body["logprobs"] is True and body["top_logprobs"] == 2 and body["max_tokens"] == 20


def test_chat_body_uses_structured_outputs_for_other_kinds() -> None:
    for grammar, expected in [
        (GrammarType(type="regex", value=r"\d+"), {"regex": r"\d+"}),
        (GrammarType(type="choice", value=["a", "b"]), {"choice": ["a", "b"]}),
        (GrammarType(type="grammar", value="start: /x/"), {"grammar": "start: /x/"}),
    ]:
        body = snippets.chat_body("m", INPUTS, params(grammar=grammar))
        assert body["structured_outputs"] == expected and "response_format" not in body


def test_processors_travel_in_the_body_and_extra_body() -> None:
    p = params(logits_processors=[ProcessorSpec(name="ban_strings", params=["x"])])
    code = snippets.snippets(BASE, "m", INPUTS, "p", p)
    assert curl_body(code["curl_chat"])[1]["logits_processors"] == [{"name": "ban_strings", "params": ["x"]}]
    assert "extra_body={'logits_processors': [{'name': 'ban_strings', 'params': ['x']}]}" in code["openai"]
    assert "logits_processors: not a text_generation argument" in code["huggingface_hub"]


def test_python_snippets_compile_and_name_the_constraint() -> None:
    cases = {
        "json": ("JsonSchema(", "response_format="),
        "regex": ("Regex(", "extra_body="),
        "choice": ("Choice(", "extra_body="),
        "grammar": ("CFG(", "extra_body="),
    }
    values = {"json": SCHEMA, "regex": r"\d+", "choice": ["a", "b"], "grammar": "start: /x/"}
    for kind, (outlines_type, openai_arg) in cases.items():
        code = snippets.snippets(BASE, "m", INPUTS, "p", params(grammar=GrammarType(type=kind, value=values[kind])))
        for name in ("openai", "huggingface_hub", "outlines"):
            ast.parse(code[name])
        assert outlines_type in code["outlines"] and "outlines.from_vllm" in code["outlines"]
        assert openai_arg in code["openai"] and f"base_url='{BASE}/v1'" in code["openai"]
        assert f"InferenceClient(base_url='{BASE}/?model=m')" in code["huggingface_hub"]


def _create_kwargs(code: str) -> dict:
    call = next(
        node
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "create"
    )
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}


def test_openai_snippet_arguments_evaluate_to_the_body() -> None:
    p = params(grammar=GrammarType(type="json", value=SCHEMA), temperature=0.5, seed=1)
    code = snippets.openai_snippet(BASE, snippets.chat_body("m", INPUTS, p))
    assert _create_kwargs(code) == snippets.chat_body("m", INPUTS, p)


def test_long_literals_wrap_one_item_per_line() -> None:
    text = snippets.py({"a": "x" * 50, "b": ["y" * 40, "z" * 40]})
    assert text.splitlines()[0] == "{" and ast.literal_eval(text) == {"a": "x" * 50, "b": ["y" * 40, "z" * 40]}


def test_min_p_travels_where_each_client_takes_it() -> None:
    code = snippets.snippets(BASE, "m", INPUTS, "p", params(min_p=0.1, temperature=0.7))
    assert curl_body(code["curl_chat"])[1]["min_p"] == 0.1
    assert curl_body(code["curl_generate"])[1]["parameters"]["min_p"] == 0.1
    assert "extra_body={'min_p': 0.1}" in code["openai"] and "temperature=0.7" in code["openai"]
    assert "min_p: not a text_generation argument" in code["huggingface_hub"]
    assert "extra_body={'min_p': 0.1}" in code["outlines"]
    for name in ("openai", "huggingface_hub", "outlines"):
        ast.parse(code[name])


def test_greedy_snippets_ask_for_temperature_zero() -> None:
    body = snippets.chat_body("m", INPUTS, params())
    assert body["temperature"] == 0.0  # our chat route, like OpenAI's, samples at temperature 1 when unset


def test_a_structural_tag_travels_as_vllm_takes_it() -> None:
    """Every snippet carries the segment constraint: response_format in chat bodies (Outlines has no type for it,
    so its call passes the same response_format), the grammar in TGI's body."""
    tag = {"structures": [{"begin": "<a>", "schema": SCHEMA, "end": "</a>"}], "triggers": ["<a>"]}
    code = snippets.snippets(BASE, "m", INPUTS, "p", params(grammar=GrammarType(type="structural_tag", value=tag)))
    _, chat = curl_body(code["curl_chat"])
    assert chat["response_format"]["type"] == "structural_tag"
    assert chat["response_format"]["format"]["tags"][0]["begin"] == "<a>"
    _, generate = curl_body(code["curl_generate"])
    assert generate["parameters"]["grammar"]["type"] == "structural_tag"
    for name in ("openai", "huggingface_hub", "outlines"):
        ast.parse(code[name])
    assert "response_format=" in code["outlines"] and "CFG(" not in code["outlines"]


def test_openai_route_snippets_say_they_leave_the_stop_sequence_out() -> None:
    with_stop = snippets.snippets(BASE, "m", INPUTS, "p", params(stop=["-"]))
    for key in ("curl_chat", "openai", "outlines"):
        assert with_stop[key].startswith(f"# {snippets.STOP_NOTE}\n"), key
    assert snippets.STOP_NOTE not in with_stop["curl_generate"] + with_stop["huggingface_hub"]
    assert snippets.STOP_NOTE not in snippets.snippets(BASE, "m", INPUTS, "p", params())["openai"]
    assert curl_body(with_stop["curl_chat"])[1]["stop"] == ["-"]  # a shell skips the comment


def test_every_setting_the_chat_route_takes_travels_and_the_rest_is_named() -> None:
    """think_first and the reasoning budget went to `create()` as arguments (a TypeError); top_k, the repetition
    penalty and truncate were dropped, and typical_p and watermark left out without a word."""
    p = params(
        think_first=True,
        max_reasoning_tokens=64,
        top_k=20,
        repetition_penalty=1.3,
        truncate=12,
        typical_p=0.9,
        watermark=True,
        do_sample=True,
        seed=3,
    )
    code = snippets.snippets(BASE, "m", INPUTS, "p", p)
    chat = curl_body(code["curl_chat"])[1]
    assert (chat["top_k"], chat["repetition_penalty"], chat["truncate_prompt_tokens"]) == (20, 1.3, 12)
    extra = _create_kwargs(code["openai"])["extra_body"]
    assert {"think_first", "max_reasoning_tokens", "top_k", "repetition_penalty", "truncate_prompt_tokens"} <= set(
        extra
    )
    assert "think_first" not in _create_kwargs(code["openai"])
    for name in ("curl_chat", "openai", "outlines"):
        assert "# watermark, typical_p: not a /v1/chat/completions field" in code[name]


def test_best_of_is_named_where_the_chat_routes_cannot_carry_it() -> None:
    """best_of went into the /generate body only: the chat snippets sampled one answer with the base seed, another
    candidate than the one the chat showed, without a word."""
    code = snippets.snippets(BASE, "m", INPUTS, "p", params(best_of=2, do_sample=True, seed=2))
    assert curl_body(code["curl_generate"])[1]["parameters"]["best_of"] == 2
    for name in ("curl_chat", "openai", "outlines"):
        assert "# best_of: not a /v1/chat/completions field; the curl /generate snippet carries them" in code[name]
    assert "best_of" not in snippets.snippets(BASE, "m", INPUTS, "p", params(best_of=1))["openai"]


def test_with_best_of_the_chat_snippets_send_the_chosen_candidate_s_seed() -> None:
    """They sent the request's seed, candidate 0's, so they gave the chosen answer only when candidate 0 won."""
    code = snippets.snippets(BASE, "m", INPUTS, "p", params(best_of=3, do_sample=True, seed=7), chosen_seed=9)
    assert curl_body(code["curl_generate"])[1]["parameters"]["seed"] == 7  # /generate runs best_of itself
    assert curl_body(code["curl_chat"])[1]["seed"] == 9 and _create_kwargs(code["openai"])["seed"] == 9
    assert "seed=9," in code["outlines"]
    for name in ("curl_chat", "openai", "outlines"):
        assert "# seed 9: the chosen candidate's (candidate k runs seed + k, wrapped below 2**63)" in code[name]
    alone = snippets.snippets(BASE, "m", INPUTS, "p", params(do_sample=True, seed=7), chosen_seed=9)
    assert _create_kwargs(alone["openai"])["seed"] == 7  # no best_of: the request's own seed
