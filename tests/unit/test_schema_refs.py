"""No schema may read outside the request: every reference resolves inside it or is a clear error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from playground.constraints import Constraint, schema_check
from playground.errors import ConstraintError, InvalidConstraintError, UnsupportedConstraintError
from tests.listener import Listener, listening


@pytest.fixture
def listener() -> Iterator[Listener]:
    with listening() as server:
        yield server


@pytest.mark.parametrize("keyword", ["$ref", "$dynamicRef"])
def test_a_reference_to_a_url_is_refused_and_never_fetched(listener, keyword):
    with pytest.raises(UnsupportedConstraintError, match="never fetched") as caught:
        Constraint.json_schema({keyword: f"{listener.url}/dyn.json"})
    assert keyword in caught.value.message
    assert listener.connections == 0


def test_an_id_relative_reference_is_refused_and_never_fetched(listener):
    schema = {"$id": f"{listener.url}/root.json", "properties": {"a": {"$ref": "other.json"}}}
    with pytest.raises(UnsupportedConstraintError, match="'other.json'"):
        Constraint.json_schema(schema)
    assert listener.connections == 0


def test_the_verdict_never_fetches_even_for_a_schema_that_skipped_the_parse_check(listener):
    verdict = schema_check.validate({"$dynamicRef": f"{listener.url}/dyn.json"}, '"text"')
    assert verdict.valid is None and "could not check" in verdict.message
    assert listener.connections == 0


def test_a_file_reference_never_leaks_the_file(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"const": "TOP-SECRET-VALUE"}')
    with pytest.raises(UnsupportedConstraintError):
        Constraint.json_schema({"$ref": secret.as_uri()})
    with pytest.raises(UnsupportedConstraintError):
        Constraint.json_schema({"$id": tmp_path.as_uri() + "/", "$dynamicRef": "secret.json"})
    verdict = schema_check.validate({"$ref": secret.as_uri()}, '"guess"')
    assert verdict.valid is None and "TOP-SECRET-VALUE" not in verdict.message


@pytest.mark.parametrize(
    "schema",
    [{"$dynamicRef": "#/$defs/nope"}, {"$ref": "#/definitions/missing"}, {"items": {"$ref": "#/$defs/a/b"}}],
)
def test_a_pointer_to_nothing_is_a_clear_error_not_a_500(schema):
    with pytest.raises(InvalidConstraintError, match="points to nothing"):
        Constraint.json_schema(schema)


def test_references_inside_the_schema_still_work():
    anchored = {"$defs": {"n": {"$anchor": "num", "type": "integer"}}, "properties": {"a": {"$ref": "#num"}}}
    by_id = {
        "$id": "http://example.invalid/root.json",
        "$defs": {"n": {"$id": "n.json", "type": "integer"}},
        "properties": {"a": {"$ref": "n.json"}},
    }
    recursive = {"type": "object", "properties": {"child": {"$ref": "#"}}, "additionalProperties": False}
    for schema in (anchored, by_id):
        constraint = Constraint.json_schema(schema)
        assert constraint.validate('{"a": 1}').valid is True
        assert constraint.validate('{"a": "x"}').valid is False
    assert Constraint.json_schema(recursive).validate('{"child": {"child": {}}}').valid is True
    meta = Constraint.json_schema({"$ref": "https://json-schema.org/draft/2020-12/schema"})
    assert meta.validate('{"type": "string"}').valid is True


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"$schema": []}, "$schema must be a string"),
        ('{"maxLength": ' + "9" * 5000 + "}", "invalid JSON"),
    ],
)
def test_odd_schemas_are_clear_errors(schema, words):
    with pytest.raises(ConstraintError, match="^" + words.replace("$", r"\$")):
        Constraint.json_schema(schema)


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"type": "integer", "minimum": -1e30, "maximum": -1e29}, "maximum (-1e+29)"),  # crashed llguidance's worker
        ({"type": "integer", "minimum": 10**30, "maximum": 10**30 + 5}, f"minimum ({10**30})"),  # forced 2**63-1
        ({"properties": {"n": {"type": ["integer", "null"], "exclusiveMaximum": -(2**64)}}}, "properties.n.exclusive"),
    ],
)
def test_integer_bounds_that_leave_no_64_bit_integer_are_named(schema, where):
    """The engines read integer bounds into 64 bits: llguidance crashed its compile worker below them (the 422 named
    no cause) and forced the largest above them, which the verdict refused at the end of every answer."""
    with pytest.raises(UnsupportedConstraintError, match="leaves no integer the engines can write") as refused:
        Constraint.json_schema(schema)
    assert f"the JSON schema's {where}" in refused.value.message


def test_integer_bounds_past_64_bits_that_leave_room_are_kept():
    for schema in (
        {"type": "integer", "minimum": 0, "maximum": 2**64 - 1},  # uint64's range, as generated schemas write it
        {"type": "number", "minimum": 1e30},  # a float range: the engines read it as such
        {"enum": [{"type": "integer", "minimum": 1e30}]},  # an instance, not a schema
    ):
        Constraint.json_schema(schema)


def test_an_integer_past_pythons_digit_limit_gets_a_verdict_not_a_crash():
    verdict = Constraint.json_schema({"type": "integer"}).validate("1" * 5000)
    assert verdict.valid is None and "digits" in verdict.message


def test_an_infinite_number_gets_a_verdict_not_a_crash():
    verdict = Constraint.json_schema({"multipleOf": 0.1}).validate("1e999")
    assert verdict.valid is None and "could not check" in verdict.message


def test_a_draft3_schema_is_checked_without_a_crash():
    schema = {
        "$schema": "http://json-schema.org/draft-03/schema#",
        "properties": {"a": {"required": True, "type": "integer"}},
        "extends": {"type": "object"},
    }
    constraint = Constraint.json_schema(schema)
    assert constraint.validate('{"a": 1}').valid is True
    assert constraint.validate("{}").valid is False


def test_a_reference_target_outside_the_keywords_is_checked_and_walked_too(listener):
    with pytest.raises(
        InvalidConstraintError, match="not a valid JSON Schema where \\$ref '#/foo' points at properties"
    ):
        Constraint.json_schema({"$ref": "#/foo", "foo": {"properties": 5}})
    # a schema there that fails only by its regex: the message says where the regex is and why, not "not a schema"
    target = {"allOf": [{"type": "string"}, {"pattern": "^((?!mode).)*$"}]}
    with pytest.raises(InvalidConstraintError) as refused:
        Constraint.json_schema({"$ref": "#/name", "name": target})
    assert str(refused.value).startswith("not a valid JSON Schema where $ref '#/name' points at allOf/1/pattern: ")
    assert "look-around" in str(refused.value)
    with pytest.raises(UnsupportedConstraintError, match="never fetched"):
        Constraint.json_schema({"$ref": "#/foo", "foo": {"items": {"$dynamicRef": f"{listener.url}/x.json"}}})
    assert listener.connections == 0
    inside = Constraint.json_schema({"$ref": "#/foo", "foo": {"type": "integer"}})
    assert inside.validate("3").valid is True and inside.validate('"x"').valid is False
