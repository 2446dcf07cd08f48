"""How constrained JSON may be laid out and which keys it may write, for every engine alike.

Whitespace: an engine's free JSON whitespace lets a model run away in spaces, newlines and tabs until
max_tokens (the anchors bound it: TGI's outlines-core `[ ]?`, vLLM's `disable_any_whitespace`, Outlines'
`whitespace_pattern`). Every JSON constraint carries one of
- "pretty" (the default): at each place JSON allows whitespace, one space, or a newline and up to
  PRETTY_INDENT spaces of indentation (xgrammar: up to PRETTY_INDENT + 1 whitespace characters of any kind,
  its `max_whitespace_cnt`; it has no option for the shape);
- "compact": at most one space (TGI's `[ ]?`; xgrammar writes `, ` and `: `);
- "free": any whitespace, as the engines do by default;
- any other text: a regex for the whitespace (Outlines' `whitespace_pattern`; llguidance and
  outlines_core take it, xgrammar refuses it by name); the empty one, as in Outlines, allows none.
The layout travels inside the schema the engines read, as llguidance's own `x-guidance` options; the other
backends translate those options into theirs (see `layout_of`).

Keys: `closed` adds `additionalProperties: false` to every object schema that lists properties and says
nothing about others, so a model never invents keys: OpenAI's strict contract, used for tool arguments,
`strict: true` schemas and the anchors whose engines do it by default (TGI, vLLM). The keys its `required`
(or `dependentRequired`) names stay allowed, listed or not.
"""

from __future__ import annotations

import re
from typing import Any

from playground.constraints import matching
from playground.errors import InvalidConstraintError

