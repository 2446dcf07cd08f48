"""JSON Schema checking that never reads outside the request and never backtracks.

Every jsonschema validator here gets REGISTRY: the meta-schemas jsonschema ships, and a retrieve that
refuses everything (jsonschema's default opens any URL or file a `$ref`, `$dynamicRef` or `$id` names).
References are resolved once at parse time so an unresolvable one is a clear error, not a 500 later.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as SPECIFICATIONS

from playground.constraints import schema_keywords, verdict_budget
from playground.constraints.matching import read_otherwise
from playground.errors import InvalidConstraintError, UnsupportedConstraintError, first_line, json_problem
from playground.types import Validation

_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


def _refuse(uri: str) -> referencing.Resource:
    """Nothing outside the request is ever read: no URL, no file."""
    raise referencing.exceptions.NoSuchResource(ref=uri)


REGISTRY: referencing.Registry = SPECIFICATIONS.combine(referencing.Registry(retrieve=_refuse))


def _linear(base: type) -> type:
    """`base` with the regex keywords and the `regex` format read in linear time, in the engines' dialect,
    and every keyword metered (playground.constraints.verdict_budget), so no verdict runs past its budget."""
    keywords = {**base.VALIDATORS, **{k: v for k, v in schema_keywords.KEYWORDS.items() if k in base.VALIDATORS}}
    return jsonschema.validators.extend(base, {k: verdict_budget.metered(v) for k, v in keywords.items()})


# One verdict's wall-time budget (as playground.constraints.matching's for regexes and grammars).
VERDICT_BUDGET_S = 2.0


# jsonschema picks a validator class per subschema from its own `$schema` (`evolve` calls validator_for),
# so a nested `"$schema": "...draft-07..."` would bring back the stock class and its backtracking `re`.
# Registering the linear classes as the dialects' validators closes that for every use in the process.
_DIALECTS = {
    "draft3": jsonschema.Draft3Validator,
    "draft4": jsonschema.Draft4Validator,
    "draft6": jsonschema.Draft6Validator,
    "draft7": jsonschema.Draft7Validator,
    "draft2019-09": jsonschema.Draft201909Validator,
    "draft2020-12": jsonschema.Draft202012Validator,
}
LINEAR = {name: jsonschema.validators.validates(name)(_linear(base)) for name, base in _DIALECTS.items()}


def validator_class(schema: dict) -> type:
    """The (linear) validator for the schema's dialect (`$schema`, default 2020-12)."""
    dialect = schema.get("$schema")
    if dialect is not None and not isinstance(dialect, str):
        raise InvalidConstraintError(f"$schema must be a string (a dialect URI), got {type(dialect).__name__}")
    return jsonschema.validators.validator_for(schema, default=LINEAR["draft2020-12"])


@functools.cache
def _format_checker(cls: type) -> Any:
    return schema_keywords.format_checker(cls.FORMAT_CHECKER)


def _validator(cls: type, schema: Any) -> Any:
    return cls(schema, registry=REGISTRY, format_checker=_format_checker(cls))


_JSON_KINDS = {type(None): "null", bool: "a boolean", str: "a string", list: "an array", int: "a number"}


def not_a_schema(value: Any) -> InvalidConstraintError:
    """The error for a schema that is not a JSON object (nor true or false), naming what it is in JSON's words."""
    kind = _JSON_KINDS.get(type(value), "a number" if isinstance(value, float) else type(value).__name__)
    return InvalidConstraintError(f"a JSON schema must be an object (or true or false), got {kind}")


def check_schema(schema: dict) -> None:
    """A valid schema whose references all resolve inside it; otherwise a ConstraintError saying where."""
    _check_finite(schema)
    cls = validator_class(schema)
    meta = _validator(jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls), cls.META_SCHEMA)
    _check_against(meta, schema, "not a valid JSON Schema")
    _check_nodes(schema)
    if "propertyNames" not in cls.VALIDATORS:  # draft 3 and 4: their meta-schemas leave these regexes unread
        _check_pattern_keys(schema)
    spec = referencing.jsonschema.specification_with(
        cls.ID_OF(cls.META_SCHEMA) or "", default=referencing.jsonschema.DRAFT202012
    )
    try:
        with _panics_as_recursion():
            _check_refs(spec, meta, schema)
    except RecursionError:
        raise InvalidConstraintError("the JSON schema is nested too deeply to check") from None
    except (ValueError, TypeError, LookupError, AttributeError) as exc:
        raise InvalidConstraintError(f"the JSON schema's $id or references are malformed: {first_line(exc)}") from None


