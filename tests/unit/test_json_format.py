"""JSON layouts and closed objects: what the engines are told, read back as each backend reads it."""

from __future__ import annotations

import json

import pytest

from playground.constraints import Constraint, jsonformat
from playground.constraints.backends.base import check_satisfiable
from playground.errors import InvalidConstraintError

PET = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@pytest.mark.parametrize("layout", ["pretty", "compact", "free", "[ \\t]?"])
def test_the_layout_travels_in_the_schema_and_reads_back(layout: str) -> None:
    text = Constraint.json_schema(PET, layout=layout).engine_input()
    schema, read = jsonformat.layout_of(json.loads(text))
    assert (schema, read) == (PET, layout)


def test_json_constraints_are_bounded_by_default_and_a_schema_keeps_its_own_options() -> None:
    sent = json.loads(Constraint.json_schema(PET).engine_input())["x-guidance"]
    assert sent == {"whitespace_flexible": False, "whitespace_pattern": jsonformat.PRETTY_PATTERN}
    own = {**PET, "x-guidance": {"whitespace_pattern": "[ ]{0,2}", "lenient": True}}
    sent = json.loads(Constraint.json_schema(own).engine_input())["x-guidance"]
    assert sent["whitespace_pattern"] == "[ ]{0,2}" and sent["lenient"] is True
    assert Constraint.json_schema(PET) != Constraint.json_schema(PET, layout="compact")  # two cache entries


def test_a_bad_whitespace_pattern_is_refused_by_name() -> None:
    with pytest.raises(InvalidConstraintError, match="whitespace_pattern: invalid regex"):
        Constraint.json_schema(PET, layout="[unclosed")


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (",", "',' is not whitespace"),  # the mask wrote `{"a": 1,,}` and the answer was refused at its end
        ("[a-z]{1,3}", "the range 'a'-'z' holds more than whitespace"),
        ("\\s*", "`\\s` matches more than JSON's whitespace"),
        ("[^a]", "is more than whitespace"),
    ],
)
def test_a_whitespace_pattern_that_matches_more_than_json_whitespace_is_refused(pattern, words) -> None:
    with pytest.raises(InvalidConstraintError, match="^whitespace_pattern: ") as refused:
        Constraint.json_schema(PET, layout=pattern)
    assert words in refused.value.message and "JSON reads only a space" in refused.value.message
    for fine in ("[ \\t\\n\\r]*", "(?:[ ]|\\n[ ]{0,4})?", "\\x20?", " |\\t"):
        Constraint.json_schema(PET, layout=fine)