PRETTY_INDENT = 32
COMPACT_PATTERN = "[ ]?"
PRETTY_PATTERN = f"(?:[ ]|\\n[ ]{{0,{PRETTY_INDENT}}})?"
FREE_PATTERN = "[ \\t\\n\\r]*"
NO_WHITESPACE_PATTERN = "[ ]{0}"  # Outlines' empty whitespace_pattern, as a regex every engine's lexer takes
LAYOUTS = ("pretty", "compact", "free")
DEFAULT_LAYOUT = "pretty"
MAX_PATTERN_CHARS = 256
# The keywords that already say what an object's unlisted keys may be, or that apply more schemas to the
# same object (whose keys closing it would refuse): such an object is left as written.
_OTHER_KEYS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
_IN_PLACE = (
    *("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "$ref", "$dynamicRef"),
    *("dependencies", "extends", "disallow"),  # drafts 3-7: a key's schema or names, draft 3's base schemas
)
# Closed: the schemas of other values (a property's, an item's, a definition's). Left as written: those that
# apply to the same object (allOf, not, if/then/else, dependentSchemas), where closing one would refuse
# the keys its siblings declare or turn a `not` inside out; anyOf/oneOf branches only when the object
# itself lists no properties (else a branch would refuse them).
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_BRANCHES = ("anyOf", "oneOf")
_SUBSCHEMAS = ("items", "additionalItems", "prefixItems", "additionalProperties", "unevaluatedItems")


def check_layout(layout: str) -> str:
    """A layout name, or a whitespace regex the engines can read; anything else is refused by name."""
    if layout in LAYOUTS:
        return layout
    if layout == "":
        return NO_WHITESPACE_PATTERN
    if len(layout) > MAX_PATTERN_CHARS:
        raise InvalidConstraintError(
            f"whitespace: one of {', '.join(LAYOUTS)}, or a regex of at most {MAX_PATTERN_CHARS} characters",
            field="whitespace_pattern",
        )
    problem = matching.syntax_error("regex", layout)
    if problem:
        raise InvalidConstraintError(f"whitespace_pattern: invalid regex {problem}", field="whitespace_pattern")
    problem = _not_whitespace(layout)
    if problem:
        raise InvalidConstraintError(
            f"whitespace_pattern: {problem}: the pattern stands between JSON's tokens, where JSON reads only a space, "
            "`\\t`, `\\n` and `\\r` (write e.g. `[ \\t\\n]*`)",
            field="whitespace_pattern",
        )
    return layout


_JSON_WHITESPACE = frozenset(map(ord, " \t\n\r"))


def _not_whitespace(pattern: str) -> str | None:
    """What in a whitespace regex can match something other than JSON's whitespace (`,` made `{"a": 1,,}` and the
    answer was refused at its end), or None. Read with Python's own regex parser: a pattern it cannot read is
    written with more than whitespace in mind."""
    try:
        import re._parser as parser  # (the stdlib's parser of `re`; its tree is the one `re` compiles)
    except ImportError:  # Python 3.10
        import sre_parse as parser

    try:
        tree = parser.parse(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        return f"{pattern!r} is not a plain whitespace regex ({exc})"
    stack = [tree]
    while stack:
        for op, value in stack.pop():
            name = str(op)
            if name == "LITERAL":
                if value not in _JSON_WHITESPACE:
                    return f"{chr(value)!r} is not whitespace"
            elif name == "IN":
                stack.append(value)
            elif name == "RANGE":
                low, high = value
                if not set(range(low, high + 1)) <= _JSON_WHITESPACE:
                    return f"the range {chr(low)!r}-{chr(high)!r} holds more than whitespace"
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                stack.append(value[2])
            elif name == "SUBPATTERN":
                stack.append(value[-1])
            elif name == "ATOMIC_GROUP":
                stack.append(value)
            elif name == "BRANCH":
                stack.extend(value[1])
            elif name == "CATEGORY" and str(value) == "CATEGORY_SPACE":
                return "`\\s` matches more than JSON's whitespace (a form feed, a no-break space)"
            else:  # any character, a negated class, a class escape, an anchor, a reference
                return f"{pattern!r} is more than whitespace (any character, a negated class, an anchor, ...)"
    return None


def guidance_options(layout: str) -> dict[str, Any]:
    """The layout as llguidance's `x-guidance` JSON options."""
    if layout == "free":
        return {"whitespace_flexible": True}
    pattern = {"pretty": PRETTY_PATTERN, "compact": COMPACT_PATTERN}.get(layout, layout)
    return {"whitespace_flexible": False, "whitespace_pattern": pattern}


def layout_of(schema: dict) -> tuple[dict, str]:
    """(the schema without our `x-guidance` layout, the layout it asked for) for engines other than llguidance."""
    options = schema.get("x-guidance")
    if not isinstance(options, dict):
        return schema, "free"
    rest = {k: v for k, v in options.items() if k not in ("whitespace_flexible", "whitespace_pattern")}
    stripped = {k: v for k, v in schema.items() if k != "x-guidance"}
    if rest:
        stripped["x-guidance"] = rest
    if options.get("whitespace_flexible", True) and "whitespace_pattern" not in options:
        return stripped, "free"
    pattern = options.get("whitespace_pattern", COMPACT_PATTERN)
    named = {PRETTY_PATTERN: "pretty", COMPACT_PATTERN: "compact"}
    return stripped, named.get(pattern, pattern)


def with_layout(schema: dict, layout: str) -> dict:
    """The schema the engines read: its own `x-guidance` options first, the layout's where it sets none; a `$schema`
    naming no draft left out (see `known_draft`)."""
    own = schema.get("x-guidance") if isinstance(schema.get("x-guidance"), dict) else {}
    read = {key: value for key, value in schema.items() if key != "$schema" or known_draft(value)}
    return {**read, "x-guidance": {**guidance_options(layout), **own}}


# The drafts' meta-schema ids, as llguidance knows them (without the scheme and the empty fragment).
_DRAFTS = frozenset(
    f"json-schema.org/{path}"
    for path in ("draft-03/schema", "draft-04/schema", "draft-06/schema", "draft-07/schema")
    + ("draft/2019-09/schema", "draft/2020-12/schema")
)


def known_draft(meta: Any) -> bool:
    """Whether a `$schema` names a draft. Another one (the "latest" alias `http://json-schema.org/schema#`, OpenAPI
    3.1's dialect, a project's own meta-schema) made llguidance refuse the schema, unable to fetch it, and `auto`
    fell to an engine that ignores more keywords; the verdict reads such a schema as 2020-12, as llguidance does
    without one."""
    if not isinstance(meta, str):
        return True  # (the meta-schema check names it)
    return meta.split("://", 1)[-1].removesuffix("#") in _DRAFTS


def closed(schema: Any, depth: int = 0, *, other_keys: bool = False) -> Any:
    """The schema with `additionalProperties: false` on every object schema that lists properties alone
    (none beside it says more about the object's keys). A key the object's `required` (or `dependentRequired`)
    names but its `properties` do not (real schemas do it: a PayPal instrument's `id`, a JSON:API resource's) is
    listed, any value allowed, as JSON Schema allows it: closed without it, the object could not be written.

    `other_keys`: `additionalProperties: true` there instead, for a server whose engine closes such objects itself
    (xgrammar's strict mode) when the request wants the schema as written (strict: false)."""
    if not isinstance(schema, dict) or depth > 64:
        return schema
    out = dict(schema)
    if isinstance(out.get("properties"), dict) and not any(k in out for k in (*_OTHER_KEYS, *_IN_PLACE)):
        out["additionalProperties"] = other_keys
        named = [
            out.get("required"),
            *(out["dependentRequired"].values() if isinstance(out.get("dependentRequired"), dict) else ()),
        ]
        unlisted = [
            k
            for keys in named
            if isinstance(keys, list)
            for k in keys
            if isinstance(k, str) and k not in out["properties"]
        ]
        if unlisted and not other_keys:
            out["properties"] = {**out["properties"], **{key: {} for key in unlisted}}
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed(sub, depth + 1, other_keys=other_keys) for name, sub in out[key].items()}
    for key in _BRANCHES:
        if isinstance(out.get(key), list) and "properties" not in out:
            out[key] = [closed(sub, depth + 1, other_keys=other_keys) for sub in out[key]]
    for key in _SUBSCHEMAS:
        if isinstance(out.get(key), list):
            out[key] = [closed(sub, depth + 1, other_keys=other_keys) for sub in out[key]]
        elif key in out:
            out[key] = closed(out[key], depth + 1, other_keys=other_keys)
    return out
