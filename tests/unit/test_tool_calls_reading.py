"""Tool calls without a model: each tool's `$defs` moved into the one call schema, parallel calls as a list,
and calls read out of text as far as it is written (what the stream sends)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from playground.constraints import matching
from playground.errors import InvalidConstraintError, ParameterError
from playground.server.tool_stream import ToolStream
from playground.types import ToolSpec
from playground.wire import inbound, tool_calls, tool_formats, tool_schema, tools

OWNER = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
PET = {
    "$defs": {"Owner": OWNER},
    "type": "object",
    "properties": {"kind": {"enum": ["cat", "dog"]}, "owner": {"$ref": "#/$defs/Owner"}},
    "required": ["kind", "owner"],
}
TREE = {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#"}}}}
ZONE = {"definitions": {"Z": {"enum": ["UTC"]}}, "type": "object", "properties": {"zone": {"$ref": "#/definitions/Z"}}}


def _tool(name: str, parameters: dict[str, Any]) -> ToolSpec:
    return ToolSpec.model_validate({"type": "function", "function": {"name": name, "parameters": parameters}})


def test_refs_resolve_inside_the_combined_schema() -> None:
    schema = tool_schema.call_schema([_tool("pet", PET), _tool("tree", TREE), _tool("zone", ZONE)])
    assert set(schema["$defs"]) == {"pet__Owner", "tree", "zone__Z"}
    validator = jsonschema.Draft202012Validator(schema)
    good = {"name": "pet", "arguments": {"kind": "cat", "owner": {"name": "Ann"}}}
    assert validator.is_valid(good)
    assert not validator.is_valid({"name": "pet", "arguments": {"kind": "cat", "owner": {}}})
    assert validator.is_valid({"name": "tree", "arguments": {"children": [{"children": []}]}})
    assert not validator.is_valid({"name": "tree", "arguments": {"children": [{"children": 3}]}})
    assert not validator.is_valid({"name": "zone", "arguments": {"zone": "CET"}})


def test_a_tool_without_parameters_takes_none_and_non_object_parameters_are_refused() -> None:
    bare = ToolSpec.model_validate({"type": "function", "function": {"name": "ping"}})
    validator = jsonschema.Draft202012Validator(tool_schema.call_schema([bare]))
    assert validator.is_valid({"name": "ping", "arguments": {}})
    assert not validator.is_valid({"name": "ping", "arguments": {"host": "x"}})  # OpenAI: an empty parameter list
    tool_schema.check([bare, _tool("any", {"type": ["object", "null"]})])
    with pytest.raises(
        InvalidConstraintError, match=r'tools\[1\].function.parameters \(word\): .*got "type": "string"'
    ):
        tool_schema.check([bare, _tool("word", {"type": "string"})])


def test_a_ref_key_inside_data_is_left_alone() -> None:
    body, _ = tool_schema.relocated(_tool("t", {"type": "object", "const": {"$ref": "#/x"}}))
    assert body["const"] == {"$ref": "#/x"}


def test_parallel_calls_are_a_list_of_one_to_eight() -> None:
    req = inbound.ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "pet", "parameters": PET}}],
            "tool_choice": "required",
            "parallel_tool_calls": True,
        }
    )
    schema = tools.grammar(req, None)["value"]  # type: ignore[index]
    assert (schema["type"], schema["minItems"], schema["maxItems"]) == ("array", 1, 8)
    one = tools.grammar(req.model_copy(update={"parallel_tool_calls": False}), None)["value"]  # type: ignore[index]
    assert one["type"] == "object"
    text = '[{"name": "pet", "arguments": {"kind": "cat", "owner": {"name": "A"}}}, {"name": "pet", "arguments": {}}]'
    message, finish, _ = tools.answer(req, text)
    assert finish == "tool_calls" and [c["function"]["arguments"] for c in message["tool_calls"]] == [
        '{"kind": "cat", "owner": {"name": "A"}}',
        "{}",
    ]


def test_a_forced_call_a_stop_sequence_cut_is_no_call_and_no_leaked_markup() -> None:
    pet = {"type": "function", "function": {"name": "pet", "parameters": PET}}
    ask = {"messages": [{"role": "user", "content": "x"}], "tools": [pet]}
    cut = '{"name": "pet", "arguments": {"'  # stop=["kind"] matched inside the call
    for choice in ("required", {"type": "function", "function": {"name": "pet"}}):
        req = inbound.ChatRequest.model_validate({**ask, "tool_choice": choice})
        message, finish, notes = tools.answer(req, cut, "stop_sequence")
        assert (message["content"], finish) == ("", "stop") and "stop sequence cut the tool call" in notes[0]
    auto = inbound.ChatRequest.model_validate({**ask, "tool_choice": "auto"})
    assert tools.answer(auto, '{"a": 1', "stop_sequence")[0]["content"] == '{"a": 1'  # text under auto stays text


def test_partial_calls_appear_once_named_and_grow() -> None:
    text = '{"name": "get_weather", "arguments": {"city": "Par'
    assert tool_calls.partial('{"name": "get_wea', None, False) == []
    (call,) = tool_calls.partial(text, None, False)
    assert (call.name, call.arguments, call.complete) == ("get_weather", '{"city": "Par', False)
    (done,) = tool_calls.partial(text + 'is", "n": [1, "}"]}}', None, False)
    assert done.complete and json.loads(done.arguments) == {"city": "Paris", "n": [1, "}"]}
    two = tool_calls.partial('[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1', None, True)
    assert [(c.name, c.arguments, c.complete) for c in two] == [("a", "{}", True), ("b", '{"x": 1', False)]
    assert tool_calls.value_end('{"a": 12} ', 6) == 8 and tool_calls.value_end('{"a": 12', 6) is None


def test_the_stream_sends_the_head_then_argument_pieces_that_add_up() -> None:
    req = inbound.ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "pet", "parameters": PET}}],
            "tool_choice": "required",
        }
    )
    stream = ToolStream(req, [])
    text = '{"name": "pet", "arguments": {"kind": "cat", "owner": {"name": "Ann"}}}'
    deltas = [d for i in range(0, len(text), 3) for d in stream.feed(text[i : i + 3])]
    head, *pieces = [d["tool_calls"][0] for d in deltas]
    assert head["id"].startswith("call_") and head["function"] == {"name": "pet", "arguments": ""}
    assert len(pieces) > 3 and all(set(p) == {"index", "function"} for p in pieces)
    assert "".join(p["function"]["arguments"] for p in pieces) == '{"kind": "cat", "owner": {"name": "Ann"}}'


def test_free_text_under_auto_streams_as_content() -> None:
    req = inbound.ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "pet", "parameters": PET}}],
        }
    )
    stream = ToolStream(req, [])
    assert (
        stream.feed("  ") == []
        and stream.feed("Hi") == [{"content": "  Hi"}]
        and stream.feed("!") == [{"content": "!"}]
    )


def test_json_nested_past_the_parser_is_no_call() -> None:
    assert tool_calls.final("[" * 100_000 + "]" * 100_000, None, parallel=False) is None


def test_auto_with_parallel_calls_compiles_for_any_tool() -> None:
    """OpenAI's default `parallel_tool_calls: true` under `auto`: free text must not start like a call, `{` or
    `[`; the `[` inside the regex class was read as a nested class, and every such request was refused."""
    req = inbound.ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "ping", "parameters": {"type": "object"}}}],
            "parallel_tool_calls": True,
        }
    )
    grammar = tools.grammar(req, None)
    assert grammar is not None and grammar["type"] == "grammar"
    assert "text: /[^{\\[][\\s\\S]*/" in grammar["value"]


def test_a_continued_final_message_is_read_with_the_answer_into_the_call() -> None:
    """continue_final_message with a forced call: the constraint matched the prefix and the new text together,
    so the call is read from both; before, the new text alone parsed as no call and the answer was dropped."""
    weather = _tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}})
    req = inbound.ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": '{"city": "'}],
            "tools": [weather.model_dump()],
            "tool_choice": "required",
            "continue_final_message": True,
            "add_generation_prompt": False,
        }
    )
    prefix, text = '{"name": "get_weather", "arguments": {"city": "', 'Paris"}}'
    message, finish, notes = tools.answer(req, text, "eos_token", prefix=prefix)
    assert (finish, notes) == ("tool_calls", [])
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    stream = ToolStream(req, [], prefix=prefix)
    deltas = [delta for piece in ("Par", 'is"}}') for delta in stream.feed(piece)]
    assert deltas[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    arguments = "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in deltas if "tool_calls" in d)
    assert json.loads(arguments) == {"city": "Paris"}
    auto = req.model_copy(update={"tool_choice": "auto"})
    assert tools.answer(auto, " and more", "eos_token", prefix="Free text")[0]["content"] == " and more"


def test_llama3_parallel_calls_leave_their_separators_out_and_a_call_cut_after_one_is_cut_off() -> None:
    """Llama 3's calls are bare objects joined by `; `: the separators are no content, and a call max_tokens cut
    right after a separator ends the answer `length` with the whole calls before it (it was `tool_calls`, with
    `; ; {"name": "a` as content)."""
    weather = _tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}})
    req = inbound.ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [weather.model_dump()],
            "tool_choice": "required",
            "parallel_tool_calls": True,
        }
    )
    llama3 = tool_formats.by_name("llama3_json")
    call = '{"name": "get_weather", "parameters": {"city": "Oslo"}}'
    message, finish, notes = tools.answer(req, f"{call}; {call}", "eos_token", fmt=llama3)
    assert (finish, notes, message["content"]) == ("tool_calls", [], None) and len(message["tool_calls"]) == 2
    message, finish, notes = tools.answer(req, f'{call}; {call}; {{"name": "get_w', "length", fmt=llama3)
    assert (finish, notes, message["content"]) == ("length", [tools.CUT_OFF], None)
    assert [c["function"]["arguments"] for c in message["tool_calls"]] == ['{"city": "Oslo"}'] * 2


def test_parallel_calls_cut_by_max_tokens_keep_the_whole_calls_before_the_cut() -> None:
    """Without a template's envelope too: the JSON list's whole calls came back as nothing (content "")."""
    weather = _tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}})
    fields = {"messages": [{"role": "user", "content": "x"}], "tools": [weather.model_dump()]}
    req = inbound.ChatRequest.model_validate({**fields, "tool_choice": "required", "parallel_tool_calls": True})
    call = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    message, finish, notes = tools.answer(req, f'[{call}, {call}, {{"name": "get_weather", "argu', "length")
    assert (finish, notes, message["content"]) == ("length", [tools.CUT_OFF], None)
    assert [c["function"]["arguments"] for c in message["tool_calls"]] == ['{"city": "Oslo"}'] * 2
    first_cut = tools.answer(req, '[{"name": "get_weather", "arguments": {"ci', "length")
    assert first_cut == ({"role": "assistant", "content": ""}, "length", [tools.CUT_OFF])
    choice = {"type": "function", "function": {"name": "get_weather"}}
    named = inbound.ChatRequest.model_validate({**fields, "tool_choice": choice})
    assert tools.answer(named, '{"city": "Os', "length")[0] == {"role": "assistant", "content": ""}


def test_auto_ignores_a_keyword_llguidance_cannot_enforce_and_says_so() -> None:
    """pydantic's `set[...]` fields carry uniqueItems; `auto` refused such a tool where `required` read it leniently."""
    tags = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True}},
    }
    req = inbound.ChatRequest.model_validate(
        {"messages": [{"role": "user", "content": "x"}], "tools": [_tool("tag", tags).model_dump()]}
    )
    grammar = tools.grammar(req, None)
    assert grammar is not None and '"lenient": true' in grammar["value"]


