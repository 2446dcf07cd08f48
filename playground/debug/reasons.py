"""Why a token is not allowed here, in words, from the constraint's state after the answer so far.

Each reason names what the constraint wants instead: the schema's remaining keys (each one tried
against llguidance), a maxLength reached, the bytes a regex forces, the required key that keeps the end
of text out (the EOS gate's jsonschema error).
"""

from __future__ import annotations

import re

from playground.constraints import Constraint, jsonstate
from playground.debug.state import LocalEngine, State, first_chars
from playground.decoding.key_gate import written_again

_NOUNS = {"json_schema": "schema", "regex": "regex", "choice": "choices", "grammar": "grammar"}
_STARTS = {
    "string": '`"`',
    "integer": "a digit or `-`",
    "number": "a digit or `-`",
    "boolean": "`true` or `false`",
    "object": "`{`",
    "array": "`[`",
    "null": "`null`",
}
_ARTICLES = {"integer": "an integer", "array": "an array", "object": "an object", "null": "null"}


def code(text: str) -> str:
    """Inline text as `code`, with invisible characters shown."""
    shown = text.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return f"`{shown}`" if shown.strip() else f"`{shown}` (whitespace)" if shown else "``"


def listing(items: list[str], limit: int = 12) -> str:
    shown = ", ".join(code(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def explain(engine: LocalEngine, constraint: Constraint, state: State, token_id: int) -> str:
    """One plain sentence: allowed, or why not."""
    if state.allowed is not None and bool(state.allowed[token_id]):
        return "allowed by the constraint here"
    if token_id in engine.runner.eos_ids:
        return "end of text not allowed: " + _eos_reason(engine, constraint, state)
    token = engine.token_text(token_id)
    if token_id in engine.runner.special_ids:
        return f"the special token {code(token)} is not text the constraint can match"
    reason = None
    if constraint.kind == "json_schema" and (key := written_again(state.text, token)) is not None:
        return (
            f"{code(token)} would write the key {code(key)} a second time in this object: JSON Schema judges one "
            "value per key"
        )
    if constraint.kind == "json_schema":
        reason = _json_reason(engine, constraint, state, token)
    elif constraint.kind == "choice":
        reason = _choice_reason(constraint, state, token)
    return reason or _generic_reason(engine, constraint, state, token)


# --- end of text -------------------------------------------------------------------------------------


def humanize(message: str) -> str:
    """jsonschema's wording made plainer: `'age' is a required property` -> required key `age` missing."""
    found = re.search(r"'([^']*)' is a required property", message)
    if found:
        return f"required key `{found.group(1)}` missing"
    return re.sub(r"^schema violation at ", "at ", message)


def _eos_reason(engine: LocalEngine, constraint: Constraint, state: State) -> str:
    if constraint.kind == "json_schema":
        parsed = jsonstate.scan(state.text)
        if parsed is not None and parsed.in_string:  # nearer than any key missing around it
            what = "a key" if parsed.string_is_key else f"the string at {jsonstate.path_text(parsed.path)}"
            forced = state.forced()
            return f"the JSON is not finished: {what} is still open" + (f" (next: {code(forced)})" if forced else "")
        missing = _missing_required(constraint, parsed) if parsed else []
        if missing:
            return f"required key{'s' if len(missing) > 1 else ''} {listing(missing)} missing"
        verdict = constraint.validate(state.text)
        if verdict.valid is False and not verdict.message.startswith("not JSON"):
            return humanize(verdict.message)
        forced = state.forced()
        return "the JSON is not finished" + (f" (next: {code(forced)})" if forced else "")
    if constraint.kind == "choice":
        return f"{code(state.text)} is not one of the choices yet"
    forced = state.forced()
    noun = _NOUNS[constraint.kind]
    if forced:
        return f"the {noun} needs {code(forced)} next"
    chars = first_chars(engine, state.allowed)
    if chars and len(chars) <= 12:
        return f"the {noun} needs more: one of {listing(sorted(chars))} next"
    return f"the text does not match the {noun} yet"


# --- JSON ----------------------------------------------------------------------------------------------


def _json_reason(engine: LocalEngine, constraint: Constraint, state: State, token: str) -> str | None:
    fits = _longest_fit(engine, state, token)
    if fits:  # a token like `"}` : the quote fits, the brace is what the schema refuses
        state, token = state.advanced(engine, token[:fits]), token[fits:]
    parsed = jsonstate.scan(state.text)
    if parsed is None:
        return None
    char = token.lstrip(" \t\n\r")[:1]
    top = parsed.top
    if parsed.done:
        return "the JSON value is complete: only the end of text may follow"
    if parsed.in_string and parsed.string_is_key:
        keys = [k for k in allowed_keys(engine, constraint, state, parsed) if k.startswith(parsed.string)]
        return _only_keys(constraint, state, parsed, keys, token) if keys else None
    if parsed.in_string:
        return _string_reason(constraint, parsed, char)
    if parsed.scalar:  # a number or literal that `char` would end as written: its bounds, then its container's rule
        ended = jsonstate.scan(state.text + " ") if char in _ENDS_SCALAR else None
        if ended is None or ended.scalar:
            return _scalar_reason(engine, constraint, state, parsed, char)
        broken = _broken_bounds(constraint, parsed, parsed.scalar)
        if broken:
            return broken
        parsed, top = ended, ended.top
    if top is not None and top.kind == "object" and top.expect in ("key_or_end", "key", "comma_or_end"):
        return _object_reason(engine, constraint, state, parsed, token)
    if top is not None and top.kind == "array" and top.expect == "comma_or_end":
        return _array_reason(constraint, parsed, char)
    return _value_reason(constraint, parsed, char)


def allowed_keys(engine: LocalEngine, constraint: Constraint, state: State, parsed: jsonstate.JsonState) -> list[str]:
    """The object's keys not written yet that the constraint accepts next (each tried through llguidance)."""
    top = parsed.top
    if top is None or top.kind != "object":
        return []
    schema = jsonstate.subschema(constraint.schema, parsed.container_path) or {}
    written = set(top.keys) - ({parsed.string} if parsed.string_is_key else set())
    keys = [k for k in schema.get("properties") or {} if k not in written]
    if parsed.string_is_key:
        return [k for k in keys if k.startswith(parsed.string) and state.accepts(engine, k[len(parsed.string) :] + '"')]
    lead = "" if top.expect in ("key_or_end", "key") else ", "
    return [k for k in keys if state.accepts(engine, f'{lead}"{k}"')]


def _missing_required(constraint: Constraint, parsed: jsonstate.JsonState) -> list[str]:
    top = parsed.top
    if top is None or top.kind != "object":
        return []
    schema = jsonstate.subschema(constraint.schema, parsed.container_path) or {}
    return [k for k in schema.get("required") or [] if k not in top.keys]


def _object_reason(
    engine: LocalEngine, constraint: Constraint, state: State, parsed: jsonstate.JsonState, token: str
) -> str | None:
    char = token.lstrip(" \t\n\r")[:1]
    top = parsed.top
    assert top is not None
    missing = _missing_required(constraint, parsed)
    keys = allowed_keys(engine, constraint, state, parsed)
    where = jsonstate.path_text(parsed.container_path)
    if char == "}" and missing:
        return f"`}}` not allowed: required key{'s' if len(missing) > 1 else ''} {listing(missing)} missing in {where}"
    if top.expect == "comma_or_end":
        if char == "," and not keys:
            return f"every key the schema allows in {where} is already there: only `}}` can close it"
        return "after a value only `,` or `}` may follow" if char not in ",}" else None
    if keys and char != '"':
        return f'a key starts with `"`: {_only_keys(constraint, state, parsed, keys, token)}'
    if keys:
        return _only_keys(constraint, state, parsed, keys, token)
    return None


def _only_keys(constraint: Constraint, state: State, parsed: jsonstate.JsonState, keys: list[str], token: str) -> str:
    """The keys allowed next; when `token` starts a key JSON Schema would take here but the engine keeps the
    schema's key order, that the key must wait."""
    top = parsed.top
    assert top is not None
    schema = jsonstate.subschema(constraint.schema, parsed.container_path) or {}
    start = parsed.string if parsed.string_is_key else ""
    written = set(top.keys) - ({parsed.string} if parsed.string_is_key else set())
    typed = start + token.lstrip(' \t\n\r,"').split('"')[0]
    later = [
        k
        for k in schema.get("properties") or {}
        if k not in written and k not in keys and typed and k.startswith(typed)
    ]
    text = f"the schema allows only the keys {listing(keys)} here"
    if later:
        text += f" ({state.engine} writes keys in the schema's order: {listing(later)} may only follow {listing(keys)})"
    return text


def _array_reason(constraint: Constraint, parsed: jsonstate.JsonState, char: str) -> str | None:
    top = parsed.top
    assert top is not None
    schema = jsonstate.subschema(constraint.schema, parsed.container_path) or {}
    where = jsonstate.path_text(parsed.container_path)
    if char == "," and isinstance(schema.get("maxItems"), int) and top.index + 1 >= schema["maxItems"]:
        return f"{where} reached maxItems {schema['maxItems']}"
    if char == "]" and isinstance(schema.get("minItems"), int) and top.index + 1 < schema["minItems"]:
        return f"{where} needs at least {schema['minItems']} items"
    return "after an item only `,` or `]` may follow" if char not in ",]" else None


def _string_reason(constraint: Constraint, parsed: jsonstate.JsonState, char: str) -> str | None:
    schema = jsonstate.subschema(constraint.schema, parsed.path) or {}
    where = jsonstate.path_text(parsed.path)
    if "enum" in schema or "const" in schema:
        values = [v for v in schema.get("enum", [schema.get("const")]) if isinstance(v, str)]
        fitting = [v for v in values if v.startswith(parsed.string)]
        return f"{where} must be one of {listing(values)}" + (
            f"; only {listing(fitting)} start with {code(parsed.string)}" if parsed.string and fitting else ""
        )
    limit = schema.get("maxLength")
    if isinstance(limit, int) and len(parsed.string) >= limit and char != '"':
        return f'string {where} reached maxLength {limit}: only the closing `"` may follow'
    minimum = schema.get("minLength")
    if char == '"' and isinstance(minimum, int) and len(parsed.string) < minimum:
        return f"string {where} has {len(parsed.string)} characters; minLength is {minimum}"
    if "pattern" in schema:
        return f"string {where} must match the pattern /{schema['pattern']}/"
    if "format" in schema:
        return f"string {where} must be in {schema['format']} format"
    if char and ord(char) < 0x20:
        return "a JSON string cannot hold a raw control character: it must be escaped"
    return None


def _scalar_reason(
    engine: LocalEngine, constraint: Constraint, state: State, parsed: jsonstate.JsonState, char: str
) -> str | None:
    schema = jsonstate.subschema(constraint.schema, parsed.path) or {}
    where = jsonstate.path_text(parsed.path)
    for literal in ("true", "false", "null"):
        if literal.startswith(parsed.scalar) and parsed.scalar != literal:
            return f"expected {code(literal[len(parsed.scalar) :])} to finish {code(literal)}"
    if schema.get("type") == "integer" and char in (".", "e", "E"):
        return f"{where} is an integer: no fraction or exponent"
    if char.isdigit():  # the number it would make, when that breaks a bound (else the bound is not the reason)
        broken = _broken_bounds(constraint, parsed, parsed.scalar + char)
        if broken:
            return broken.replace(" breaks ", " would break ", 1)
    chars = first_chars(engine, state.allowed)
    if chars and all(c.isdigit() for c in chars):
        return "expected a digit"
    return None


# What ends a number or a literal as written (whitespace is stripped off the token first).
_ENDS_SCALAR = frozenset(",}]")
_BOUNDS = {
    "minimum": lambda value, bound: value >= bound,
    "maximum": lambda value, bound: value <= bound,
    "exclusiveMinimum": lambda value, bound: value > bound,
    "exclusiveMaximum": lambda value, bound: value < bound,
}


def _broken_bounds(constraint: Constraint, parsed: jsonstate.JsonState, written: str) -> str | None:
    """`where = value breaks ...` when the number `written` breaks its schema's bounds (multipleOf read as /check
    reads it, in the decimals written), else None."""
    schema = jsonstate.subschema(constraint.schema, parsed.path) or {}
    try:
        value = float(written)
    except ValueError:
        return None
    broken = [
        f"{name} {schema[name]}"
        for name, holds in _BOUNDS.items()
        if isinstance(schema.get(name), (int, float))
        and not isinstance(schema[name], bool)
        and not holds(value, schema[name])
    ]
    if isinstance(schema.get("multipleOf"), (int, float)) and schema["multipleOf"] > 0:
        probe = Constraint.json_schema({"multipleOf": schema["multipleOf"]})
        if probe.validate(written).valid is False:
            broken.append(f"multipleOf {schema['multipleOf']}")
    return f"{jsonstate.path_text(parsed.path)} = {written} breaks {', '.join(broken)}" if broken else None


def _value_reason(constraint: Constraint, parsed: jsonstate.JsonState, char: str = "") -> str | None:
    schema = jsonstate.subschema(constraint.schema, parsed.path) or {}
    where = jsonstate.path_text(parsed.path)
    floor = next((schema[k] for k in ("minimum", "exclusiveMinimum") if isinstance(schema.get(k), (int, float))), None)
    if char == "-" and floor is not None and floor >= 0:
        return f"{where} has {'minimum' if 'minimum' in schema else 'exclusiveMinimum'} {floor}: no negative number"
    if "enum" in schema or "const" in schema:
        values = [repr_json(v) for v in schema.get("enum", [schema.get("const")])]
        return f"{where} must be one of {listing(values)}"
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _STARTS:
        article = _ARTICLES.get(kind, f"a {kind}")
        return f"{where} must be {article}, which starts with {_STARTS[kind]}"
    return None


def repr_json(value: object) -> str:
    import json

    return json.dumps(value)


# --- choices, regexes, grammars -------------------------------------------------------------------------


def _choice_reason(constraint: Constraint, state: State, token: str) -> str | None:
    fitting = [c for c in constraint.value if c.startswith(state.text) and c != state.text]
    if not state.text:
        return f"the answer must be one of the choices {listing(list(constraint.value))}"
    if not fitting:
        return f"{code(state.text)} is a complete choice: only the end of text may follow"
    # the token's longest start that some choice continues: a token that starts right can still go wrong later
    size = next(
        (k for k in range(len(token) - 1, 0, -1) if any(c.startswith(state.text + token[:k]) for c in fitting)), 0
    )
    if size:
        begun = state.text + token[:size]
        left = [c for c in fitting if c.startswith(begun)]
        return f"{code(begun)} begins only {listing(left)}, and none goes on with {code(token[size:])}"
    nexts = sorted({c[len(state.text)] for c in fitting})
    return f"only the choices {listing(fitting)} start with {code(state.text)}; the next character is one of {listing(nexts)}"


def _generic_reason(engine: LocalEngine, constraint: Constraint, state: State, token: str) -> str:
    noun = _NOUNS.get(constraint.kind, "constraint")
    forced = state.forced()
    if forced and not forced.startswith(token) and not token.startswith(forced):
        return f"the {noun} needs {code(forced)} here"
    fits = _longest_fit(engine, state, token)
    if fits:
        return f"the {noun} accepts {code(token[:fits])} here but not {code(token[fits:])} after it"
    chars = first_chars(engine, state.allowed)
    if chars and all(c.isdigit() for c in chars):
        return f"the {noun} expects a digit here"
    if chars and len(chars) <= 8:
        return f"the {noun} allows only {listing(sorted(chars))} here"
    return f"the {noun} does not allow {code(token)} here"


def _longest_fit(engine: LocalEngine, state: State, token: str) -> int:
    """How many characters of `token` llguidance would accept here (0 when none, or no llguidance)."""
    if state.matcher is None:
        return 0
    for size in range(len(token) - 1, 0, -1):
        if state.accepts(engine, token[:size]):
            return size
    return 0
