"""Every engine bounds JSON whitespace as the layout says, and a closed schema writes no key it does not declare:
texts walked through each engine's real masks (the walk decoding uses)."""

from __future__ import annotations

import pytest

from playground.constraints import Constraint
from playground.decoding.walk import first_refusal
from playground.types import GrammarType

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["city", "n"],
}
TEXTS = {
    "indented": '{\n    "city": "Rome",\n    "n": 3\n}',
    "spaced": '{"city": "Rome", "n": 3}',
    "tight": '{"city":"Rome","n":3}',
    "runaway": '{"city":' + "\t" * 40 + '"Rome", "n": 3}',
    "extra key": '{"city": "Rome", "n": 3, "x": 1}',
}
ENGINES = ["llguidance", "xgrammar", "outlines_core"]


def allowed(engine, constraint: Constraint, engine_name: str) -> set[str]:
    compiled = engine.compiler.compile(constraint, engine_name)
    ids = {name: engine.tokenizer(text, add_special_tokens=False)["input_ids"] for name, text in TEXTS.items()}
    return {name for name, token_ids in ids.items() if first_refusal(engine, constraint, compiled, token_ids) is None}


@pytest.mark.parametrize("engine_name", ENGINES)
def test_the_default_layout_takes_indentation_but_no_runaway_whitespace(engine, engine_name: str) -> None:
    accepted = allowed(engine, Constraint.json_schema(SCHEMA), engine_name)
    assert {"indented", "spaced"} <= accepted
    assert "runaway" not in accepted


@pytest.mark.parametrize("engine_name", ENGINES)
def test_compact_refuses_newlines_and_free_takes_anything(engine, engine_name: str) -> None:
    compact = allowed(engine, Constraint.json_schema(SCHEMA, layout="compact"), engine_name)
    assert "spaced" in compact and not compact & {"indented", "runaway"}
    assert {"indented", "spaced", "runaway"} <= allowed(
        engine, Constraint.json_schema(SCHEMA, layout="free"), engine_name
    )


@pytest.mark.parametrize("engine_name", ENGINES)
def test_a_closed_schema_never_writes_an_undeclared_key(engine, engine_name: str) -> None:
    assert "extra key" not in allowed(engine, Constraint.json_schema(SCHEMA, closed=True), engine_name)


@pytest.mark.parametrize("engine_name", ["llguidance", "outlines_core"])  # xgrammar takes no whitespace regex
def test_an_empty_whitespace_pattern_allows_no_whitespace_as_in_outlines(engine, engine_name: str) -> None:
    """`whitespace: ""` (Outlines' and vLLM's empty whitespace_pattern) was read as unset: the pretty default."""
    constraint = Constraint.from_grammar(GrammarType(type="json", value=SCHEMA, whitespace=""))
    assert allowed(engine, constraint, engine_name) == {"tight"}
