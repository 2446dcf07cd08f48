"""The patterns auto's lenient llguidance mask enforces for the formats llguidance does not know: each a subset of
its format as the verdict checks it (jsonschema's own checks), so an answer the mask allows passes."""

from __future__ import annotations

import json

import llguidance
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import FormatChecker

from playground.constraints import Constraint
from playground.constraints.compiler import FORMAT_PATTERNS, lenient_form, with_format_patterns
from playground.errors import UnsupportedConstraintError

CHECKS = FormatChecker()
PATTERNS = {name: stand_in["pattern"] for name, stand_in in FORMAT_PATTERNS.items() if "pattern" in stand_in}


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_text_a_format_s_pattern_matches_passes_the_format_s_check(name: str) -> None:
    @settings(max_examples=200, suppress_health_check=list(HealthCheck), deadline=None, database=None)
    @given(st.from_regex(PATTERNS[name], fullmatch=True))
    def passes(text: str) -> None:
        assert CHECKS.conforms(text, name), text

    passes()


@pytest.mark.parametrize("name", sorted(FORMAT_PATTERNS))
def test_llguidance_reads_each_stand_in_without_a_warning(name: str) -> None:
    schema = json.dumps({"type": "string", **FORMAT_PATTERNS[name]})
    error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
        llguidance.grammar_from("json_schema", schema), None
    )
    assert not error and not messages, messages


def test_the_lenient_form_enforces_a_stand_in_where_llguidance_would_leave_the_format_out() -> None:
    schema = {
        "type": "object",
        "properties": {
            "ref": {"type": "string", "format": "uri-reference"},
            "own": {"type": "string", "format": "json-pointer", "pattern": "^/a"},  # its own pattern is kept
            "mail": {"type": "string", "format": "idn-email"},
            "seen": {"const": {"format": "json-pointer"}},  # an instance, not a schema
        },
    }
    constraint = Constraint.json_schema(schema)
    lenient = lenient_form(constraint, "llguidance", UnsupportedConstraintError("Unknown format: uri-reference"))
    properties = lenient.schema["properties"]
    assert properties["ref"] == {"type": "string", "pattern": PATTERNS["uri-reference"]}
    assert properties["own"] == schema["properties"]["own"]
    assert properties["mail"] == {"type": "string", "format": "email"}
    assert properties["seen"] == schema["properties"]["seen"]
    assert lenient.schema["x-guidance"]["lenient"] is True
    assert constraint.schema == schema  # the verdict judges the schema as sent
    assert with_format_patterns([{"format": "regex"}]) == [{"pattern": PATTERNS["regex"]}]
