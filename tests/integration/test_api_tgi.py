"""The TGI-compatible routes on a live server, checked against TGI's spec and with huggingface_hub's client."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import huggingface_hub
import jsonschema
import pytest
from huggingface_hub import InferenceClient

from tests.spec import sse_events, validate

PET_SCHEMA = {
    "type": "object",
    "properties": {"kind": {"enum": ["cat", "dog"]}, "age": {"type": "integer", "minimum": 0, "maximum": 30}},
    "required": ["kind", "age"],
    "additionalProperties": False,
}
OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4 = rf"{OCTET}(\.{OCTET}){{3}}"


@pytest.fixture(autouse=True)
def hub_reaches_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite runs with HF_HUB_OFFLINE=1, which blocks every huggingface_hub request; ours go to 127.0.0.1."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=300)


def test_info_matches_the_spec(server_url: str) -> None:
    info = httpx.get(f"{server_url}/info", timeout=30).json()
    validate(info, "Info")
    assert info["model_id"].startswith("SmolLM2-135M-Instruct")
    assert (info["max_best_of"], info["max_stop_sequences"], info["max_top_n_tokens"]) == (4, 4, 20)
    assert info["max_input_tokens"] < info["max_total_tokens"]
    assert {"ban_strings", "max_whitespace"} <= {p["name"] for p in info["processors"]}
    assert {"id": "embedded", "provider_id": "local"} in info["models"]
    capabilities = info["capabilities"]  # the local model enforces segment constraints too; no request loads models
    assert capabilities["constraint_kinds"] == ["choice", "grammar", "json_schema", "regex", "structural_tag"]
    assert capabilities["model_loading"] is False


def test_generate_json_schema_with_every_detail(server_url: str) -> None:
    body = {
        "inputs": "A pet as JSON: ",
        "parameters": {
            "grammar": {"type": "json", "value": PET_SCHEMA},
            "details": True,
            "decoder_input_details": True,
            "top_n_tokens": 3,
            "max_new_tokens": 40,
        },
    }
    response = post(server_url, "/generate", body)
    assert response.status_code == 200, response.text
    data = response.json()
    validate(data, "GenerateResponse")
    jsonschema.validate(json.loads(data["generated_text"]), PET_SCHEMA)
    details = data["details"]
    assert details["finish_reason"] == "eos_token"
    assert details["generated_tokens"] == len(details["tokens"]) == len(details["top_tokens"])
    assert all(1 <= len(row) <= 3 for row in details["top_tokens"])  # fewer where the constraint allows fewer
    assert all(len(t["raw_top_tokens"]) == 3 for t in details["tokens"])
    prompt_ids = [t["id"] for t in post(server_url, "/tokenize", {"inputs": body["inputs"]}).json()]
    assert [p["id"] for p in details["prefill"]] == prompt_ids
    assert details["prefill"][0]["logprob"] is None and details["prefill"][1]["logprob"] < 0
    first = details["tokens"][0]
    assert first["raw_logprob"] <= 0 and 0 < first["mass_kept"] <= 1.001
    assert len(first["raw_top_tokens"]) == 3
    assert data["validation"] == {"valid": True, "message": "valid against the schema", "enforced": True}
    assert data["constraint_kind"] == "json_schema"


@pytest.mark.parametrize(
    ("grammar", "pattern"),
    [
        ({"type": "json_schema", "value": {"name": "pet", "schema": PET_SCHEMA}}, None),
        ({"type": "regex", "value": IPV4}, IPV4),
        ({"type": "choice", "value": ["yes", "no", "maybe"]}, "yes|no|maybe"),
        ({"type": "grammar", "value": 'start: ("yes" | "no") "!"'}, "(yes|no)!"),
    ],
    ids=["json_schema", "regex", "choice", "grammar"],
)
def test_each_grammar_kind_is_enforced(server_url: str, grammar: dict[str, Any], pattern: str | None) -> None:
    response = post(
        server_url, "/generate", {"inputs": "Answer: ", "parameters": {"grammar": grammar, "max_new_tokens": 30}}
    )
    data = response.json()
    validate(data, "GenerateResponse")
    if pattern is None:
        jsonschema.validate(json.loads(data["generated_text"]), PET_SCHEMA)
    else:
        assert re.fullmatch(pattern, data["generated_text"]), data["generated_text"]
    assert data["validation"]["valid"] is True


def test_generate_without_details_and_with_full_text(server_url: str) -> None:
    data = post(
        server_url, "/generate", {"inputs": "1, 2, 3,", "parameters": {"max_new_tokens": 3, "return_full_text": True}}
    ).json()
    validate(data, "GenerateResponse")
    assert data["details"] is None  # TGI answers with details only when asked
    assert data["generated_text"].startswith("1, 2, 3,") and len(data["generated_text"]) > len("1, 2, 3,")


@pytest.mark.parametrize("route", ["/generate", "/generate_stream"])
def test_a_truncate_past_the_input_names_it_as_tgi_s_body_holds_it(server_url: str, route: str) -> None:
    """It said `truncate: ...` where every other field error of this body says `parameters.<field>`."""
    reply = post(server_url, route, {"inputs": "Hi", "parameters": {"max_new_tokens": 2, "truncate": 10**6}})
    assert reply.status_code == 422
    assert reply.json()["error"].startswith("parameters.truncate: 1000000 is more than the "), reply.json()


def test_generate_sends_tgis_token_count_headers(server_url: str) -> None:
    """x-prompt-tokens and x-generated-tokens, which TGI's clients (and this project's TGI provider, for usage) read:
    a playground behind another playground's TGI provider reported 0 prompt tokens."""
    body = {"inputs": "1, 2, 3,", "parameters": {"max_new_tokens": 3, "details": True, "decoder_input_details": True}}
    for route in ("/generate", "/"):
        reply = post(server_url, route, body)
        data = reply.json() if route == "/generate" else reply.json()[0]
        assert reply.headers["x-prompt-tokens"] == str(len(data["details"]["prefill"]))
        assert reply.headers["x-generated-tokens"] == str(data["details"]["generated_tokens"])
        assert reply.headers["x-total-time"].isdigit()


