"""Every check reads regexes and grammars as the engines do, and finishes in time linear in the text."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest

from playground.constraints import Constraint, check_constraint
from playground.errors import InvalidConstraintError

# A liveness bound, not a speed assert: backtracking would take hours (each extra character doubles it).
FINISHES_WITHIN_S = 60


def finishes(call: Callable[[], Any]) -> Any:
    """The call's result; fails the test when the call is still running after FINISHES_WITHIN_S."""
    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(FINISHES_WITHIN_S)
    assert result, f"still running after {FINISHES_WITHIN_S} s: the check is not linear in the text"
    return result[0]


def test_a_backtracking_regex_gets_its_verdict_at_once():
    verdict = finishes(lambda: Constraint.regex("(a+)+b").validate("a" * 5000))
    assert verdict.valid is False
    assert finishes(lambda: Constraint.regex("(a+)+b").validate("a" * 5000 + "b")).valid is True


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^(a+)+$"},
        {"type": "object", "patternProperties": {"^(a+)+$": {}}, "additionalProperties": False},
        {"type": "object", "patternProperties": {"^(a+)+$": {}}, "unevaluatedProperties": False},
        {"type": "object", "additionalProperties": {"type": "string", "pattern": "(x+x+)+y"}},
        {"type": "string", "allOf": [{"$schema": "http://json-schema.org/draft-07/schema#", "pattern": "^(a+)+$"}]},
    ],
)
def test_backtracking_json_patterns_get_their_verdict_at_once(schema):
    evil = "a" * 3000 + "!"
    instance = evil if schema.get("type") == "string" else {evil: 1, "k": "x" * 3000}
    verdict = finishes(lambda: Constraint.json_schema(schema).validate(json.dumps(instance)))
    assert verdict.valid is False


def test_rust_regex_syntax_is_accepted_and_the_verdict_agrees():
    letters = Constraint.regex(r"\p{L}{3,6}")
    assert letters.validate("héllo").valid is True
    assert letters.validate("hé").valid is False
    assert check_constraint("regex", r"\p{L}{3,6}") is None
    schema = Constraint.json_schema({"type": "string", "pattern": r"^\p{Lu}\p{Ll}+$"})
    assert schema.validate('"Émile"').valid is True
    assert schema.validate('"émile"').valid is False


def test_json_patterns_search_with_anchors_as_json_schema_says():
    assert Constraint.json_schema({"type": "string", "pattern": "b+"}).validate('"abba"').valid is True
    anchored = Constraint.json_schema({"type": "string", "pattern": "^a|b$"})
    assert anchored.validate('"ax"').valid is True
    assert anchored.validate('"xb"').valid is True
    assert anchored.validate('"xbx"').valid is False


def test_patterns_the_engines_cannot_read_are_refused_at_parse_time():
    with pytest.raises(InvalidConstraintError, match="look-around"):
        Constraint.json_schema({"type": "string", "pattern": "^(?!admin).*$"})
    with pytest.raises(InvalidConstraintError, match="patternProperties"):
        Constraint.json_schema({"patternProperties": {"(a)\\1": {}}})


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("^[[:alpha:]]+$", "`[` at position 2 is inside a character class"),  # POSIX alpha to Rust, `[:alph` to ECMA
        ("^[a[bc]]{2}$", "`[` at position 3 is inside a character class"),
        ("^[a-z&&[^aeiou]]{3}$", "`&&` at position 5 is a set operation"),
        ("[+--]", "`--` at position 2"),
    ],
)
def test_patterns_the_engines_read_otherwise_than_json_schema_are_refused(pattern, words):
    """The engines read Rust's classes: the mask wrote "The" for `^[[:alpha:]]+$` and the verdict (same reading)
    passed it, where JSON Schema (ECMA-262) and every other validator refuse it."""
    with pytest.raises(InvalidConstraintError, match="ECMA-262") as refused:
        Constraint.json_schema({"type": "string", "pattern": pattern})
    assert words in refused.value.message
    with pytest.raises(InvalidConstraintError, match="ECMA-262"):
        Constraint.json_schema({"type": "object", "patternProperties": {pattern: {}}})
    # written as ECMA reads them, they are what they were
    for same in (r"^[\[:alpha:\]]+$", r"^[a\[bc]\]{2}$", r"[+\--]", r"[\w.-]+@[a-z]+\.[a-z]{2,}"):
        Constraint.json_schema({"type": "string", "pattern": same})


