"""The chat fields OpenAI, vLLM and TGI clients send, on the live server: each changes the answer as the
peers' does, or is named in `warnings`."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

CHAT = [{"role": "user", "content": "Say hello."}]


def chat(url: str, **fields: Any) -> dict[str, Any]:
    body = {"messages": CHAT, "temperature": 0, "max_tokens": 6, **fields}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def token_id(url: str, text: str) -> int:
    tokens = httpx.post(f"{url}/tokenize", json={"inputs": text}, timeout=30).json()
    assert len(tokens) == 1, tokens
    return tokens[0]["id"]


def test_logit_bias_bans_the_greedy_token_and_min_tokens_holds_off_the_end(server_url: str) -> None:
    first = chat(server_url, max_tokens=1)["choices"][0]["message"]["content"]
    banned = chat(server_url, max_tokens=1, logit_bias={str(token_id(server_url, first)): -100})
    assert banned["choices"][0]["message"]["content"] != first
    eos = str(token_id(server_url, "<|im_end|>"))
    ends_at_once = chat(server_url, logit_bias={eos: 100})
    assert ends_at_once["choices"][0]["message"]["content"] == ""
    held = chat(server_url, logit_bias={eos: 100}, min_tokens=3)
    assert held["usage"]["completion_tokens"] >= 3 and held["choices"][0]["message"]["content"]
    assert held["choices"][0]["finish_reason"] == "stop"


def test_stop_token_ids_end_the_answer_at_the_named_token_as_vllm_s_do(server_url: str) -> None:
    """vLLM's stop_token_ids (refused here before): the answer ends at the first token named, before its text (the
    token is in the logprobs), finish_reason stop and stop_reason the id, streamed or not, on chat and completions;
    min_tokens holds it off, even where the constraint forces it."""
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    ask: dict[str, Any] = {"model": "embedded", "messages": CHAT, "temperature": 0, "max_tokens": 12, "logprobs": True}
    free = client.chat.completions.create(**ask).choices[0].message.content or ""
    tokens = httpx.post(f"{server_url}/tokenize", json={"inputs": free}, timeout=30).json()
    stop = tokens[2]["id"]
    at = [t["id"] for t in tokens].index(stop)
    kept = "".join(t["text"] for t in tokens[:at])
    assert free.startswith(kept + tokens[at]["text"])
    named = {"stop_token_ids": [stop, stop + 1]}
    choice = client.chat.completions.create(**ask, extra_body=named).choices[0]
    assert (choice.message.content, choice.finish_reason, choice.model_extra["stop_reason"]) == (kept, "stop", stop)
    assert [t.token for t in choice.logprobs.content] == [t["text"] for t in tokens[: at + 1]]
    chunks = list(client.chat.completions.create(**ask, stream=True, extra_body=named))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == kept
    assert (chunks[-1].choices[0].finish_reason, chunks[-1].choices[0].model_extra["stop_reason"]) == ("stop", stop)
    held = client.chat.completions.create(**ask, extra_body={**named, "min_tokens": 4})
    assert held.usage.completion_tokens >= 4 and held.choices[0].message.content != kept
    dot = token_id(server_url, ".")
    forced = {"guided_regex": r"abc\.def", "stop_token_ids": [dot]}
    choice = client.chat.completions.create(**ask, extra_body=forced).choices[0]
    assert (choice.message.content, choice.model_extra["stop_reason"]) == ("abc", dot)
    with pytest.raises(openai.BadRequestError, match="min_tokens: the constraint allows nothing but the end"):
        client.chat.completions.create(**ask, extra_body={**forced, "min_tokens": 3})  # fast-forward wrote "abc."
    prompt = "One, two, three,"
    text = client.completions.create(model="embedded", prompt=prompt, max_tokens=8, temperature=0).choices[0].text
    words = httpx.post(f"{server_url}/tokenize", json={"inputs": text}, timeout=30).json()
    cut = client.completions.create(model="embedded", prompt=prompt, max_tokens=8, temperature=0, extra_body={
        "stop_token_ids": [words[1]["id"]]}).choices[0]  # fmt: skip
    assert (cut.text, cut.model_extra["stop_reason"]) == (words[0]["text"], words[1]["id"])
    with pytest.raises(openai.BadRequestError, match="stop_token_ids: token id 99999999 is not in the vocabulary"):
        client.chat.completions.create(**ask, extra_body={"stop_token_ids": [99999999]})


def test_include_stop_str_in_output_keeps_the_stop_that_ended_the_answer_as_vllm_does(server_url: str) -> None:
    """vLLM's include_stop_str_in_output (refused here before): the answer ends after the stop sequence that ended it,
    not before it (what the same token wrote past it still cut), streamed or not, on chat and completions; a
    stop_token_ids token's text stays too."""
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    ask: dict[str, Any] = {"model": "embedded", "messages": CHAT, "temperature": 0, "max_tokens": 12}
    regex = {"guided_regex": r"abc\.def"}
    keep = {**regex, "include_stop_str_in_output": True}
    for stop, cut, kept in (("c.", "ab", "abc."), ("b", "a", "ab")):
        plain = client.chat.completions.create(**ask, stop=[stop], extra_body=regex).choices[0]
        assert plain.message.content == cut
        choice = client.chat.completions.create(**ask, stop=[stop], extra_body=keep).choices[0]
        assert (choice.message.content, choice.finish_reason, choice.model_extra["stop_reason"]) == (kept, "stop", stop)
        chunks = list(client.chat.completions.create(**ask, stop=[stop], stream=True, extra_body=keep))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == kept
        text = {"model": "embedded", "prompt": "Letters:", "max_tokens": 12, "temperature": 0, "stop": [stop]}
        assert client.completions.create(**text, extra_body=keep).choices[0].text == kept
        streamed = client.completions.create(**text, stream=True, extra_body=keep)
        assert "".join(c.choices[0].text for c in streamed if c.choices) == kept
    dot = token_id(server_url, ".")
    named = client.chat.completions.create(**ask, extra_body={**keep, "stop_token_ids": [dot]}).choices[0]
    assert (named.message.content, named.model_extra["stop_reason"]) == ("abc.", dot)