def test_closed_objects_refuse_undeclared_keys_in_every_nested_object() -> None:
    schema = {
        "type": "object",
        "properties": {"owner": {"$ref": "#/$defs/Owner"}, "tags": {"type": "array", "items": PET}},
        "$defs": {
            "Owner": {"type": "object", "properties": {"name": {"type": "string"}}},
            "Either": {"anyOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}, "additionalProperties": True}]},
            "Both": {"properties": {"d": {}}, "allOf": [{"properties": {"c": {}}}]},
        },
    }
    constraint = Constraint.json_schema(schema, closed=True)
    closed = constraint.schema
    assert closed["additionalProperties"] is False
    assert closed["$defs"]["Owner"]["additionalProperties"] is False
    assert closed["properties"]["tags"]["items"]["additionalProperties"] is False
    assert closed["$defs"]["Either"]["anyOf"][0]["additionalProperties"] is False
    assert closed["$defs"]["Either"]["anyOf"][1]["additionalProperties"] is True  # what a schema says stands
    both = closed["$defs"]["Both"]  # closing either would refuse the other's keys
    assert "additionalProperties" not in both and "additionalProperties" not in both["allOf"][0]
    beside = Constraint.json_schema({**PET, "anyOf": [{"properties": {"x": {}}, "required": ["x"]}]}, closed=True)
    assert "additionalProperties" not in beside.schema["anyOf"][0]  # it would refuse `name`
    assert beside.validate('{"name": "Rex", "x": 1}').valid is True
    negated = {
        **PET,
        "properties": {**PET["properties"], "b": {}},
        "not": {"properties": {"name": {"const": "a"}}, "required": ["name"]},
    }
    assert Constraint.json_schema(negated, closed=True).validate('{"name": "a", "b": 2}').valid is False
    assert constraint.validate('{"owner": {"name": "Ann", "age": 3}}').valid is False
    assert Constraint.json_schema(schema).validate('{"owner": {"name": "Ann", "age": 3}}').valid is True


def test_a_required_key_the_properties_do_not_list_stays_allowed_when_closed() -> None:
    """Real schemas require keys they never list (MaskBench's PayPal instrument, a JSON:API resource): closed
    without them, no value would satisfy the schema and every request on it would be refused."""
    resource = {"type": "object", "properties": {"type": {"type": "string"}}, "required": ["id", "type"]}
    schema = {"type": "object", "properties": {"data": resource}, "required": ["data"]}
    constraint = Constraint.json_schema(schema, closed=True)
    check_satisfiable(constraint.engine_input())
    assert constraint.schema["properties"]["data"]["properties"] == {"type": {"type": "string"}, "id": {}}
    assert constraint.validate('{"data": {"id": [1, "a"], "type": "post"}}').valid is True  # any value, as written
    assert constraint.validate('{"data": {"id": 7, "type": "post", "x": 1}}').valid is False  # still closed
    assert constraint.validate('{"data": {"type": "post"}}').valid is False
    assert resource["properties"] == {"type": {"type": "string"}}  # the caller's schema is left as it was
    paired = {"type": "object", "properties": {"a": {}}, "required": ["a"], "dependentRequired": {"a": ["c"]}}
    assert Constraint.json_schema(paired, closed=True).validate('{"a": 1, "c": 2}').valid is True
    # drafts 3-7 apply `dependencies` and `extends` to the object itself: closing it would refuse their keys
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **paired, "dependencies": {"a": ["c"]}}
    del draft7["dependentRequired"]
    assert "additionalProperties" not in Constraint.json_schema(draft7, closed=True).schema
    draft3 = {
        "$schema": "http://json-schema.org/draft-03/schema#",
        "properties": {"a": {}},
        "extends": {"properties": {"b": {"required": True}}},
    }
    assert Constraint.json_schema(draft3, closed=True).validate('{"a": 1, "b": 2}').valid is True


def test_llguidance_options_join_the_schema_s_own_and_the_layout_s() -> None:
    own = Constraint.json_schema({**PET, "x-guidance": {"lenient": False, "item_separator": ","}})
    sent = json.loads(own.with_guidance(lenient=True).engine_input())["x-guidance"]
    assert sent["lenient"] is True and sent["item_separator"] == ","
    assert sent["whitespace_pattern"] == jsonformat.PRETTY_PATTERN  # the layout's, as ever
    assert own.schema["x-guidance"]["lenient"] is False  # a new constraint: this one is unchanged
    with pytest.raises(ValueError, match="json_schema"):
        Constraint.regex("a+").with_guidance(lenient=True)


def test_a_meta_schema_naming_no_draft_is_left_out_of_what_the_engines_read() -> None:
    """llguidance refused `http://json-schema.org/schema#` (the "latest" alias), OpenAPI 3.1's dialect or a project's
    own meta-schema, unable to fetch it, and auto fell to an engine that ignores more keywords."""
    import llguidance

    for meta in ("http://json-schema.org/schema#", "https://spec.openapis.org/oas/3.1/dialect/base"):
        read = json.loads(Constraint.json_schema({"$schema": meta, "type": "string"}).engine_input())
        assert "$schema" not in read
        error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            llguidance.grammar_from("json_schema", json.dumps(read)), None
        )
        assert not error, messages
    for draft in ("http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2020-12/schema"):
        assert json.loads(Constraint.json_schema({"$schema": draft}).engine_input())["$schema"] == draft