def _check_finite(schema: dict) -> None:
    """No number past float's range (`"minimum": 1e400` reads as infinity): every engine refused it with its own
    parser's words ("Failed to parse JSON ... near: Infinity") about a value the user never wrote."""
    stack: list[tuple[str, Any]] = [("", schema)]
    while stack:
        where, value = stack.pop()
        too_large = isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max
        if too_large or (isinstance(value, float) and not math.isfinite(value)):  # (a 310-digit integer too)
            raise InvalidConstraintError(
                f"the JSON schema's {where or 'value'} is not a finite number: past what JSON numbers hold here "
                "(about 1.8e308)"
            )
        if isinstance(value, dict):
            stack.extend((f"{where}.{key}" if where else str(key), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))


# What the engines hold an integer bound in: a 64-bit integer, read from the JSON as a double.
_INT64_MAX, _INT64_MIN = 2**63 - 1, -(2**63)
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})  # instances, not schemas


def _check_nodes(schema: Any) -> None:
    """What the meta-schema lets through and the engines would get wrong, in every subschema: integer bounds that
    leave no 64-bit integer, a pattern Rust's regex reads otherwise than ECMA-262."""
    stack: list[tuple[str, Any]] = [("", schema)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        _check_integer_bounds(where, node)
        _check_patterns(where, node)
        stack.extend(
            (f"{where}.{key}" if where else str(key), value) for key, value in node.items() if key not in DATA_KEYWORDS
        )


def _check_patterns(where: str, node: dict) -> None:
    """A pattern with a class Rust reads otherwise than ECMA-262 (`[[:alpha:]]`): the mask and the verdict (both
    Rust's reading) passed answers every other validator refuses. (The `regex` format of an answer's string is read
    as the engines read it: such a class there is a regex still.)"""
    patterns = [("pattern", node.get("pattern"))]
    if isinstance(node.get("patternProperties"), dict):
        patterns += [("patternProperties", key) for key in node["patternProperties"]]
    for keyword, pattern in patterns:
        problem = read_otherwise(pattern) if isinstance(pattern, str) else None
        if problem:
            raise InvalidConstraintError(
                f"the JSON schema's {f'{where}.' if where else ''}{keyword} {pattern!r}: {problem}"
            )


def _check_integer_bounds(where: str, node: dict) -> None:
    """An integer schema whose bounds leave no 64-bit integer: the engines read integer bounds into 64 bits, so
    llguidance crashed its compile worker below the smallest (or where both bounds read as it) and forced the
    largest above it (which the verdict then refused), xgrammar refused it in its own words and outlines_core ignored
    the bounds."""
    types = node.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    if "integer" not in types or "number" in types:
        return
    for keyword, past in (
        ("minimum", lambda v: v > _INT64_MAX),
        ("exclusiveMinimum", lambda v: v >= _INT64_MAX),
        # (read as a double: a maximum within 512 of the smallest reads as it, where llguidance crashed)
        ("maximum", lambda v: float(v) <= _INT64_MIN),
        ("exclusiveMaximum", lambda v: float(v) <= _INT64_MIN),
    ):
        value = node.get(keyword)
        if isinstance(value, int | float) and not isinstance(value, bool) and past(value):
            raise UnsupportedConstraintError(
                f"the JSON schema's {f'{where}.' if where else ''}{keyword} ({value}) leaves no integer the "
                "engines can write: they hold integer bounds in 64 bits (-9223372036854775808 to "
                '9223372036854775807); for larger integers use "type": "string" with a pattern'
            )


@contextmanager
def _panics_as_recursion() -> Iterator[None]:
    """rpds (under jsonschema's type checks and referencing's registry) panics where Python's recursion limit is hit
    inside it (a schema nested ~90 deep, on a worker thread): that panic, a BaseException no handler here expects,
    becomes the RecursionError it was, which the callers word as "nested too deeply"."""
    try:
        yield
    except BaseException as exc:
        if type(exc).__name__ == "PanicException" and "RecursionError" in str(exc):
            raise RecursionError(first_line(exc)) from None
        raise


def _check_against(meta: Any, schema: Any, what: str) -> None:
    """`schema` passes the meta-schema, or an InvalidConstraintError naming where and why."""
    try:
        with _panics_as_recursion():
            error = next(meta.iter_errors(schema), None)
    except RecursionError:
        raise InvalidConstraintError("the JSON schema is nested too deeply to check") from None
    except (referencing.exceptions.Unresolvable, schema_keywords.UncheckedPattern) as exc:
        raise InvalidConstraintError(f"the JSON schema could not be checked: {first_line(exc)}") from None
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        cause = f" ({first_line(error.cause)})" if error.cause else ""
        if error.validator == "format" and error.validator_value == "regex":
            cause = f": the engines read Rust regex syntax and {_pattern_problem(error.instance)}"
        raise InvalidConstraintError(f"{what} at {where}: {error.message}{cause}")


# Where drafts 3 and 4 hold subschemas: under each key of a map, or as the value (a list's items, for some)
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "definitions", "dependencies")
_SUBSCHEMAS = ("additionalProperties", "additionalItems", "items", "not", "extends", "type", "disallow")
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf")


