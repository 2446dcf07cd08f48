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
