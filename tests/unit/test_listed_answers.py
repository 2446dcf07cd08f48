"""Which answers the UI ranks after every turn without walking a language: a choice, or an enum, const or
boolean where a JSON value starts (debug.alternatives.listed); anything else is left to the button."""

from __future__ import annotations

import pytest

from playground.constraints import Constraint
from playground.debug.alternatives import listed

PET = {
    "type": "object",
    "properties": {
        "kind": {"anyOf": [{"const": "cat"}, {"enum": ["dog", "fish"]}]},
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
    },
}


def schema(value: dict) -> Constraint:
    return Constraint.from_grammar({"type": "json", "value": value})


@pytest.mark.parametrize(
    ("constraint", "prefix", "expected"),
    [
        (Constraint.from_grammar({"type": "choice", "value": ["red", "green"]}), "", True),
        (Constraint.from_grammar({"type": "choice", "value": ["red", "green"]}), "gr", True),
        (Constraint.from_grammar({"type": "choice", "value": ["red", "green"]}), "green", False),
        (schema({"enum": ["yes", "no"]}), "", True),
        (schema({"type": "boolean"}), "", True),
        (schema({"type": "string"}), "", False),
        (schema(PET), '{"kind": ', True),
        (schema(PET), '{\n  "kind":', True),
        (schema(PET), '{"tags": ["a", ', True),
        (schema(PET), '{"name": ', False),
        (schema(PET), '{"kind', False),
        (schema(PET), '{"kind": "c', False),
        (schema(PET), "", False),
        (Constraint.from_grammar({"type": "regex", "value": "(yes|no)"}), "", False),
        # more than 64 (MAX_ALTERNATIVES): not ranked after every turn, where it only showed an error
        (Constraint.from_grammar({"type": "choice", "value": [f"c{i}" for i in range(65)]}), "", False),
        (Constraint.from_grammar({"type": "choice", "value": [f"c{i}" for i in range(64)]}), "", True),
        (schema({"enum": list(range(65))}), "", False),
    ],
)
def test_listed_answers(constraint: Constraint, prefix: str, expected: bool) -> None:
    assert listed(constraint, prefix) is expected


@pytest.mark.parametrize(
    ("value", "prefix", "expected"),
    [
        ({"anyOf": [{"$ref": "#"}, {"enum": [1]}]}, "", True),
        ({"allOf": [{"$ref": "#"}]}, "", False),
        (
            {
                "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
                "$ref": "#/$defs/a",
            },
            "",
            False,
        ),
        ({"properties": {"a": {"anyOf": [{"$ref": "#/properties/a"}, {"const": 2}]}}}, '{"a": ', True),
    ],
)
def test_a_schema_that_refers_to_itself_ends(value: dict, prefix: str, expected: bool) -> None:
    """/score and the UI's ranking walk a schema's branches and $refs; a cycle was a RecursionError (a 500)."""
    assert listed(schema(value), prefix) is expected


def test_branches_that_share_a_node_cost_its_size_not_the_ways_through_it() -> None:
    """Each level's two branches refer to the level below: 2**40 ways to the enum, once each before (22 levels took
    the row's whole CPU budget); now each node is walked once per depth."""
    defs: dict = {"l0": {"enum": ["x"]}}
    for level in range(1, 41):
        below = {"$ref": f"#/$defs/l{level - 1}"}
        defs[f"l{level}"] = {"anyOf": [below, below]}
    assert listed(schema({"$defs": defs, "$ref": "#/$defs/l40"}), "")
