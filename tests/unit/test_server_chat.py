"""OpenAI chat bodies map to one constraint and TGI parameters; stop sequences are trimmed as OpenAI does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from playground.errors import ParameterError
from playground.server import chat
from playground.types import GeneratedToken, GenerationResult, Sequence, Token
from playground.wire import inbound
from playground.wire.errors import validation_message
from playground.wire.inbound import ChatRequest

USER = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


def _request(**fields: Any) -> inbound.ChatRequest:
    return inbound.ChatRequest.model_validate({"messages": USER, **fields})


@pytest.mark.parametrize(
    ("fields", "grammar"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": SCHEMA, "strict": True},
                }
            },
            {"type": "json_schema", "value": {"schema": SCHEMA, "name": "x"}, "strict": True},  # the name goes on
        ),
        ({"response_format": {"type": "json_object"}}, {"type": "json", "value": {"type": "object"}}),
        ({"response_format": {"type": "json_object", "value": SCHEMA}}, {"type": "json", "value": SCHEMA}),
        (
            {"response_format": {"type": "json_schema", "value": {"name": "x", "schema": SCHEMA}}},
            {"type": "json_schema", "value": {"name": "x", "schema": SCHEMA}},
        ),
        ({"response_format": {"type": "regex", "value": "[0-9]+"}}, {"type": "regex", "value": "[0-9]+"}),
        ({"response_format": {"type": "text"}}, None),
        ({"structured_outputs": {"json": SCHEMA}}, {"type": "json", "value": SCHEMA}),
        ({"structured_outputs": {"regex": "a|b"}}, {"type": "regex", "value": "a|b"}),
        ({"structured_outputs": {"choice": ["x", "y"]}}, {"type": "choice", "value": ["x", "y"]}),
        ({"structured_outputs": {"grammar": 'start: "a"'}}, {"type": "grammar", "value": 'start: "a"'}),
        ({"guided_json": SCHEMA}, {"type": "json", "value": SCHEMA}),
        ({"guided_regex": "a+"}, {"type": "regex", "value": "a+"}),
        ({"guided_choice": ["p", "q"]}, {"type": "choice", "value": ["p", "q"]}),
        ({"guided_grammar": 'start: "b"'}, {"type": "grammar", "value": 'start: "b"'}),
        ({}, None),
    ],
)
def test_each_way_of_asking_for_a_constraint(fields: dict[str, Any], grammar: dict[str, Any] | None) -> None:
    params = inbound.chat_parameters(_request(**fields), seed=1)
    assert (params.grammar.model_dump() if params.grammar else None) == grammar


def test_tgi_s_own_tool_shapes_read_as_openai_s() -> None:
    """TGI's spec names a tool's schema `arguments`, leaves `type` out of an object tool_choice (huggingface_hub's
    ChatCompletionInputToolChoiceClass) and writes past calls' arguments as JSON objects: each means what OpenAI's
    form means."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}
    history = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "tool", "content": "sun"}]
    tgi = inbound.ChatRequest.model_validate(
        {
            "messages": history,
            "tools": [{"type": "function", "function": {"name": "weather", "arguments": schema}}],
            "tool_choice": {"function": {"name": "weather"}},
        }
    )
    openai_call = {**call, "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    openai = inbound.ChatRequest.model_validate(
        {
            "messages": [*history[:1], {**history[1], "tool_calls": [openai_call]}, history[2]],
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": schema}}],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
        }
    )
    assert inbound.chat_parameters(tgi, seed=1) == inbound.chat_parameters(openai, seed=1)
    assert tgi.messages[1].model_extra == openai.messages[1].model_extra
    assert tgi.messages[1].written_calls() == '{"name": "weather", "arguments": {"city": "Paris"}}'


def test_two_constraints_at_once_are_refused_by_name() -> None:
    with pytest.raises(ParameterError, match="response_format, guided_regex: give one constraint"):
        inbound.chat_parameters(_request(response_format={"type": "json_object"}, guided_regex="a"), seed=1)


