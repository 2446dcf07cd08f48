"""Why a token is refused: each reason checked against what the constraint really accepts."""

from __future__ import annotations

import pytest

from playground.debug.check import check_text
from playground.debug.why import reasons_at
from playground.types import GrammarType

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "city": {"type": "string"},
        "sky": {"enum": ["clear", "cloudy"]},
        "age": {"type": "integer"},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
JSON = GrammarType(type="json", value=PERSON)
PHONE = GrammarType(type="regex", value=r"\d{3}-\d{4}")


def tokens(engine, text: str) -> list[int]:
    return engine.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_listed_keys_are_exactly_the_remaining_keys_the_constraint_accepts(engine) -> None:
    prefix = '{"name": "Ada", '
    wrong = tokens(engine, "zz")[0]
    unquoted = reasons_at(engine, JSON, prefix, [wrong]).reasons[0]
    assert not unquoted.allowed
    assert unquoted.reason == 'a key starts with `"`: the schema allows only the keys `city`, `sky`, `age` here'
    quoted = reasons_at(engine, JSON, prefix + '"', [wrong]).reasons[0]
    assert quoted.reason == "the schema allows only the keys `city`, `sky`, `age` here"
    for key in ("city", "sky", "age"):  # each listed key passes the masks...
        assert check_text(engine, JSON, prefix + f'"{key}"').first_refused.position > len(tokens(engine, prefix))
    for key in ("name", "zz"):  # ...and a key not listed is refused right there
        refused = check_text(engine, JSON, prefix + f'"{key}": 1}}').first_refused
        assert refused.offset <= len(prefix) + 1 + len(key)


def test_every_special_token_is_named_as_such_not_only_the_named_ones(engine) -> None:
    """SmolLM2 marks 17 added tokens special (`<file_sep>`, `<empty_output>`, ...), all_special_ids lists three: the
    others got a text token's reason ("a key starts with `\"`")."""
    added = sorted(i for i, t in engine.tokenizer.added_tokens_decoder.items() if t.special)
    assert len(added) > len(engine.tokenizer.all_special_ids)
    added = [i for i in added if i not in engine.runner.eos_ids]  # (its reason is the end of text's)
    for reason in reasons_at(engine, JSON, '{"name": "A", ', added).reasons:
        assert not reason.allowed and reason.reason.startswith("the special token `"), reason


def test_max_length_reached(engine) -> None:
    text = '{"name": "Adaxyz", "age": 3}'
    refused = check_text(engine, JSON, text).first_refused
    assert refused.reason == 'string name reached maxLength 5: only the closing `"` may follow'
    assert (
        len(text[len('{"name": "') : refused.offset])
        <= 5
        < len(text[len('{"name": "') : refused.offset]) + len(refused.text)
    )
    assert check_text(engine, JSON, '{"name": "Adaxy", "age": 3}').accepted  # 5 characters pass


def test_enum_and_integer_reasons(engine) -> None:
    assert check_text(engine, JSON, '{"name": "A", "sky": "rainy", "age": 1}').first_refused.reason == (
        "sky must be one of `clear`, `cloudy`"
    )
    assert check_text(engine, JSON, '{"name": "A", "age": 3.5}').first_refused.reason == (
        "age is an integer: no fraction or exponent"
    )


def test_end_of_text_names_the_missing_required_key(engine) -> None:
    result = check_text(engine, JSON, '{"name": "Ada"')
    refused = result.first_refused
    assert refused.position == len(result.tokens)  # every token passed; the end of text did not
    assert refused.reason == "end of text not allowed: required key `age` missing"
    assert refused.token in engine.runner.eos_ids
    assert result.validation.valid is False
    # inside a string the open string is the nearer cause (it named the key missing after it)
    assert check_text(engine, JSON, '{"name": "Ad').first_refused.reason == (
        "end of text not allowed: the JSON is not finished: the string at name is still open"
    )
    assert check_text(engine, JSON, '{"name": "Ada", "ag').first_refused.reason == (
        'end of text not allowed: the JSON is not finished: a key is still open (next: `e"`)'
    )


def test_a_key_written_twice_is_refused_where_its_closing_quote_comes_as_decoding_refuses_it(engine) -> None:
    free = GrammarType(type="json", value={"patternProperties": {"^x-[a-z]+$": {"type": "integer"}}})
    refused = check_text(engine, free, '{"x-a": 1, "x-a": 2}').first_refused
    assert refused.reason.endswith(
        "would write the key `x-a` a second time in this object: JSON Schema judges one value per key"
    )
    assert refused.offset == len('{"x-a": 1, "x-a')
    assert check_text(engine, free, '{"x-a": 1, "x-b": 2}').accepted


def test_closing_brace_names_the_missing_required_key(engine) -> None:
    refused = check_text(engine, JSON, '{"name": "Ada"}').first_refused
    assert refused.reason == "`}` not allowed: required key `age` missing in (root)"