def test_finish_reasons_length_and_stop_sequence(server_url: str) -> None:
    length = post(
        server_url, "/generate", {"inputs": "1, 2, 3, 4,", "parameters": {"max_new_tokens": 2, "details": True}}
    ).json()
    assert (length["details"]["finish_reason"], length["details"]["generated_tokens"]) == ("length", 2)
    stop = post(
        server_url,
        "/generate",
        {"inputs": "1, 2, 3, 4,", "parameters": {"max_new_tokens": 12, "stop": [" 6"], "details": True}},
    ).json()
    validate(stop, "GenerateResponse")
    assert stop["details"]["finish_reason"] == "stop_sequence"
    assert stop["details"]["stop_sequence"] == " 6"
    assert stop["generated_text"].endswith(" 6")  # TGI keeps the stop sequence in the text


def test_best_of_returns_the_other_candidates(server_url: str) -> None:
    params = {
        "best_of": 2,
        "do_sample": True,
        "seed": 7,
        "details": True,
        "max_new_tokens": 5,
        "grammar": {"type": "choice", "value": ["red", "green", "blue"]},
    }
    data = post(server_url, "/generate", {"inputs": "A color: ", "parameters": params}).json()
    validate(data, "GenerateResponse")
    others = data["details"]["best_of_sequences"]
    assert len(others) == 1
    assert others[0]["generated_text"] in ("red", "green", "blue")
    assert others[0]["validation"]["valid"] is True
    assert {data["details"]["seed"], others[0]["seed"]} == {7, 8}
    assert data["details"]["total_logprob"] >= others[0]["total_logprob"]


def test_stream_events_follow_the_spec_and_match_generate(server_url: str) -> None:
    body = {"inputs": "The sky is", "parameters": {"max_new_tokens": 6, "details": True, "top_n_tokens": 2}}
    with httpx.stream("POST", f"{server_url}/generate_stream", json=body, timeout=300) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response.iter_lines())
    for event in events:
        validate(event, "StreamResponse")
        assert len(event["top_tokens"]) == 2
    assert [e["index"] for e in events] == list(range(1, len(events) + 1))  # as TGI counts: from 1
    assert all(e["generated_text"] is None and e["details"] is None for e in events[:-1])
    final = events[-1]
    text = "".join(e["token"]["text"] for e in events if not e["token"]["special"])
    assert final["generated_text"] == text
    assert final["details"]["generated_tokens"] == len(events)
    assert final["details"]["input_length"] > 0
    assert post(server_url, "/generate", body).json()["generated_text"] == text  # greedy: same text