def test_return_token_ids_gives_the_ids_read_and_written_as_vllm_does_streamed_or_not(server_url: str) -> None:
    """vLLM's return_token_ids (an unknown field here before): the prompt's ids as the model read them (those
    /chat_tokenize and /tokenize list) and each choice's generated ids, an end of text's too; a stream sends the
    prompt's on a choice's first chunk and each chunk's tokens' on it. return_tokens_as_token_ids (refused before)
    names each logprobs token `token_id:<id>`."""
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    ask: dict[str, Any] = {"model": "embedded", "messages": CHAT, "temperature": 0, "max_tokens": 40}
    ids = {"return_token_ids": True}
    read = httpx.post(f"{server_url}/chat_tokenize", json={"messages": CHAT}, timeout=60).json()["tokenize_response"]
    whole = client.chat.completions.create(**ask, logprobs=True, top_logprobs=2, extra_body=ids).model_dump()
    choice = whole["choices"][0]
    assert whole["prompt_token_ids"] == [t["id"] for t in read] and whole["usage"]["prompt_tokens"] == len(read)
    assert choice["finish_reason"] == "stop" and len(choice["token_ids"]) == whole["usage"]["completion_tokens"]
    named = client.chat.completions.create(
        **ask, logprobs=True, top_logprobs=2, extra_body={**ids, "return_tokens_as_token_ids": True}
    ).model_dump()["choices"][0]
    assert named["message"]["content"] == choice["message"]["content"]
    entries, plain = named["logprobs"]["content"], choice["logprobs"]["content"]
    assert [e["token"] for e in entries] == [f"token_id:{i}" for i in choice["token_ids"][:-1]]  # (the end: no entry)
    assert [e["bytes"] for e in entries] == [e["bytes"] for e in plain]  # the text's bytes, as vLLM's
    assert all(t["token"].startswith("token_id:") for e in entries for t in e["top_logprobs"])
    chunks = [c.model_dump() for c in client.chat.completions.create(**ask, stream=True, extra_body=ids)]
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    assert [i for c in chunks for ch in c["choices"] for i in ch.get("token_ids") or []] == choice["token_ids"]
    text = {"model": "embedded", "prompt": "1, 2, 3,", "max_tokens": 5, "temperature": 0, "logprobs": 1}
    written = client.completions.create(**text, extra_body=ids).model_dump()["choices"][0]
    prompt = httpx.post(f"{server_url}/tokenize", json={"inputs": "1, 2, 3,"}, timeout=60).json()
    assert written["prompt_token_ids"] == [t["id"] for t in prompt] and len(written["token_ids"]) == 5
    by_id = client.completions.create(**text, extra_body={"return_tokens_as_token_ids": True}).choices[0].logprobs
    assert by_id.tokens == [f"token_id:{i}" for i in written["token_ids"]]
    assert [list(top) for top in by_id.top_logprobs] == [[f"token_id:{i}"] for i in written["token_ids"]]
    streamed = [c.model_dump()["choices"][0] for c in client.completions.create(**text, stream=True, extra_body=ids)]
    assert streamed[0]["prompt_token_ids"] == written["prompt_token_ids"]
    assert [i for c in streamed for i in c["token_ids"]] == written["token_ids"]


TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}
TOOL = {"type": "function", "function": {"name": "get_time", "parameters": TIME}}


@pytest.mark.parametrize(
    "extra",
    [
        {"stop": [" "], "n": 2, "temperature": 0.8, "seed": 5},  # a stop held back; sampled choices
        {"stop": [" "], "include_stop_str_in_output": True},
        {"tools": [TOOL], "tool_choice": "required"},  # a call's arguments, its closing `}` held back
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "get_time"}}, "n": 2},
    ],
    ids=["stop-n2", "stop-kept", "tool-required", "tool-named-n2"],
)
def test_streamed_token_ids_add_up_to_each_choice_s_token_ids(server_url: str, extra: dict[str, Any]) -> None:
    """However a stream holds text back (a stop sequence, a call's envelope), every token's id rides on a chunk,
    in order, the end of text's on the last: each choice's adds up to the unstreamed answer's `token_ids`."""
    body = {"messages": CHAT, "temperature": 0, "max_tokens": 20, "return_token_ids": True, **extra}
    whole = httpx.post(f"{server_url}/v1/chat/completions", json=body, timeout=120).json()
    streamed: dict[int, list[int]] = {}
    with httpx.stream("POST", f"{server_url}/v1/chat/completions", json={**body, "stream": True}, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[len("data: ") :])["choices"]:
                    streamed.setdefault(choice["index"], []).extend(choice.get("token_ids") or [])
    assert {c["index"]: c["token_ids"] for c in whole["choices"]} == streamed
    assert all(c["token_ids"] for c in whole["choices"])


def test_bad_words_and_allowed_token_ids_keep_the_answer_off_and_to_the_tokens_named(server_url: str) -> None:
    """vLLM's bad_words and allowed_token_ids (refused here before): a word the greedy answer wrote is not written,
    and only the tokens allowed are, the end of text only when listed."""
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    ask: dict[str, Any] = {"model": "embedded", "messages": CHAT, "temperature": 0, "max_tokens": 6, "logprobs": True}
    free = client.chat.completions.create(**ask).choices[0].message.content or ""
    word = free.split()[0].strip(".,!")
    assert word
    kept_off = client.chat.completions.create(**ask, extra_body={"bad_words": [word]}).choices[0].message.content
    assert word not in (kept_off or "") and kept_off
    tokens = httpx.post(f"{server_url}/tokenize", json={"inputs": " yes no maybe"}, timeout=30).json()
    allowed = [t["id"] for t in tokens]
    only = client.chat.completions.create(**ask, extra_body={"allowed_token_ids": allowed}).choices[0]
    assert {t.token for t in only.logprobs.content} <= {t["text"] for t in tokens}
    assert only.finish_reason == "length"  # the end of text was not allowed
    ended = client.chat.completions.create(
        **ask, extra_body={"allowed_token_ids": [*allowed, token_id(server_url, "<|im_end|>")]}
    )
    assert ended.choices[0].finish_reason == "stop" or ended.usage.completion_tokens == 6
    with pytest.raises(openai.BadRequestError, match="allowed_token_ids: token id 99999999 is not in the vocabulary"):
        client.chat.completions.create(**ask, extra_body={"allowed_token_ids": [99999999]})
    # text the constraint forces is not written past them (fast-forward would append it unasked)
    with pytest.raises(openai.BadRequestError, match="every token was masked out"):
        client.chat.completions.create(**ask, extra_body={"guided_regex": "Red dog", "bad_words": ["dog"]})


def test_presence_penalty_lowers_each_repeated_token(server_url: str) -> None:
    """The logprob of a token the answer already holds drops below what the model gave it (raw_logprob)."""
    messages = [{"role": "user", "content": "Write the word cat ten times: cat cat cat"}]
    answer = chat(server_url, messages=messages, max_tokens=8, presence_penalty=2.0, logprobs=True)
    entries = answer["choices"][0]["logprobs"]["content"]
    repeated = [e for i, e in enumerate(entries) if e["token"] in {x["token"] for x in entries[:i]}]
    assert repeated and all(e["logprob"] < e["raw_logprob"] - 0.01 for e in repeated), entries
    first = entries[0]
    assert abs(first["logprob"] - first["raw_logprob"]) < 1e-4  # nothing generated yet: nothing penalised