def _check_pattern_keys(schema: Any) -> None:
    """Every `patternProperties` regex the engines can read (and read once by a sandbox, so the verdict checks
    keys against it), as the later drafts' meta-schemas ask through `propertyNames: {format: regex}`."""
    from playground.constraints.matching import pattern_error

    todo: list[tuple[Any, str]] = [(schema, "")]
    while todo:
        node, where = todo.pop()
        if isinstance(node, list):
            todo.extend((item, f"{where}{k}/") for k, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key in node.get("patternProperties") or {}:
            problem = pattern_error(key)
            if problem is not None:
                raise InvalidConstraintError(
                    f"not a valid JSON Schema at {where}patternProperties: {key!r} is not a 'regex': the engines read "
                    f"Rust regex syntax and say: {problem}"
                )
        for keyword in _SUBSCHEMA_MAPS:
            if isinstance(node.get(keyword), dict):
                todo.extend((sub, f"{where}{keyword}/{name}/") for name, sub in node[keyword].items())
        for keyword in (*_SUBSCHEMAS, *_SUBSCHEMA_LISTS):
            if keyword in node:
                todo.append((node[keyword], f"{where}{keyword}/"))


def _pattern_problem(pattern: Any) -> str:
    from playground.constraints.matching import pattern_error

    return f"say: {pattern_error(pattern)}" if isinstance(pattern, str) else "need a string"


def _check_refs(spec: Any, meta: Any, schema: dict) -> None:
    """Resolve every reference against the schema alone (no retrieval); a target the meta-schema never
    reached (under a key that is no keyword) is checked as a schema and walked too, once."""
    resource = spec.create_resource(schema)
    walked: set[int] = set()
    todo = [(REGISTRY.resolver_with_root(resource), resource)]
    while todo:
        resolver, current = todo.pop()
        for keyword, ref, scope in _refs(resolver, current, walked):
            resolved = _resolve(scope, keyword, ref)
            if isinstance(resolved.contents, bool) or id(resolved.contents) in walked:
                continue
            _check_against(meta, resolved.contents, f"not a valid JSON Schema where {keyword} {ref!r} points")
            todo.append((resolved.resolver, spec.create_resource(resolved.contents)))


def _refs(resolver: Any, resource: Any, walked: set[int]) -> Iterator[tuple[str, str, Any]]:
    """Every (keyword, reference, resolver in scope) in the resource and its subschemas."""
    contents = resource.contents
    if isinstance(contents, dict):
        walked.add(id(contents))
        for keyword in _REF_KEYWORDS:
            if isinstance(contents.get(keyword), str):
                yield keyword, contents[keyword], resolver
    for sub in resource.subresources():
        if isinstance(sub.contents, dict | bool):  # referencing's draft 3 walk also yields plain values
            yield from _refs(resolver.in_subresource(sub), sub, walked)


def _resolve(resolver: Any, keyword: str, ref: str) -> Any:
    try:
        return resolver.lookup(ref)
    except referencing.exceptions.PointerToNowhere:
        raise InvalidConstraintError(f"{keyword} {ref!r} points to nothing in the schema") from None
    except referencing.exceptions.Unresolvable:
        raise UnsupportedConstraintError(
            f"{keyword} {ref!r} does not resolve inside the schema; references to other documents "
            "(URLs, files) are never fetched"
        ) from None


class _DuplicateKey(ValueError):
    """An object names a key twice: json.loads keeps the last value, so the schema would judge only that one."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(key for key, _ in pairs if key in seen or seen.add(key)))
    return found


class _NotJSONConstant(ValueError):
    """NaN, Infinity or -Infinity: Python's json reads them, JSON (RFC 8259) has no such values."""


def _no_constant(name: str) -> Any:
    raise _NotJSONConstant(name)


def validate(schema: dict, text: str, budget_s: float = VERDICT_BUDGET_S) -> Validation:
    """The verdict for a finished output: JSON that the schema accepts, within a budget (else valid=None)."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        return Validation(valid=False, message=f"not JSON: {json_problem(exc)}")
    except _NotJSONConstant as exc:
        return Validation(valid=False, message=f"not JSON: {exc} is not a JSON value (JSON has no NaN or Infinity)")
    except _DuplicateKey as exc:
        message = f"the key {str(exc)!r} appears twice in one object: the schema can judge only one value per key"
        return Validation(valid=False, message=message)
    except ValueError as exc:  # an integer longer than Python's digit limit
        return Validation(valid=None, message=f"could not read the JSON: {first_line(exc)}")
    except RecursionError:
        return Validation(valid=None, message="could not read the JSON: nested too deeply")
    try:
        with verdict_budget.bounded(budget_s, len(text)), _panics_as_recursion():
            error = _first_error(schema, data)
    except verdict_budget.TooCostly as exc:
        return Validation(valid=None, message=f"could not check: {exc}")
    except schema_keywords.UncheckedPattern as exc:
        return Validation(valid=None, message=str(exc))
    except (
        referencing.exceptions.Unresolvable,
        jsonschema.exceptions.UnknownType,
        jsonschema.exceptions.UndefinedTypeCheck,
        LookupError,
        TypeError,
        ValueError,
        AttributeError,
    ) as exc:
        return Validation(valid=None, message=f"could not check with jsonschema: {first_line(exc)}")
    except RecursionError:
        return Validation(valid=None, message="could not check with jsonschema: nested too deeply")
    except ArithmeticError as exc:  # 1e999 reads as infinity; multipleOf cannot divide it
        return Validation(valid=None, message=f"could not check with jsonschema: {first_line(exc)}")
    if error is None:
        return Validation(valid=True, message="valid against the schema")
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return Validation(valid=False, message=f"schema violation at {where}: {error.message}")


# Validators of the schemas checked lately, by identity (a Constraint keeps its schema dict): building one
# costs about as much as a verdict, and the JSON EOS gate asks for one at every step where EOS is allowed.
_VALIDATORS: OrderedDict[int, tuple[dict, Any]] = OrderedDict()
_VALIDATORS_KEPT = 64
_validators_lock = threading.Lock()


def _validator_of(schema: dict) -> Any:
    with _validators_lock:
        hit = _VALIDATORS.get(id(schema))
        if hit is not None and hit[0] is schema:
            _VALIDATORS.move_to_end(id(schema))
            return hit[1]
    validator = _validator(validator_class(schema), schema)
    with _validators_lock:
        _VALIDATORS[id(schema)] = (schema, validator)  # the schema held: its id names no other dict meanwhile
        while len(_VALIDATORS) > _VALIDATORS_KEPT:
            _VALIDATORS.popitem(last=False)
    return validator


def _first_error(schema: dict, data: Any) -> Any:
    errors = []
    for error in _validator_of(schema).iter_errors(data):
        verdict_budget.step()
        errors.append(error)
    return min(errors, key=str) if errors else None
