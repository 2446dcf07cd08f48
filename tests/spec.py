"""Validate responses against TGI's own OpenAPI spec, so compatibility is checked, not assumed."""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

# A copy of ../shared/specs/tgi-openapi.json (see tests/specs/README.md), so any clone can run the suite.
SPEC_PATH = Path(__file__).resolve().parent / "specs" / "tgi-openapi.json"


def _to_json_schema(node: Any) -> Any:
    """OpenAPI 3.0 -> JSON Schema: `nullable: true` becomes anyOf null, refs point at $defs."""
    if isinstance(node, list):
        return [_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _to_json_schema(value) for key, value in node.items() if key not in ("nullable", "example")}
    if "$ref" in out:
        out["$ref"] = out["$ref"].replace("#/components/schemas/", "#/$defs/")
    if out.get("default") == "null":
        out.pop("default")
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


@lru_cache(maxsize=1)
def _definitions() -> dict[str, Any]:
    spec = json.loads(SPEC_PATH.read_text())
    return {name: _to_json_schema(schema) for name, schema in spec["components"]["schemas"].items()}


def schema_for(name: str) -> dict[str, Any]:
    """A standalone JSON Schema for one of the spec's component schemas."""
    return {"$ref": f"#/$defs/{name}", "$defs": _definitions()}


def validate(instance: Any, name: str) -> None:
    """Raise jsonschema.ValidationError when `instance` does not match the spec's schema `name`."""
    jsonschema.validate(instance, schema_for(name), cls=jsonschema.Draft202012Validator)


def sse_events(lines: Iterable[str]) -> list[Any]:
    """The JSON payloads of a Server-Sent Events stream (`data: {...}` lines), `[DONE]` as the string."""
    events: list[Any] = []
    for line in lines:
        if not line.startswith("data:"):
            continue
        payload = line[len("data:") :].strip()
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events
