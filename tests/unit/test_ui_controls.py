"""The constraint editor's helpers: live checks, examples and the processor picker, without a model."""

from __future__ import annotations

import pytest

from playground.constraints import Constraint
from playground.constraints.examples import EXAMPLES
from playground.errors import InvalidConstraintError
from playground.ui import controls
from playground.ui.examples import KINDS, PROCESSOR_PARAMS


def test_live_check_names_the_problem_or_says_valid() -> None:
    assert "invalid regex at position" in controls.constraint_status("regex", "a(b")
    assert "not a valid JSON Schema at properties" in controls.constraint_status("json_schema", '{"properties": 5}')
    assert "the choice is empty" in controls.constraint_status("choice", "  \n")
    assert "constraint is valid" in controls.constraint_status("grammar", 'start: "a"')
    assert controls.constraint_status("none", "") == "" and controls.constraint_status("processor", "x") == ""


def test_the_live_check_refuses_a_schema_no_value_satisfies() -> None:
    status = controls.constraint_status("json_schema", '{"type": "integer", "minimum": 5, "maximum": 1}')
    assert "pg-constraint-bad" in status and "constraint is valid" not in status
    assert "no value satisfies the schema" in status and "minimum (5) is greater than maximum (1)" in status
    assert "constraint is valid" in controls.constraint_status("json_schema", '{"type": "integer", "minimum": 1}')


def test_a_number_past_float_s_range_is_named_not_passed_to_the_engines() -> None:
    """1e400 reads as infinity: the editor said valid, then every engine refused it in its parser's words."""
    status = controls.constraint_status("json_schema", '{"type": "integer", "minimum": 1e400}')
    assert "pg-constraint-bad" in status and "the JSON schema&#x27;s minimum is not a finite number" in status
    with pytest.raises(InvalidConstraintError, match=r"schema's properties.a.enum\[1\] is not a finite number"):
        Constraint.json_schema({"properties": {"a": {"enum": [1, float("-inf")]}}})
    assert Constraint.json_schema({"type": "number", "maximum": 1e308}).kind == "json_schema"
    with pytest.raises(InvalidConstraintError, match="schema's maximum is not a finite number"):
        Constraint.json_schema({"type": "integer", "maximum": 10**400})  # an integer past float's range too


def test_every_example_passes_the_live_check() -> None:
    for kind, examples in EXAMPLES.items():
        for example in examples:
            assert "constraint is valid" in controls.constraint_status(kind, example.text), (kind, example.title)


def test_examples_fill_the_editor_and_a_fitting_message() -> None:
    text, message = controls.example_for("regex", "ISO date")
    assert text.startswith("[0-9]{4}") and "New Year" in message
    assert controls.example_for("regex", "no such title")[0] == EXAMPLES["regex"][0].text
    assert controls.example_for("none", None) == ("", "")


def test_suggested_message_keeps_what_the_user_typed() -> None:
    person = EXAMPLES["json_schema"][0].message
    date = EXAMPLES["regex"][1].message
    assert controls.suggested_message("", date) == date
    assert controls.suggested_message(person, date) == date
    assert controls.suggested_message("my own question", date) == "my own question"
    assert controls.suggested_message(None, "") == ""


def test_processor_picker_lists_builtins_with_descriptions_and_starting_params() -> None:
    names = [name for _, name in controls.processor_choices()]
    assert {"ban_strings", "max_whitespace"} <= set(names)
    description, params = controls.processor_help("max_whitespace")
    assert "pg-muted" in description and params == PROCESSOR_PARAMS["max_whitespace"]
    assert "pick a registered processor" in controls.processor_help("nope")[0]


DEEP_SCHEMA = '{"type":"object","properties":{"a":' * 200 + '{"type":"string"}' + "}}" * 200


@pytest.mark.parametrize(
    ("kind", "text", "expected"),
    [
        ("json_schema", DEEP_SCHEMA, "the JSON schema is nested too deeply"),
        ("json_schema", "[" * 100000, "is nested too deeply"),
        ("regex", "a\ud800", "invalid Unicode at position 1"),
        ("grammar", 'start: "\ud800"', "invalid Unicode at position 8"),
    ],
    ids=["deep-schema", "deep-json", "surrogate-regex", "surrogate-grammar"],
)
def test_the_live_constraint_check_shows_problems_instead_of_raising(kind: str, text: str, expected: str) -> None:
    status = controls.constraint_status(kind, text)
    assert status.startswith('<div class="pg-box pg-bad pg-constraint-bad">✗ ')
    assert expected in status


def test_the_live_constraint_check_takes_a_missing_text() -> None:
    assert "the regex is empty" in controls.constraint_status("regex", None)


def test_the_grammar_kind_says_it_reads_gbnf_and_has_a_gbnf_example() -> None:
    assert ("grammar (Lark or GBNF)", "grammar") in KINDS
    gbnf = controls.example_for("grammar", "Date (GBNF)")[0]
    assert "::=" in gbnf and Constraint.parse("grammar", gbnf).grammar_dialect == "gbnf"
