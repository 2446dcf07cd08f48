"""JSON Schema keywords rewritten to run in linear time: regexes through playground.constraints.matching, not `re`.

jsonschema runs `pattern`, `patternProperties` (also inside `additionalProperties` and
`unevaluatedProperties`) and the `regex` format with Python's backtracking `re`, and `uniqueItems` by
comparing objects pairwise; one schema could freeze the server. These read a regex as the engines' mask
does, and compare items through a set.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

from jsonschema import FormatChecker
from jsonschema.exceptions import ValidationError
from referencing.jsonschema import lookup_recursive_ref

from playground.constraints import verdict_budget
from playground.constraints.matching import pattern_error, pattern_search

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 80
_short = _repr.repr


class UncheckedPattern(Exception):
    """A pattern the checker could not decide within its limits: the verdict is 'could not check'."""


def search(pattern: str, text: str) -> bool:
    ok = pattern_search(pattern, text)
    if ok is None:
        raise UncheckedPattern(f"could not check {text[:40]!r} against pattern {pattern[:80]!r} within the limits")
    return ok


def pattern(validator: Any, patrn: str, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{_short(instance)} does not match {_short(patrn)}")


def pattern_properties(validator: Any, patterns: dict, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for key, value in instance.items():
            if search(patrn, key):
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _additional(instance: dict, schema: dict) -> list[str]:
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    return [k for k in instance if k not in properties and not any(search(p, k) for p in patterns)]


def additional_properties(validator: Any, ap: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        names = ", ".join(_short(e) for e in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({names} unexpected)")


def unevaluated_properties(validator: Any, up: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = set(_evaluated_keys(validator, instance, schema))
    bad = [k for k in instance if k not in evaluated and next(validator.descend(instance[k], up, path=k), None)]
    if bad:
        names = ", ".join(_short(k) for k in bad)
        what = "not allowed" if up is False else "not valid under the given schema"
        yield ValidationError(f"Unevaluated properties are {what} ({names} unexpected)")


def _valid(errors: Iterator[Any]) -> bool:
    return next(errors, None) is None


def _follow(validator: Any, instance: dict, resolved: Any) -> list[str]:
    child = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
    return _evaluated_keys(child, instance, resolved.contents)


def _evaluated_keys(validator: Any, instance: dict, schema: Any) -> list[str]:
    """The keys some keyword of `schema` evaluated (jsonschema's own walk, with linear regexes)."""
    verdict_budget.step()
    if validator.is_type(schema, "boolean"):
        return []
    keys: list[str] = []
    for ref_keyword in ("$ref", "$dynamicRef"):
        if isinstance(schema.get(ref_keyword), str):
            keys += _follow(validator, instance, validator._resolver.lookup(schema[ref_keyword]))
    if "$recursiveRef" in schema:
        keys += _follow(validator, instance, lookup_recursive_ref(validator._resolver))
    if validator.is_type(schema.get("properties"), "object"):
        keys += schema["properties"].keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        if keyword in schema:
            keys += [k for k, v in instance.items() if _valid(validator.descend(v, schema[keyword]))]
    for patrn in schema.get("patternProperties", {}):
        keys += [k for k in instance if search(patrn, k)]
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys += _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                keys += _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys += _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys += _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys += _evaluated_keys(validator, instance, schema["else"])
    return keys


def _canonical(value: Any) -> Any:
    """A form in which JSON Schema's equal values print the same (1 and 1.0 alike; true and 1 not)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def unique_items(validator: Any, ui: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
    """jsonschema compares unhashable items pairwise (quadratic); canonical JSON in a set is linear."""
    if not ui or not validator.is_type(instance, "array"):
        return
    seen: set[str] = set()
    for item in instance:
        key = json.dumps(_canonical(item), sort_keys=True)
        if key in seen:
            yield ValidationError(f"{_short(instance)} has non-unique elements")
            return
        seen.add(key)


def _exact(number: int | float) -> Fraction:
    """The decimal a JSON number was written as (a float's shortest repr), exactly: 0.01 is 1/100, not the binary
    fraction nearest it. Infinity (1e999 reads as it) raises OverflowError: no verdict."""
    return Fraction(number) if isinstance(number, int) else Fraction(Decimal(repr(number)))


def multiple_of(validator: Any, divisor: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
    """jsonschema divides binary floats: 19.99 / 0.01 is 1998.9999999999998, so 19.99 would be no multiple of 0.01
    (a price schema refused its prices). JSON numbers are decimals: divided as the decimals they were written as."""
    if not validator.is_type(instance, "number") or isinstance(instance, bool):
        return
    if _exact(instance) % _exact(divisor):
        yield ValidationError(f"{instance!r} is not a multiple of {divisor}")


KEYWORDS = {
    "multipleOf": multiple_of,
    "divisibleBy": multiple_of,  # draft 3's name for it
    "uniqueItems": unique_items,
    "pattern": pattern,
    "patternProperties": pattern_properties,
    "additionalProperties": additional_properties,
    "unevaluatedProperties": unevaluated_properties,
}


def format_checker(base: FormatChecker) -> FormatChecker:
    """`base` with the `regex` format read in the engines' dialect instead of compiled by `re`."""
    checker = FormatChecker(())
    checker.checkers = dict(base.checkers)

    @checker.checks("regex")
    def _is_regex(instance: object) -> bool:
        return not isinstance(instance, str) or pattern_error(instance) is None

    return checker
