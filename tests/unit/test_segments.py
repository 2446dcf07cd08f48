"""Segment constraints without a model: both structural-tag forms read into one spec, the Lark grammar llguidance
compiles from it accepting exactly what the verdict calls valid, and tool calls in a template's envelope
(tool_choice auto included) written and read back."""

from __future__ import annotations

import json

import pytest

from playground.constraints import Constraint, matching, segments
from playground.errors import InvalidConstraintError, UnsupportedConstraintError
from playground.types import ToolSpec
from playground.wire import tool_formats

POINT = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"], "additionalProperties": False}
FENCE = {"structures": [{"begin": "```json\n", "schema": POINT, "end": "\n```"}], "triggers": ["```json"]}


def _tag(**flags: bool) -> dict:
    tag = {"begin": "```json\n", "content": {"type": "json_schema", "json_schema": POINT}, "end": "\n```"}
    return {"format": {"type": "triggered_tags", "triggers": ["```json"], "tags": [tag], **flags}}


def _parses(spec: dict, text: str) -> bool:
    outcome = matching.full_match("grammar", segments.to_lark(spec), text)
    assert outcome.ok is not None, outcome.message
    return outcome.ok


def test_both_forms_read_into_one_spec_that_round_trips() -> None:
    legacy = Constraint.structural_tag({"type": "structural_tag", **FENCE})
    newer = Constraint.structural_tag(_tag())
    assert legacy == newer and legacy.kind == "structural_tag"
    assert Constraint.from_grammar(legacy.to_grammar()) == legacy
    assert Constraint.parse("structural_tag", json.dumps(FENCE)) == legacy


@pytest.mark.parametrize(
    ("spec", "text", "valid"),
    [
        (FENCE, "no fence at all", True),
        (FENCE, 'say ```json\n{"x": 1}\n``` and ```json\n{"x": 2}\n``` done', True),
        (FENCE, 'say ```json\n{"x": "one"}\n```', False),
        (FENCE, 'say ```json\n{"x": 1}', False),
        (FENCE, "a stray ```json that opens nothing", False),
        (_tag(at_least_one=True), 'text first ```json\n{"x": 1}\n```', False),
        (_tag(at_least_one=True), '```json\n{"x": 1}\n``` then text', True),
        (_tag(at_least_one=True), "only text", False),
        (_tag(stop_after_first=True), 'pre ```json\n{"x": 1}\n```', True),
        (_tag(stop_after_first=True), 'pre ```json\n{"x": 1}\n``` more', False),
    ],
)
def test_the_grammar_accepts_what_the_verdict_calls_valid(spec: dict, text: str, valid: bool) -> None:
    canonical = segments.parse(spec)
    verdict = segments.validate(canonical, text)
    assert verdict.valid is valid, verdict.message
    assert _parses(canonical, text) is valid


def test_each_segment_has_its_own_verdict_and_place() -> None:
    text = 'a ```json\n{"x": 1}\n``` b ```json\n{"x": "no"}\n```'
    verdict = Constraint.structural_tag(FENCE).validate(text)
    first, second = verdict.segments
    assert (first.valid, second.valid) == (True, False)
    assert text[first.start : first.end] == first.content == '{"x": 1}'
    assert "segment 2 is invalid" in verdict.message and "'no' is not of type 'integer'" in second.message
    assert "segments" not in Constraint.json_schema(POINT).validate("{}").model_dump()


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        ({"structures": [], "triggers": ["a"]}, InvalidConstraintError, "structures must list 1 to 64"),
        (
            {"structures": [{"begin": "<b>", "schema": {}, "end": ""}], "triggers": ["<a>"]},
            InvalidConstraintError,
            "none of the triggers",
        ),
        (
            {"structures": [{"begin": "<a>", "schema": {"type": "nope"}}], "triggers": ["<a>"]},
            InvalidConstraintError,
            "structures[0].schema",
        ),
        ({"format": {"type": "any_text"}}, UnsupportedConstraintError, "format 'any_text' is not supported"),
        (
            {"structures": [{"begin": "<a>", "schema": {}}], "triggers": ["<a>"], "extra": 1},
            InvalidConstraintError,
            "unknown keys ['extra']",
        ),
        ("{not json", InvalidConstraintError, "invalid JSON in the structural tag"),
    ],
)
def test_bad_tags_name_their_fault(value: object, error: type, words: str) -> None:
    with pytest.raises(error, match=None) as caught:
        Constraint.structural_tag(value)
    assert words in caught.value.message


def test_special_token_markers_are_written_by_id() -> None:
    """A marker that is one special token of the tokenizer is that token in the grammar, never its spelling."""
    spec = segments.parse({"structures": [{"begin": "<tc>", "schema": POINT, "end": "</tc>"}], "triggers": ["<tc>"]})
    lark = segments.to_lark(spec, lambda text: [{"<tc>": 7, "</tc>": 8}.get(text, text)])
    assert "seg0: <[7]> body0" in lark and "<[8]>" in lark and "stop=" not in lark


TOOLS = [
    ToolSpec.model_validate({"type": "function", "function": {"name": "get_weather", "parameters": POINT}}),
    ToolSpec.model_validate({"type": "function", "function": {"name": "get_time", "parameters": {}}}),
]
HERMES = tool_formats.by_name("hermes")