def test_the_regex_format_is_read_in_the_engines_dialect():
    regexes = Constraint.json_schema({"type": "string", "format": "regex"})
    assert regexes.validate(json.dumps(r"\p{L}+")).valid is True
    assert regexes.validate(json.dumps("(?=a)")).valid is False
    # a class Rust reads otherwise than ECMA is refused in the schema's own patterns, but an answer's regex is one
    assert regexes.validate(json.dumps("[[:alpha:]]+")).valid is True


def test_gbnf_grammars_are_accepted_and_get_a_verdict():
    yes_no = Constraint.grammar('root ::= "yes" | "no"')
    assert yes_no.validate("yes").valid is True
    assert yes_no.validate("maybe").valid is False
    assert "not GBNF" in check_constraint("grammar", "root ::= [")
    # Lark without its start rule: the message names what is missing, not GBNF's `::=` alone
    assert "not Lark (no `start:` rule) and not GBNF: Expected ::=" in check_constraint("grammar", 'foo: "x"')
    # Lark's line(column) in a GBNF grammar is a place in its Lark conversion: the message shows that line
    converted = check_constraint("grammar", 'root ::= "x"{3,1}')
    assert "at 3(8)" in converted and 'line 3 of the Lark this GBNF converts to: start: "x"{3,1}' in converted


@pytest.mark.parametrize(
    ("grammar", "good", "bad"),
    [
        # a rule named start: the converter names root so, and refused the grammar
        ('root ::= start\nstart ::= "x" "start" [s]  # start', "xstarts", "xy"),
        # llama.cpp's \u and \U escapes, in literals and classes (the converter wrote \u00e9 as \ue9)
        ('root ::= "\\u00e9" [\\u00e0-\\u00ff] "\\U0001F600" "\\u0041"', "éà😀A", "éa😀A"),
        ('root ::= "\\\\u0041"', "\\u0041", "A"),  # an escaped backslash before u: no escape
        # a repeated repetition: the converter wrote /[0-9]/{2,2}* and "a"+?, which Lark cannot read
        ("root ::= ([0-9]{2})*", "1234", "123"),
        ('root ::= ("a"+)? "b"', "aab", "ab b"),
        ('root ::= (("a")*)* "b"', "aaab", "ba"),
        ('root ::= (("x" | "y"){1,2} ",")+', "xy,x,", "xyx,"),
    ],
)
def test_gbnf_reads_llama_cpp_grammars_the_converter_missed(grammar: str, good: str, bad: str) -> None:
    constraint = Constraint.grammar(grammar)
    assert constraint.validate(good).valid is True
    assert constraint.validate(bad).valid is False


def test_an_ambiguous_grammar_gets_a_bounded_verdict():
    ambiguous = Constraint.grammar('start: x\nx: x x | x x x | "a"')
    assert finishes(lambda: ambiguous.validate("a" * 60)).valid is True
    verdict = finishes(lambda: ambiguous.validate("a" * 5000))
    assert verdict.valid is None and "could not check" in verdict.message


def test_blank_lines_in_a_grammar_cost_nothing():
    grammar = finishes(lambda: Constraint.grammar("\n" * 40000 + 'start: "a"\n' + " \n" * 40000))
    assert grammar.validate("a").valid is True


def test_json_pattern_classes_are_ascii_as_in_json_schema_while_regex_classes_are_unicode():
    digits = Constraint.json_schema({"type": "string", "pattern": r"^\d+$"})
    assert digits.validate('"42"').valid is True
    assert digits.validate('"٤٢"').valid is False
    assert Constraint.regex(r"\d+").validate("٤٢").valid is True


def test_unique_items_of_objects_are_compared_in_linear_time_with_json_equality():
    unique = Constraint.json_schema({"type": "array", "uniqueItems": True})
    many = json.dumps([{"k": i} for i in range(20000)])
    assert finishes(lambda: unique.validate(many)).valid is True
    assert unique.validate('[{"a": 1, "b": 2}, {"b": 2, "a": 1.0}]').valid is False
    assert unique.validate("[1, true]").valid is True


def test_a_grammar_past_the_size_limit_is_refused_by_name():
    from playground.constraints import MAX_GRAMMAR_BYTES
    from playground.errors import UnsupportedConstraintError

    huge = "start: " + " | ".join(f'"w{i}"' for i in range(50000))
    with pytest.raises(UnsupportedConstraintError, match=f"at most {MAX_GRAMMAR_BYTES} bytes"):
        Constraint.grammar(huge)