def _with_format(response_format: dict[str, Any], **fields: Any) -> inbound.ChatRequest:
    weather = _tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}})
    return inbound.ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [weather.model_dump()],
            "response_format": response_format,
            **fields,
        }
    )


VERDICT = {"type": "object", "properties": {"sunny": {"type": "boolean"}}}
FORMAT = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT}}


@pytest.mark.parametrize(
    ("text", "fits"),
    [
        ('{"sunny": true}', True),
        ('{"name": "get_weather", "arguments": {"city": "Oslo"}}', True),
        ('{"sunny": true, "rain": false}', False),  # the format's objects are closed
        ("free text", False),
    ],
)
def test_beside_a_response_format_auto_is_a_call_or_an_answer_in_the_format(text: str, fits: bool) -> None:
    """OpenAI's agents send tools and a response format together; it was a 400."""
    grammar = inbound.chat_parameters(_with_format(FORMAT), 1).grammar
    assert grammar is not None and grammar.type == "grammar"
    assert matching.full_match("grammar", grammar.value, text).ok is fits


def test_beside_a_response_format_an_answer_cut_off_is_content_and_a_call_is_a_call() -> None:
    req = _with_format(FORMAT)
    cut = tools.answer(req, '{"sunny": tr', "length", formatted=True)
    assert cut == ({"role": "assistant", "content": '{"sunny": tr'}, "length", [])
    call = tools.answer(req, '{"name": "get_weather", "arguments": {"city": "Oslo"}}', "eos_token", formatted=True)
    assert call[1] == "tool_calls" and call[0]["tool_calls"][0]["function"]["name"] == "get_weather"
    half = tools.answer(req, '{"name": "get_weather", "arguments": {"ci', "length", formatted=True)
    assert half == ({"role": "assistant", "content": ""}, "length", [tools.CUT_OFF])