def test_regex_needs_a_dash_and_a_digit(engine) -> None:
    assert check_text(engine, PHONE, "1234567").first_refused.reason == "the regex needs `-` here"
    assert check_text(engine, PHONE, "123-4567").accepted  # and `-` there passes
    refused = check_text(engine, PHONE, "12x").first_refused
    assert refused.reason == "the regex expects a digit here"
    digits_only = reasons_at(engine, PHONE, "123-", [tokens(engine, "5")[0], tokens(engine, "a")[0]])
    assert [r.allowed for r in digits_only.reasons] == [True, False]
    assert check_text(engine, PHONE, "123").first_refused.reason == "end of text not allowed: the regex needs `-` next"


def test_choices_left_after_a_prefix(engine) -> None:
    choices = GrammarType(type="choice", value=["yes", "no", "maybe"])
    assert check_text(engine, choices, "yesno").first_refused.reason == (
        "`yes` is a complete choice: only the end of text may follow"
    )
    assert check_text(engine, choices, "nah").first_refused.reason == (
        "the answer must be one of the choices `yes`, `no`, `maybe`"
    )


def test_a_choice_token_that_starts_right_and_goes_wrong_says_where(engine) -> None:
    """` d` starts with the space `a b` and `a c` need next: the reason names what went wrong after it (before: "the
    next character is one of ` `", which the token's first character is)."""
    choices = GrammarType(type="choice", value=["a b", "a c"])
    result = reasons_at(engine, choices, "a", [tokens(engine, " d")[0]])
    assert result.reasons[0].reason == "`a ` begins only `a b`, `a c`, and none goes on with `d`"


def test_number_keywords_are_named(engine) -> None:
    schema = GrammarType(
        type="json", value={"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}
    )
    assert check_text(engine, schema, '{"n": 4}').first_refused.reason == "n = 4 breaks multipleOf 3"


def test_a_bound_the_number_meets_is_not_the_reason(engine) -> None:
    """Any refused character after a bounded number read "age = 3 would break minimum 0": the comma after a last
    key, and `-` before a number that must not be negative, each has its own reason."""
    person = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 5}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    schema = GrammarType(type="json", value=person)
    extra = check_text(engine, schema, '{"name": "Ada", "age": 3, "x": 1}').first_refused.reason
    assert extra == "every key the schema allows in (root) is already there: only `}` can close it"
    negative = check_text(engine, schema, '{"name": "Ada", "age": -1}').first_refused.reason
    assert negative == "age has minimum 0: no negative number"


def test_eos_gate_reason_when_the_engine_cannot_enforce_a_keyword(engine) -> None:
    """outlines_core ignores multipleOf; the EOS gate holds the end back with jsonschema's own words."""
    schema = GrammarType(type="json", value={"type": "integer", "multipleOf": 3})
    result = reasons_at(engine, schema, "4", sorted(engine.runner.eos_ids), "outlines_core")
    assert result.eos_gated
    assert {r.reason for r in result.reasons} == {"end of text not allowed: at (root): 4 is not a multiple of 3"}


def test_the_eos_gate_refuses_the_end_the_mask_let_through(engine) -> None:
    """xgrammar ignores uniqueItems and allows only the end after "[1, 1]"; the EOS gate still refuses it."""
    schema = GrammarType(type="json", value={"type": "array", "items": {"type": "integer"}, "uniqueItems": True})
    result = check_text(engine, schema, "[1, 1]", "xgrammar")
    assert (result.accepted, result.validation.valid, result.agree) == (False, False, True)
    assert result.first_refused.position == len(result.tokens)
    assert result.first_refused.reason.startswith("end of text not allowed")


@pytest.mark.parametrize("engine_name", ["xgrammar", "outlines_core"])
def test_other_engines_are_walked_with_their_own_masks(engine, engine_name: str) -> None:
    result = check_text(engine, PHONE, "123-45x7", engine_name)
    assert result.constraint_engine == engine_name
    assert result.first_refused.offset == 6
    assert result.first_refused.reason == "the regex expects a digit here"


def test_a_key_json_schema_allows_but_the_engine_refuses_for_its_order_says_so(engine) -> None:
    city = tokens(engine, '"city')
    reason = reasons_at(engine, JSON, "{", city[:1]).reasons[0]  # `"`: allowed, a key starts here
    assert reason.allowed
    reason = reasons_at(engine, JSON, '{"', city[1:2]).reasons[0]
    assert not reason.allowed
    assert reason.reason == (
        "the schema allows only the keys `name` here (llguidance writes keys in the schema's order: "
        "`city` may only follow `name`)"
    )
    other = reasons_at(engine, JSON, '{"', tokens(engine, '"zz')[1:2]).reasons[0]  # no key of the schema
    assert other.reason == "the schema allows only the keys `name` here"


def test_llguidance_s_view_reads_a_schema_leniently_where_auto_does(engine) -> None:
    """llguidance refuses `not` by name and `auto` decodes with its lenient reading: the reasons' own llguidance view
    (forced text, what a token's start fits) reads it so too, rather than going without."""
    from playground.constraints import Constraint
    from playground.debug.state import llguidance_matcher

    schema = {"type": "object", "properties": {"a": {"const": "apple"}}, "required": ["a"], "not": {"required": ["b"]}}
    ids = tokens(engine, '{"a": "')
    matcher = llguidance_matcher(engine, Constraint.json_schema(schema, layout="compact"), ids)
    assert matcher is not None and matcher.compute_ff_bytes() == b'apple"'