def test_sampling_mapping() -> None:
    greedy = inbound.chat_parameters(_request(temperature=0, top_p=0.5, max_tokens=7, stop="END"), seed=3)
    assert (greedy.do_sample, greedy.temperature, greedy.top_p, greedy.sampling) == (False, None, None, False)
    assert (greedy.max_new_tokens, greedy.stop, greedy.seed) == (7, ["END"], 3)
    default = inbound.chat_parameters(_request(logprobs=True, top_logprobs=3, max_completion_tokens=5), seed=4)
    assert (default.do_sample, default.top_n_tokens, default.max_new_tokens, default.details) == (True, 3, 5, True)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"functions": [{"name": "f"}]}, "functions: OpenAI's deprecated form; use tools and tool_choice"),
        ({"ignore_eos": True}, "ignore_eos: needs max_tokens"),
        ({"echo": True}, "echo: not supported"),
        ({"modalities": ["text", "audio"]}, "modalities: only text output is supported"),
        ({"n": 9}, "n: at most 8 choices per request, got 9"),
        ({"top_logprobs": 2}, "top_logprobs: needs logprobs"),
    ],
)
def test_refused_parameters_name_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        inbound.chat_parameters(_request(**fields), seed=0)


def test_bad_response_format_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="type 'json_schema' needs json_schema"):
        _request(response_format={"type": "json_schema"})
    # OpenAI and vLLM refuse a schema without its name: an app that runs here must run there
    with pytest.raises(ValidationError, match=r"json_schema.name: required"):
        _request(response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA, "strict": True}})
    with pytest.raises(ValidationError, match="structured_outputs takes one of json, regex, .* not several"):
        _request(structured_outputs={"regex": "a", "choice": ["a"]})


@pytest.mark.parametrize(
    "fields",
    [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
        {"response_format": {"type": "json_object"}},
        {"guided_json": SCHEMA},
    ],
)
@pytest.mark.parametrize(
    ("options", "layout"), [({"disable_any_whitespace": True}, "compact"), ({"whitespace_pattern": ""}, "")]
)
def test_structured_outputs_options_apply_to_a_constraint_given_elsewhere(
    fields: dict[str, Any], options: dict[str, Any], layout: str
) -> None:
    """vLLM merges a response_format into structured_outputs: `parse()` with compact JSON was a 400."""
    grammar = inbound.constraint_of(_request(**fields, structured_outputs=options))
    assert grammar is not None and grammar["whitespace"] == layout


def test_a_constraint_beside_structured_outputs_options_is_named_by_its_own_field() -> None:
    req = _request(guided_json=SCHEMA, structured_outputs={"disable_any_whitespace": True})
    assert inbound.constraint_field(req) == "guided_json"