def test_ignore_eos_generates_exactly_max_tokens(server_url: str) -> None:
    eos = str(token_id(server_url, "<|im_end|>"))
    answer = chat(server_url, logit_bias={eos: 100}, ignore_eos=True, max_tokens=4)
    assert answer["usage"]["completion_tokens"] == 4 and answer["choices"][0]["finish_reason"] == "length"


def test_add_generation_prompt_false_leaves_the_assistant_header_out(server_url: str) -> None:
    with_header = chat(server_url, max_tokens=1)["usage"]["prompt_tokens"]
    without = chat(server_url, max_tokens=1, add_generation_prompt=False)["usage"]["prompt_tokens"]
    assert without < with_header


def test_chat_template_kwargs_reach_the_template_and_bad_ones_are_400(server_url: str) -> None:
    assert chat(server_url, max_tokens=1, chat_template_kwargs={"enable_thinking": False})["choices"]
    body = {"messages": CHAT, "max_tokens": 1, "chat_template_kwargs": {"tokenize": True}}
    refused = httpx.post(f"{server_url}/v1/chat/completions", json=body, timeout=60)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "chat_template_kwargs"


def test_prompt_logprobs_cover_every_prompt_token(server_url: str) -> None:
    answer = chat(server_url, max_tokens=1, prompt_logprobs=0)
    rows = answer["prompt_logprobs"]
    assert len(rows) == answer["usage"]["prompt_tokens"] and rows[0] is None
    entry = next(iter(rows[1].values()))
    assert entry["logprob"] <= 0 and isinstance(entry["decoded_token"], str)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"metadata": {"run": "1"}, "store": False, "service_tier": "auto", "user": "me"}, "metadata"),
    ],
)
def test_fields_without_effect_are_named_in_warnings(server_url: str, fields: dict[str, Any], named: str) -> None:
    answer = chat(server_url, max_tokens=1, **fields)
    assert any(w.startswith(named) for w in answer["warnings"]), answer["warnings"]
    assert answer["choices"][0]["warnings"] == answer["warnings"]


def test_fields_that_would_change_the_answer_are_refused_by_name(server_url: str) -> None:
    refused = [("functions", [{"name": "f"}]), ("use_beam_search", True), ("echo", True)]
    refused.append(("stream_options", {"include_usage": True}))  # without stream: OpenAI and vLLM refuse it too
    for field, value in refused:
        body = {"messages": CHAT, "max_tokens": 1, field: value}
        response = httpx.post(f"{server_url}/v1/chat/completions", json=body, timeout=60)
        assert response.status_code == 400, response.text
        assert (
            response.json()["error"]["message"].startswith(f"{field}: ") and response.json()["error"]["param"] == field
        )


ODD = [
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "logit_bias": {"99999999": 5}}, 400),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "logit_bias": {"1": 5}, "stream": True}, 200),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "chat_template_kwargs": {"x": {"y": [1]}}}, 200),
    (
        "/v1/chat/completions",
        {"messages": CHAT, "max_tokens": 2, "prompt_logprobs": 3, "stream": True},
        400,
    ),  # as vLLM: none streams
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "min_tokens": 5, "guided_choice": ["a"]}, 400),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "tool_choice": None, "tools": None, "n": None}, 200),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "echo": True, "logprobs": 1, "stream": True}, 200),
    ("/v1/completions", {"prompt": ["a"] * 8, "n": 8, "max_tokens": 1}, 400),
    ("/v1/completions", {"prompt": [], "max_tokens": 1}, 400),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 10**9}, 400),
    ("/v1/completions", {"prompt": "Hi", "best_of": 2, "max_tokens": 1, "temperature": 0}, 400),
]


@pytest.mark.parametrize(("path", "body", "status"), ODD, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(ODD)])
def test_odd_uses_of_the_new_fields_answer_without_a_500(server_url: str, path: str, body: dict, status: int) -> None:
    response = httpx.post(f"{server_url}{path}", json=body, timeout=120)
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"]["message"]
    elif body.get("stream"):
        assert response.text.rstrip().endswith("data: [DONE]") and '"error"' not in response.text


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_n_samples_from_the_largest_seed_wrap_as_best_of_does(server_url: str, path: str) -> None:
    """Choice i takes seed + i below 2**63; the largest seed was refused with "less than or equal to" itself."""
    seed = 2**63 - 1
    prompt = {"messages": CHAT} if path.endswith("chat/completions") else {"prompt": "Hello"}
    body = {**prompt, "max_tokens": 1, "n": 2, "seed": seed, "temperature": 1}
    response = httpx.post(f"{server_url}{path}", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert [c["seed"] for c in response.json()["choices"]] == [seed, 0]