def test_beside_a_response_format_a_forced_call_ignores_it_and_other_formats_are_refused() -> None:
    required = inbound.chat_parameters(_with_format(FORMAT, tool_choice="required"), 1).grammar
    assert required is not None and required.type == "json" and "arguments" in required.value["properties"]
    for choice in ("auto", "required", {"type": "function", "function": {"name": "get_weather"}}):  # forced too
        with pytest.raises(ParameterError, match="a response format must be a JSON schema .*, not regex"):
            inbound.chat_parameters(_with_format({"type": "regex", "value": "a+"}, tool_choice=choice), 1)


def test_a_call_a_named_tool_choice_forced_ends_with_stop_as_openai_and_vllm_answer() -> None:
    """OpenAI and vLLM end a call the tool_choice named with finish_reason "stop" (required and auto: "tool_calls"),
    in our JSON calls and in a template's envelope alike; it was "tool_calls" for every call."""
    weather = _tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}})
    named = {"type": "function", "function": {"name": "get_weather"}}
    body = {"messages": [{"role": "user", "content": "x"}], "tools": [weather.model_dump()]}
    llama3 = tool_formats.by_name("llama3_json")
    call = '{"name": "get_weather", "parameters": {"city": "Oslo"}}'
    for choice, finish in [(named, "stop"), ("required", "tool_calls")]:
        req = inbound.ChatRequest.model_validate({**body, "tool_choice": choice})
        message, got, _ = tools.answer(
            req, '{"city": "Oslo"}' if choice is named else call.replace("parameters", "arguments"), "eos_token"
        )
        assert (got, message["tool_calls"][0]["function"]["name"]) == (finish, "get_weather")
        message, got, _ = tools.answer(req, call, "eos_token", fmt=llama3)
        assert (got, message["tool_calls"][0]["function"]["name"]) == (finish, "get_weather")