def test_structured_outputs_options_alone_are_refused_by_name() -> None:
    with pytest.raises(ParameterError, match="structured_outputs: its options apply to a constraint"):
        inbound.constraint_of(_request(structured_outputs={"disable_any_whitespace": True}))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [("{not json", "must be JSON text"), (5, "Input should be a valid string")],
)
def test_a_past_call_s_bad_arguments_are_named_where_the_client_wrote_them(arguments: Any, message: str) -> None:
    """The field was `messages[0][0].function.arguments`: the message's `tool_calls` was missing from it."""
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": arguments}}
    with pytest.raises(ValidationError) as caught:
        ChatRequest.model_validate({"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]})
    assert validation_message(caught.value.errors()) == f"messages[0].tool_calls[0].function.arguments: {message}"


@pytest.mark.parametrize("arguments", ["", "  ", None])
def test_a_past_call_without_arguments_text_is_a_call_without_arguments(arguments: Any) -> None:
    """vLLM reads empty or null arguments as `{}`: histories of tools without parameters carry `""` (a 400 here)."""
    call = {"id": "a", "type": "function", "function": {"name": "now", "arguments": arguments}}
    turn = ChatRequest.model_validate({"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]})
    assert turn.messages[0].model_extra["tool_calls"][0]["function"]["arguments"] == "{}"
    assert turn.messages[0].written_calls() == json.dumps({"name": "now", "arguments": {}})


def _seq(text: str, reason: str = "stop_sequence", stop: str | None = "END") -> Sequence:
    return Sequence(generated_text=text, finish_reason=reason, generated_tokens=3, stop_sequence=stop)


def test_trim_stop_cuts_at_the_stop_sequence() -> None:
    assert chat.trim_stop("abcEND", _seq("abcEND")) == "abc"
    assert chat.trim_stop("abcENDxy", _seq("abcENDxy")) == "abc"
    assert chat.trim_stop("abcEND", _seq("abcEND", reason="length", stop=None)) == "abcEND"


def test_stop_holdback_never_sends_part_of_the_stop() -> None:
    holdback = chat.StopHoldback(["END"])
    sent = [holdback.feed(piece) for piece in ["ab", "cE", "N", "D!"]]
    assert sent == ["ab", "c", "", ""]
    assert holdback.finish(_seq("abcEND!")) == ""
    released = chat.StopHoldback(["END"])
    assert [released.feed(p) for p in ["aE", "x"]] == ["a", "Ex"]
    assert released.finish(_seq("aEx", reason="length", stop=None)) == ""


def test_with_include_stop_str_in_output_the_stop_is_kept_and_only_what_follows_it_cut() -> None:
    """vLLM's include_stop_str_in_output: the text ends after the stop sequence's first match; streamed, nothing that
    may still become a stop is held back (it would be sent anyway), only what follows a match; a tool-call envelope's
    trigger (`held`) is still held back from its first character."""
    assert chat.trim_stop("abcEND", _seq("abcEND"), keep=True) == "abcEND"
    assert chat.trim_stop("abcENDxyEND", _seq("abcENDxyEND"), keep=True) == "abcEND"
    assert chat.trim_stop("abc", _seq("abc", reason="length", stop=None), keep=True) == "abc"
    holdback = chat.StopHoldback(["END"], keep=True)
    assert [holdback.feed(piece) for piece in ["ab", "cE", "N", "D!", "?"]] == ["ab", "cE", "N", "D", ""]
    assert holdback.finish(_seq("abcEND!?")) == ""
    envelope = chat.StopHoldback(["END"], keep=True, held=("<tool",))
    assert [envelope.feed(piece) for piece in ["a<t", "oo", "l>"]] == ["a", "", ""]
    assert envelope.finish(_seq("a<tool>", reason="length", stop=None)) == "<tool>"


def _result(text: str, reason: str) -> GenerationResult:
    top = [Token(id=1, text="<", logprob=-0.1), Token(id=2, text="é", logprob=-2.0)]
    tokens = [
        GeneratedToken(id=1, text="<", logprob=-0.1, raw_logprob=-0.5, mass_kept=0.9, top_tokens=top),
        GeneratedToken(id=0, text="</s>", logprob=-0.2, special=True),
    ]
    seq = Sequence(generated_text=text, finish_reason=reason, generated_tokens=2, tokens=tokens, seed=8)
    return GenerationResult(model_id="m", prompt="p", input_length=4, best=seq)


def test_completion_response_is_openai_shaped() -> None:
    from openai.types.chat import ChatCompletion

    req = _request(logprobs=True, top_logprobs=1)
    body = chat.completion_response("m", [_result("<", "eos_token"), _result("<", "length")], req)
    parsed = ChatCompletion.model_validate(body)
    assert [c.finish_reason for c in parsed.choices] == ["stop", "length"]
    entry = parsed.choices[0].logprobs.content[0]
    assert (entry.token, entry.logprob, entry.bytes) == ("<", -0.1, [60])
    assert [t.token for t in entry.top_logprobs] == ["<"]
    assert len(parsed.choices[0].logprobs.content) == 1  # the EOS token is not content
    assert body["choices"][0]["validation"]["valid"] is None
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}


def test_a_token_after_bytes_that_never_made_a_character_keeps_its_own_text_and_bytes() -> None:
    """A lone continuation byte (0x80) then " alone": the byte's U+FFFD lands in the second token's share of the
    answer, and its logprob entry read "\ufffd alone" with U+FFFD's bytes; OpenAI gives each token its own."""
    import torch

    from playground.decoding.sampling import StepScores, token_record
    from playground.server.chat import logprob_entry

    own = {5: "bytes:\\x80", 6: " alone"}
    logprobs = torch.log_softmax(torch.tensor([0.0] * 5 + [2.0, 1.0]), -1)
    step = StepScores(raw_logprobs=logprobs, logprobs=logprobs, final_scores=logprobs, mass_kept=1.0)
    tokens = [token_record(5, "", step, 2, own.get, set()), token_record(6, "\ufffd alone", step, 2, own.get, set())]
    entries = [logprob_entry(token, 2) for token in tokens]
    assert [(e["token"], e["bytes"]) for e in entries] == [("bytes:\\x80", [0x80]), (" alone", list(b" alone"))]
    assert "".join(t.text for t in tokens) == "\ufffd alone"  # the answer's text is unchanged
