"""The debugger over HTTP: /check, /reason, continuing a prefix (/generate, chat) and fields in results."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import openai
import pytest

PET = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog"]},
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer"},
    },
    "required": ["kind", "name", "age"],
    "additionalProperties": False,
}
JSON = {"type": "json", "value": PET}


def post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=300)


def test_check_accepts_a_valid_instance(server_url: str) -> None:
    data = post(server_url, "/check", {"grammar": JSON, "text": '{"kind": "cat", "name": "Tom", "age": 3}'}).json()
    assert data["accepted"] is True and data["first_refused"] is None
    assert data["validation"] == {"valid": True, "message": "valid against the schema", "enforced": True}
    assert data["agree"] is True and data["constraint_engine"] == "llguidance"
    assert "".join(data["tokens"]) == '{"kind": "cat", "name": "Tom", "age": 3}'


def test_a_schema_s_objects_take_only_their_keys_unless_strict_false(server_url: str) -> None:
    """As TGI's and vLLM's engines read a schema without additionalProperties (a Pydantic model's, from Outlines'
    clients or instructor): the mask and the verdict refuse an invented key; `strict: false` reads JSON Schema's
    letter. Before, the key was accepted, and a model invented keys until max_tokens."""
    schema = {k: v for k, v in PET.items() if k != "additionalProperties"}
    text = '{"kind": "cat", "name": "Tom", "age": 3, "owner": "Ann"}'
    closed = post(server_url, "/check", {"grammar": {"type": "json", "value": schema}, "text": text}).json()
    assert closed["accepted"] is False and closed["validation"]["valid"] is False
    loose = {"type": "json", "value": schema, "strict": False}
    assert post(server_url, "/check", {"grammar": loose, "text": text}).json()["accepted"] is True


def test_check_names_the_first_refused_token(server_url: str) -> None:
    text = '{"kind": "cat", "name": "Tom"}'
    data = post(server_url, "/check", {"grammar": JSON, "text": text}).json()
    refused = data["first_refused"]
    assert data["accepted"] is False
    assert text[refused["offset"] :].startswith(refused["text"])
    assert refused["reason"] == "`}` not allowed: required key `age` missing in (root)"
    assert data["validation"]["valid"] is False and data["agree"] is True


@pytest.mark.parametrize("engine", ["llguidance", "xgrammar"])
def test_check_reads_a_special_tokens_spelling_as_text(server_url: str, engine: str) -> None:
    """What decoding writes for the choice `<|im_end|>` is the text; before, /check tokenized it as the special
    token and refused it ("the constraint is beyond llguidance's limits")."""
    grammar = {"type": "choice", "value": ["<|im_end|>", "b"]}
    data = post(server_url, "/check", {"grammar": grammar, "text": "<|im_end|>", "constraint_engine": engine}).json()
    assert (data["accepted"], data["agree"], data["validation"]["valid"]) == (True, True, True), data
    assert "".join(data["tokens"]) == "<|im_end|>" and len(data["tokens"]) > 1


@pytest.mark.parametrize("engine", ["llguidance", "xgrammar", "outlines_core"])
def test_a_regex_dot_refuses_a_newline_on_every_engine(server_url: str, engine: str) -> None:
    """As the verdict reads it; xgrammar's mask let the newline through, and the answer broke its regex."""
    body = {"grammar": {"type": "regex", "value": "a.{3}"}, "text": "ab\ncd", "constraint_engine": engine}
    data = post(server_url, "/check", body).json()
    assert (data["accepted"], data["agree"], data["validation"]["valid"]) == (False, True, False), data
    assert data["first_refused"]["offset"] == 2
    kept = {"grammar": {"type": "regex", "value": "[.]x.(\\.)"}, "text": ".xy.", "constraint_engine": engine}
    assert post(server_url, "/check", kept).json()["accepted"] is True  # a class's dot and an escaped one are dots


def test_check_limits_and_bad_input(server_url: str) -> None:
    too_long = post(server_url, "/check", {"grammar": JSON, "text": "x" * 20_001})
    assert too_long.status_code == 422 and "text" in too_long.json()["error"]
    bad = post(server_url, "/check", {"grammar": {"type": "regex", "value": "("}, "text": "a"})
    assert bad.status_code == 422 and bad.json()["error_type"] == "validation"


def test_reason_lists_the_keys_left(server_url: str) -> None:
    tokens = httpx.post(f"{server_url}/tokenize", json={"inputs": "zz"}, timeout=60).json()
    body = {"grammar": JSON, "prefix": '{"kind": "dog", "', "tokens": [tokens[-1]["id"]]}
    data = post(server_url, "/reason", body).json()
    assert data["reasons"][0]["allowed"] is False
    # llguidance keeps the schema's key order and `name` is required: it is the one key that may come next
    assert data["reasons"][0]["reason"] == "the schema allows only the keys `name` here"
    refused = post(server_url, "/reason", {**body, "prefix": '{"size": '})
    assert refused.status_code == 422 and "prefix" in refused.json()["error"]


def test_generate_continues_a_prefix_under_the_constraint(server_url: str) -> None:
    prefix = '{"kind": "dog", "name": "Rex", "age": '
    body = {
        "inputs": "A pet as JSON: ",
        "parameters": {"grammar": JSON, "continue_from": prefix, "max_new_tokens": 10, "details": True},
    }
    data = post(server_url, "/generate", body).json()
    assert data["continued_from"] == prefix
    assert not data["generated_text"].startswith("{")
    assert json.loads(prefix + data["generated_text"])["name"] == "Rex"
    assert data["validation"]["valid"] is True
    assert "".join(t["text"] for t in data["details"]["tokens"] if not t["special"]) == data["generated_text"]