def _call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@pytest.mark.parametrize(
    ("text", "valid", "calls"),
    [
        ("I'd rather just answer.", True, []),
        ("Let me check. " + _call("get_weather", '{"x": 3}'), True, [("get_weather", '{"x": 3}')]),
        (_call("get_weather", '{"x": "3"}'), False, [("get_weather", '{"x": "3"}')]),
        (_call("get_weather", '{"x": 3}') + "\n" + _call("get_time", "{}"), False, None),
        (_call("get_nothing", "{}"), False, None),
    ],
)
def test_auto_tool_choice_in_the_template_envelope(text: str, valid: bool, calls: list | None) -> None:
    """tool_choice auto, one call at most: free text, or text then one call whose arguments are its tool's."""
    spec = segments.parse(tool_formats.spec(HERMES, TOOLS, "auto", parallel=False))
    assert _parses(spec, text) is valid
    assert segments.validate(spec, text).valid is valid
    if calls is not None:
        assert tool_formats.read(HERMES, TOOLS, "auto", False, text).calls == calls


VERDICT = {"type": "object", "properties": {"sunny": {"type": "boolean"}}, "required": ["sunny"]}


@pytest.mark.parametrize(
    ("text", "valid", "calls"),
    [
        ('{"sunny": true}', True, []),
        (_call("get_weather", '{"x": 3}'), True, [("get_weather", '{"x": 3}')]),
        ('{"sunny": "yes"}', False, []),
        ("I'd rather just answer.", False, []),
        ('{"sunny": true} ' + _call("get_weather", '{"x": 3}'), False, None),
    ],
)
def test_beside_a_response_format_auto_is_calls_or_an_answer_in_its_schema(
    text: str, valid: bool, calls: list | None
) -> None:
    """xgrammar's `or` of the envelopes and a json_schema: calls, or the answer in the format; no free text."""
    value = tool_formats.spec(HERMES, TOOLS, "auto", parallel=False, answer=VERDICT)
    spec = segments.parse(value)
    assert spec["answer"] == VERDICT and segments.to_xgrammar(spec)["format"]["type"] == "or"
    assert _parses(spec, text) is valid
    assert segments.validate(spec, text).valid is valid
    if calls is not None:
        assert tool_formats.read(HERMES, TOOLS, "auto", False, text).calls == calls
    assert Constraint.structural_tag(value) == Constraint.from_grammar(Constraint.structural_tag(value).to_grammar())


@pytest.mark.parametrize(
    "elements",
    [
        [{"type": "json_schema", "json_schema": POINT}],
        [{"type": "triggered_tags", "triggers": ["a"], "tags": []}, {"type": "json_schema", "json_schema": POINT}],
        [{"type": "json_schema", "json_schema": POINT}, {"type": "json_schema", "json_schema": POINT}],
    ],
)
def test_other_ors_are_refused_by_name(elements: list) -> None:
    with pytest.raises(UnsupportedConstraintError, match="format `or` is supported here with two elements"):
        segments.parse({"format": {"type": "or", "elements": elements}})


def test_parallel_required_calls_are_read_back_one_by_one() -> None:
    text = _call("get_weather", '{"x": 1}') + "\n" + _call("get_time", "{}")
    spec = segments.parse(tool_formats.spec(HERMES, TOOLS, "required", parallel=True))
    assert _parses(spec, text) and not _parses(spec, "free text " + text)
    read = tool_formats.read(HERMES, TOOLS, "required", True, text)
    assert read.calls == [("get_weather", '{"x": 1}'), ("get_time", "{}")] and read.content == ""
    assert [v.valid for v in read.verdicts] == [True, True]
    cut = tool_formats.read(HERMES, TOOLS, "required", True, text[:-20])
    assert cut.cut_off and len(cut.calls) == 1


@pytest.mark.parametrize(
    ("template", "family"),
    [
        ("{% for t in tools %}{{ t }}{% endfor %}<tool_call>\n{...}\n</tool_call>", "hermes"),
        ("{% if tools %}[AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]", "mistral"),
        (
            '{{ tools }} Respond in the format {"name": function name, "parameters": dictionary of argument name and '
            "its value}.",
            "llama3_json",
        ),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", None),
    ],
)
def test_families_are_told_from_the_template_text(template: str, family: str | None) -> None:
    found = tool_formats.detect(template)
    assert (found.name if found else None) == family


@pytest.mark.parametrize("family", tool_formats.FAMILIES, ids=lambda f: f.name)
def test_every_family_writes_calls_its_grammar_takes_and_reads_them_back(family: tool_formats.ToolFormat) -> None:
    calls = [("get_weather", '{"x": 1}'), ("get_time", "{}")]
    text = family.separator.join(family.call_begin(name) + arguments + family.end for name, arguments in calls)
    spec = segments.parse(tool_formats.spec(family, TOOLS, "required", parallel=True))
    assert _parses(spec, text) and not _parses(spec, text.replace('{"x": 1}', '{"x": "1"}'))
    assert tool_formats.read(family, TOOLS, "required", True, text).calls == calls
    streamed = tool_formats.partial(family, TOOLS, text[: text.index('{"x": 1}') + 4])
    assert [(c.name, c.arguments, c.complete) for c in streamed] == [("get_weather", '{"x"', False)]
