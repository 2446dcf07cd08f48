"""The one JSON schema a tool call is decoded against: every tool's `{"name", "arguments"}` envelope, each
tool's parameters checked on their own and their `$defs` moved to the root, so a `$ref` still resolves.

A tool's parameters are a schema whose root is the arguments object: `#/$defs/Owner` means the tool's own
`$defs`. Inside an envelope that root moves, so each tool's definitions go to the envelope's root under
`<tool>__<name>`, and a reference to the tool's root itself (`#`, `#/properties/...`) points to a copy of
the parameters kept there as `<tool>`.
"""

from __future__ import annotations

import json
from typing import Any

from playground.constraints import Constraint
from playground.errors import ConstraintError, InvalidConstraintError
from playground.types import ToolSpec

MAX_PARALLEL_CALLS = 8
_DEFS = ("$defs", "definitions")
# Keywords whose values are data, not schemas: a "$ref" key inside them is not a reference.
_DATA = frozenset({"const", "enum", "default", "examples"})


def parameters(tool: ToolSpec) -> dict[str, Any]:
    """The tool's arguments schema; none given is an empty parameter list, as OpenAI reads it (the call's arguments
    are `{}`), where `{}` given says nothing of them."""
    if tool.function.parameters is None:
        return {"type": "object", "properties": {}, "additionalProperties": False}
    return tool.function.parameters or {"type": "object"}


def check(tools: list[ToolSpec]) -> None:
    """Each tool's parameters as a JSON schema of their own; a problem names the tool, not a grammar."""
    for index, tool in enumerate(tools):
        where = f"tools[{index}].function.parameters ({tool.function.name})"
        schema = parameters(tool)
        try:
            Constraint.json_schema(schema)
        except ConstraintError as exc:
            raise type(exc)(f"{where}: {exc.message}", field=f"tools[{index}].function.parameters") from None
        kinds = schema.get("type", "object")
        if "object" not in (kinds if isinstance(kinds, list) else [kinds]):  # as OpenAI refuses it
            raise InvalidConstraintError(
                f'{where}: the arguments are an object: a schema of "type": "object", got "type": {json.dumps(kinds)}',
                field=f"tools[{index}].function.parameters",
            )


def _rewrite(node: Any, name: str, used_root: list[bool]) -> Any:
    """A copy of `node` with each local `$ref` pointing where the tool's definitions now live."""
    if isinstance(node, list):
        return [_rewrite(item, name, used_root) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            out[key] = _moved(value, name, used_root)
        elif key in _DATA:
            out[key] = value
        else:
            out[key] = _rewrite(value, name, used_root)
    return out


def _moved(ref: str, name: str, used_root: list[bool]) -> str:
    for defs in _DEFS:
        head = f"#/{defs}/"
        if ref.startswith(head):
            return f"#/$defs/{name}__{ref[len(head) :]}"
    used_root[0] = True
    return f"#/$defs/{name}{ref[1:]}"


def relocated(tool: ToolSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tool's arguments schema and the definitions it needs at the root of a larger schema."""
    name = tool.function.name
    params = parameters(tool)
    used_root = [False]
    body = _rewrite({k: v for k, v in params.items() if k not in (*_DEFS, "$schema", "$id")}, name, used_root)
    defs: dict[str, Any] = {}
    for key in _DEFS:
        for def_name, sub in (params.get(key) or {}).items():
            defs[f"{name}__{def_name}"] = _rewrite(sub, name, used_root)
    if used_root[0]:
        defs[name] = body
        body = {"$ref": f"#/$defs/{name}"}
    return body, defs


def call_schema(tools: list[ToolSpec], *, parallel: bool = False) -> dict[str, Any]:
    """One call `{"name", "arguments"}` of any of the tools (a list of 1 to 8 calls when `parallel`)."""
    calls, defs = [], {}
    for tool in tools:
        arguments, needed = relocated(tool)
        defs.update(needed)
        calls.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.function.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    one = calls[0] if len(calls) == 1 else {"anyOf": calls}
    schema = {"type": "array", "items": one, "minItems": 1, "maxItems": MAX_PARALLEL_CALLS} if parallel else one
    return {**schema, "$defs": defs} if defs else schema