def test_a_prefix_ending_inside_text_the_constraint_forces_continues(server_url: str) -> None:
    """Where the constraint forces text, llguidance's mask offers only its canonical tokens (`Sure` for `Sure! ok`),
    so a prefix ending inside a word (`Sur`, `{"ki`: other tokens) was refused as a 422 that blamed the constraint,
    and /check named a token the regex takes."""
    regex = {"type": "regex", "value": "Sure! ok"}
    for grammar, prefix in ((regex, "Sur"), (regex, "S"), (JSON, '{"ki'), (JSON, '{"kind": "cat", "na')):
        body = {"inputs": "Reply: ", "parameters": {"grammar": grammar, "continue_from": prefix, "max_new_tokens": 32}}
        data = post(server_url, "/generate", body).json()
        assert data["validation"]["valid"] is True, (prefix, data)
        if grammar is regex:
            assert prefix + data["generated_text"] == "Sure! ok"
    check = post(server_url, "/check", {"grammar": regex, "text": "Sur"}).json()
    assert check["accepted"] is False and check["first_refused"]["text"] != "r"  # the end of text, not a letter


def test_generate_refuses_a_prefix_the_constraint_refuses(server_url: str) -> None:
    body = {"inputs": "A pet: ", "parameters": {"grammar": JSON, "continue_from": '{"kind": "cow"'}}
    response = post(server_url, "/generate", body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert (
        error.startswith("continue_from: the constraint refuses token") and "kind must be one of `cat`, `dog`" in error
    )


def test_next_token_names_the_prefix_token_the_constraint_refuses_and_why(server_url: str) -> None:
    """It said only which token ('the prefix leaves the constraint at token 4'), where /reason and continue_from
    say why."""
    body = {"inputs": "A pet: ", "parameters": {"grammar": JSON}, "prefix": '{"kind": "cow"', "top_k": 3}
    response = post(server_url, "/next_token", body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error.startswith("prefix: token") and "is refused: " in error and "kind must be one of `cat`, `dog`" in error


def test_chat_continues_the_final_assistant_message(server_url: str) -> None:
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=300, max_retries=0)
    prefix = '{"kind": "cat", "name": "'
    request = {
        "model": "embedded",
        "messages": [{"role": "user", "content": "A pet as JSON."}, {"role": "assistant", "content": prefix}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET}},
        "max_tokens": 30,
        "temperature": 0,
        "extra_body": {"continue_final_message": True},
    }
    completion = client.chat.completions.create(**request)
    choice = completion.choices[0]
    assert json.loads(prefix + choice.message.content)["kind"] == "cat"
    assert choice.model_extra["validation"]["valid"] is True
    assert choice.model_extra["continued_from"] == prefix
    stream = client.chat.completions.create(**request, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == choice.message.content
    # usage counts the continued message as prompt, as vLLM does: what the cache held of it is never more
    again = client.chat.completions.create(**request).usage
    plain = client.chat.completions.create(**{**request, "messages": request["messages"][:1], "extra_body": {}}).usage
    assert again.prompt_tokens > plain.prompt_tokens + 5  # (the prefix's ~10 tokens, less the generation header)
    assert 0 < again.prompt_tokens_details.cached_tokens <= again.prompt_tokens


def test_a_continued_message_the_constraint_refuses_is_named_as_the_chat_client_sent_it(server_url: str) -> None:
    """The error's param was `continue_from`, /generate's field, which a chat client never sends (a remote provider's
    refusal names it so too)."""
    messages = [{"role": "user", "content": "Pick"}, {"role": "assistant", "content": "gr"}]
    body = {"messages": messages, "continue_final_message": True, "max_tokens": 3, "guided_choice": ["red", "blue"]}
    error = post(server_url, "/v1/chat/completions", body).json()["error"]
    assert error["param"] == "continue_final_message"
    assert error["message"].startswith("continue_final_message: the constraint refuses token 0")


def test_continue_final_message_needs_an_assistant_message(server_url: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "continue_final_message": True}
    response = post(server_url, "/v1/chat/completions", body)
    assert response.status_code == 400 and "continue_final_message" in response.json()["error"]["message"]


def test_fields_roll_tokens_up_by_json_path(server_url: str) -> None:
    body = {"inputs": "A pet as JSON: ", "parameters": {"grammar": JSON, "max_new_tokens": 40, "details": True}}
    data = post(server_url, "/generate", body).json()
    answer = json.loads(data["generated_text"])
    fields = {f["path"]: f for f in data["fields"]}
    assert set(fields) == set(answer) and {f["value"] for f in fields.values()} == set(answer.values())
    tokens = data["details"]["tokens"]
    kind = fields["kind"]
    # the value "cat"/"dog" with its quotes: the tokens that wrote it, in order
    start = data["generated_text"].index('"', data["generated_text"].index(":"))
    at, inside = 0, []
    for token in tokens:
        if not token["special"] and at < start + len(json.dumps(answer["kind"])) and at + len(token["text"]) > start:
            inside.append(token)
        at += 0 if token["special"] else len(token["text"])
    assert kind["tokens"] == len(inside)
    assert math.isclose(kind["prob_product"], math.exp(sum(t["raw_logprob"] for t in inside)), rel_tol=1e-6)
    assert math.isclose(kind["prob_min"], min(math.exp(t["raw_logprob"]) for t in inside), rel_tol=1e-6)
    assert kind["mass_kept_min"] == min(t["mass_kept"] for t in inside)
