"""What each engine makes of one constraint: compiled or refused, in how long, what it ignores, its compiled form.

The engines disagree (a keyword one ignores, another refuses); /inspect and the UI's inspect panel show it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from playground.constraints import Constraint, backends
from playground.constraints.compiler import CompiledConstraint, ConstraintCompiler
from playground.errors import ConstraintError

MAX_FORM_CHARS = 20_000  # a compiled form can be megabytes (outlines_core's regex for a large schema)
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


class EngineReport(BaseModel):
    """One engine's answer to a constraint."""

    engine: str
    compiled: bool
    compile_ms: float | None = None
    error: str | None = None
    warnings: list[str] = []
    compiled_form: str | None = None


class InspectResponse(BaseModel):
    """POST /inspect's answer: one report per engine, in the `auto` order."""

    engines: list[EngineReport]


def inspect_constraint(compiler: ConstraintCompiler, constraint: Constraint) -> InspectResponse:
    """Every engine's report; compiles go through the compiler (its cache and time limit), in its background
    lane: an inspection (typed in the UI as you go) never takes a compile worker a turn waits for."""
    return InspectResponse(engines=[_report(compiler, constraint, engine) for engine in backends.names()])


def _report(compiler: ConstraintCompiler, constraint: Constraint, engine: str) -> EngineReport:
    if constraint.kind not in backends.get(engine).kinds:
        return EngineReport(
            engine=engine, compiled=False, error=f"{engine} does not read {constraint.kind} constraints"
        )
    compiler.warm(engine)  # the engine's vocabulary tables, once per tokenizer: not part of any compile
    try:
        compiled = compiler.compile(constraint, engine, background=True)
    except ConstraintError as exc:
        return EngineReport(engine=engine, compiled=False, error=exc.message)
    assert compiled is not None
    return EngineReport(
        engine=engine,
        compiled=True,
        compile_ms=round(compiled.compile_s * 1000, 2),
        warnings=[*compiled.warnings, *_ignored(constraint, engine)],
        compiled_form=_bounded(compiled_form(compiled)),
    )


# What each engine's mask does with keys an object takes beyond its listed ones (the final check reads the schema).
_OPEN_OBJECTS = {
    "outlines_core": "outlines_core writes only an object's listed keys: the other keys `additionalProperties` "
    "allows are refused by its mask (only the final check allows them)",
}
_LISTED_FIRST = "{engine} writes an object's listed keys first, in the schema's order: an instance with another key "
_LISTED_FIRST += "before them is refused by its mask (the final check reads the schema as written)"


def _ignored(constraint: Constraint, engine: str) -> list[str]:
    if constraint.kind != "json_schema":
        return []
    ignored = sorted(schema_keywords(constraint.schema) & backends.get(engine).ignored_keywords)
    notes = [f"{engine} ignores `{keyword}` (only the final check enforces it)" for keyword in ignored]
    if any(_open_object(node) for node in subschemas(constraint.schema)):
        notes.append(_OPEN_OBJECTS.get(engine, _LISTED_FIRST.format(engine=engine)))
    return notes


def _open_object(node: dict[str, Any]) -> bool:
    """An object that lists keys and takes others too (additionalProperties true or a schema)."""
    return bool(node.get("properties")) and node.get("additionalProperties", True) not in (False, {"not": {}})


def schema_keywords(schema: Any) -> set[str]:
    """The keywords used anywhere in a schema (property names are not keywords)."""
    return {keyword for node in subschemas(schema) for keyword in node}


def subschemas(schema: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    """The schema and every schema inside it (not the values of const, enum, default or examples)."""
    if not isinstance(schema, dict) or depth > 64:
        return
    yield schema
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            children = list(value.values())
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            children = value
        else:
            children = (
                [value] if isinstance(value, dict) and key not in ("const", "enum", "default", "examples") else []
            )
        for child in children:
            yield from subschemas(child, depth + 1)


def compiled_form(compiled: CompiledConstraint) -> str:
    """What the engine compiled: llguidance's grammar, xgrammar's EBNF, the regex outlines_core builds."""
    return backends.get(compiled.engine).compiled_form(compiled.constraint, compiled.template)


def _bounded(text: str) -> str:
    if len(text) <= MAX_FORM_CHARS:
        return text
    return text[:MAX_FORM_CHARS] + f"\n… ({len(text) - MAX_FORM_CHARS} more characters)"


def summary(response: InspectResponse) -> str:
    """One line: how many engines compile, and what each ignores or refuses."""
    reports = response.engines
    compiled = [r for r in reports if r.compiled]
    parts = [f"{len(compiled)}/{len(reports)} engines compile"]
    for report in reports:
        ignored = [w.split("`")[1] for w in report.warnings if " ignores `" in w]
        if ignored:
            parts.append(f"{report.engine} ignores " + ", ".join(f"`{k}`" for k in ignored))
        elif not report.compiled:
            parts.append(f"{report.engine} refuses")
    return "; ".join(parts)