def test_inference_client_text_generation_with_details(server_url: str) -> None:
    client = InferenceClient(base_url=server_url, timeout=300)
    output = client.text_generation(
        "My IP address is ",
        max_new_tokens=20,
        details=True,
        top_n_tokens=2,
        decoder_input_details=True,
        grammar={"type": "regex", "value": IPV4},
    )
    assert re.fullmatch(IPV4, output.generated_text)
    assert output.details.finish_reason in ("eos_token", "length")
    assert len(output.details.prefill) > 0
    assert all(1 <= len(row) <= 2 for row in output.details.top_tokens)
    assert output.details.tokens[0].logprob <= 0
    assert output["validation"]["valid"] is True  # our extras ride along as extra keys


def test_inference_client_streaming(server_url: str) -> None:
    client = InferenceClient(base_url=server_url, timeout=300)
    outputs = list(client.text_generation("Colors: red,", max_new_tokens=4, stream=True, details=True))
    assert len(outputs) == 4
    assert outputs[-1].details.finish_reason == "length"
    assert outputs[-1].generated_text == "".join(o.token.text for o in outputs)
    texts = list(client.text_generation("Colors: red,", max_new_tokens=4, stream=True))
    assert "".join(texts) == outputs[-1].generated_text


def test_tokenize(server_url: str) -> None:
    tokens = post(server_url, "/tokenize", {"inputs": "Hello world"}).json()
    validate(tokens, "TokenizeResponse")
    assert "".join(t["text"] for t in tokens) == "Hello world"


def test_tokenize_keeps_the_tokens_truncate_keeps(server_url: str) -> None:
    """As TGI's /tokenize: the prompt's last `truncate` tokens, those /generate reads. 0, and more than the model takes
    as input, are refused by name (TGI: "`truncate` must be strictly positive and less than ...")."""
    text = "one two three four five"
    kept = post(server_url, "/tokenize", {"inputs": text, "parameters": {"truncate": 2}}).json()
    assert [t["text"] for t in kept] == [" four", " five"] and kept[0]["start"] == text.index(" four")
    for bad in (0, 10**6, 10**30):
        for path in ("/tokenize", "/generate"):
            reply = post(server_url, path, {"inputs": text, "parameters": {"truncate": bad, "max_new_tokens": 1}})
            assert reply.status_code == 422 and "truncate" in reply.json()["error"], (path, bad, reply.text)
    chat = {"messages": CHAT, "truncate_prompt_tokens": 3}
    tokens = post(server_url, "/chat_tokenize", chat).json()["tokenize_response"]
    assert [t["text"] for t in tokens] == ["ass", "istant", "\n"]
    refused = post(server_url, "/chat_tokenize", {**chat, "truncate_prompt_tokens": 10**6})
    assert refused.status_code == 422 and refused.json()["error"].startswith("truncate_prompt_tokens: 1000000 is more")


CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <b>there</b> 😀"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def test_chat_tokenize_is_the_prompt_a_chat_request_decodes_after(server_url: str) -> None:
    reply = post(server_url, "/chat_tokenize", {"model": "tgi", "messages": CHAT})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    validate(body, "ChatTokenizeResponse")
    text, tokens = body["templated_text"], body["tokenize_response"]
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nHi <b>there</b> 😀<|im_end|>" in text
    assert all(text[t["start"] : t["stop"]] == t["text"] for t in tokens)  # (a character's byte tokens share it)
    assert tokens[0]["start"] == 0 and tokens[-1]["stop"] == len(text)
    chat = post(server_url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 1}).json()
    assert chat["usage"]["prompt_tokens"] == len(tokens)  # the tokens the chat route counts, one for one

    with_tools = post(server_url, "/chat_tokenize", {"messages": CHAT, "tools": [WEATHER_TOOL]}).json()
    assert "get_weather" in with_tools["templated_text"] and "get_weather" not in text

    developer = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "x"}]
    as_system = post(server_url, "/chat_tokenize", {"messages": developer}).json()["templated_text"]
    assert as_system.startswith("<|im_start|>system\nBe brief.<|im_end|>")  # OpenAI's developer: the system role

    # a continued final message follows the template, as the model reads it (it was left out)
    go_on = {
        "messages": [*CHAT, {"role": "assistant", "content": '{"kind": "'}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    continued = post(server_url, "/chat_tokenize", go_on).json()
    assert continued["templated_text"] == text + '{"kind": "'
    read = continued["tokenize_response"]
    assert all(continued["templated_text"][t["start"] : t["stop"]] == t["text"] for t in read)
    ids = post(server_url, "/v1/chat/completions", {**go_on, "max_tokens": 1, "return_token_ids": True}).json()
    assert ids["prompt_token_ids"] == [t["id"] for t in read] and ids["usage"]["prompt_tokens"] == len(read)


def test_chat_tokenize_names_a_bad_request(server_url: str) -> None:
    reply = post(server_url, "/chat_tokenize", {"messages": [{"role": "user", "content": "x"}], "top_p": 2})
    assert reply.status_code == 422 and reply.json()["error_type"] == "validation"
    assert "top_p" in reply.json()["error"]


def test_invocations_answers_each_shape_as_its_route_does(server_url: str) -> None:
    """TGI's SageMaker route: `inputs` generates, `messages` chats, `prompt` completes; each as TGI's spec says."""
    grammar = {"type": "regex", "value": "(yes|no)"}
    generated = post(server_url, "/invocations", {"inputs": "Is it?", "parameters": {"grammar": grammar}})
    assert generated.status_code == 200, generated.text
    validate(generated.json(), "SagemakerResponse")
    assert generated.json()["generated_text"] in ("yes", "no")

    chat = {"messages": CHAT, "max_tokens": 3, "response_format": {"type": "regex", "value": "(yes|no)"}}
    chatted = post(server_url, "/invocations", chat).json()
    validate(chatted, "SagemakerResponse")
    assert chatted["object"] == "chat.completion" and chatted["choices"][0]["message"]["content"] in ("yes", "no")

    completed = post(server_url, "/invocations", {"model": "tgi", "prompt": "Say yes:", "max_tokens": 2}).json()
    validate(completed, "SagemakerResponse")
    assert completed["object"] == "text_completion" and len(completed["choices"]) == 1

    with httpx.stream(
        "POST", f"{server_url}/invocations", json={"inputs": "Hi", "stream": True, "parameters": {"max_new_tokens": 3}}
    ) as streamed:
        events = sse_events(streamed.iter_lines())
    for event in events:
        validate(event, "SagemakerStreamResponse")
    assert len(events) == 3 and events[-1]["generated_text"] == "".join(e["token"]["text"] for e in events)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"parameters": {"max_new_tokens": 2}}, "`inputs`"),
        ({"messages": CHAT, "top_p": 2}, "top_p"),
        ({"inputs": "Hi", "parameters": {"grammar": {"type": "regex", "value": "(ab"}}}, "invalid regex"),
    ],
)
def test_invocations_refuses_in_tgis_shape(server_url: str, body: dict[str, Any], named: str) -> None:
    reply = post(server_url, "/invocations", body)
    assert reply.status_code == 422 and named in reply.json()["error"]
    validate(reply.json(), "ErrorResponse")


def test_next_token_distribution_raw_and_constrained(server_url: str) -> None:
    body = {
        "inputs": "The capital of France is",
        "top_k": 10,
        "parameters": {"grammar": {"type": "choice", "value": [" Paris", " London"]}},
    }
    data = post(server_url, "/next_token", body).json()
    allowed = [c for c in data["candidates"] if c["allowed"]]
    assert allowed and all(" Paris".startswith(c["text"]) or " London".startswith(c["text"]) for c in allowed)
    assert all(c["logprob"] is None for c in data["candidates"] if not c["allowed"])
    assert 0 < data["mass_kept"] < 1
    chat = post(
        server_url, "/next_token", {"messages": [{"role": "user", "content": "Hi"}], "top_k": 5, "prefix": "Hello"}
    ).json()
    assert chat["prefix"] == "Hello" and len(chat["candidates"]) == 5 and chat["mass_kept"] > 0.99
