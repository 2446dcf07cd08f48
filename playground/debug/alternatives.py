"""Every answer a constraint allows, when there are few: what POST /score ranks.

A choice constraint lists them; after a JSON answer prefix that stops where a value starts, the schema's
`enum` or `const` there (through `anyOf`/`oneOf`/`allOf` branches, so a tool call's name too) lists them;
a regex or grammar is walked token by token through llguidance's matcher, collecting each text where the
language may end. More than MAX_ALTERNATIVES strings, or one longer than MAX_ALTERNATIVE_CHARS
(an unbounded language), is refused by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from playground.constraints import Constraint, jsonstate
from playground.debug.state import LocalEngine, llguidance_matcher
from playground.decoding import row_budget
from playground.errors import InvalidConstraintError, UnsupportedConstraintError

MAX_ALTERNATIVES = 64
MAX_ALTERNATIVE_CHARS = 256
MAX_WALK_TEXTS = 20_000  # distinct texts the language walk may visit


@dataclass(frozen=True)
class Alternatives:
    """The strings to score after the prefix, where they came from, and whether each ends the answer."""

    texts: list[str]
    source: str
    complete: bool  # True: the end of text may follow each; False: a value at a JSON position (more follows)
    # What may stand before each text and mean the same answer: JSON's insignificant whitespace, which a model
    # writes inside the value's first token (` "dog"` after `"kind":`); each lead's spellings are summed.
    leads: tuple[str, ...] = ("",)


def alternatives(engine: LocalEngine, constraint: Constraint, prefix: str, prefix_ids: list[int]) -> Alternatives:
    """The finite set of continuations of `prefix` that the constraint allows (see the module's docstring)."""
    if constraint.kind == "choice":
        texts = [c[len(prefix) :] for c in constraint.value if c.startswith(prefix) and len(c) > len(prefix)]
        if not texts:
            raise InvalidConstraintError("no choice continues the answer prefix", field="continue_from")
        return Alternatives(_bounded(texts, "the choices"), "choice", True)
    if constraint.kind == "json_schema":
        return _json_position(constraint, prefix)
    if constraint.kind in ("regex", "grammar"):
        with row_budget.walking("the constraint's language"):
            return Alternatives(_language(engine, constraint, prefix_ids), f"the {constraint.kind}'s language", True)
    raise InvalidConstraintError(
        "scoring needs a constraint with a finite set of answers: a choice, a JSON enum, a small regex or grammar",
        field="grammar",
    )


def _bounded(texts: list[str], what: str) -> list[str]:
    if len(texts) > MAX_ALTERNATIVES:
        raise UnsupportedConstraintError(
            f"{what}: more than {MAX_ALTERNATIVES} answers, too many to score (at most {MAX_ALTERNATIVES})",
            field="grammar",
        )
    return texts


def listed(constraint: Constraint, prefix: str, at_most: float = MAX_ALTERNATIVES) -> bool:
    """Whether the constraint itself lists the answers after `prefix` (a choice; an enum or const where a JSON
    value starts), at most `at_most` of them: ranking them then walks no language, cheap enough for the UI
    to do after every turn (more are refused by name when asked for)."""
    if constraint.kind == "choice":
        return 0 < sum(c.startswith(prefix) and len(c) > len(prefix) for c in constraint.value) <= at_most
    if constraint.kind != "json_schema":
        return False
    path = _value_path(prefix)
    return path is not None and 0 < len(_values(constraint.schema, constraint.schema, list(path))) <= at_most


def _value_path(prefix: str) -> jsonstate.Path | None:
    """The JSON path of the value that starts right after `prefix`; None when no value starts there."""
    state = jsonstate.scan(prefix)
    if state is None or state.in_string or state.scalar or state.done:
        return None
    top = state.top
    if top is not None and top.expect not in ("value", "value_or_end"):
        return None
    return state.path


def _json_position(constraint: Constraint, prefix: str) -> Alternatives:
    """The enum (or const) values of the JSON value that starts right after `prefix`."""
    path = _value_path(prefix)
    if path is None:
        raise InvalidConstraintError(
            "a JSON schema is scored at a value's position: give an answer prefix that ends where a value starts "
            '(as `{"kind": `)',
            field="continue_from",
        )
    schema = constraint.schema
    values = _values(schema, schema, list(path))
    where = jsonstate.path_text(path)
    if not values:
        raise InvalidConstraintError(
            f"the schema lists no `enum` or `const` values at {where}: nothing finite to score", field="grammar"
        )
    texts = list(dict.fromkeys(json.dumps(v, ensure_ascii=False) for v in values))
    leads = ("",) if prefix[-1:].isspace() else ("", " ")
    return Alternatives(_bounded(texts, f"the enum at {where}"), f"enum at {where}", False, leads)


def _values(root: dict, node: Any, path: list[str | int], seen: set[tuple[int, int]] | None = None) -> list[Any]:
    """The enum/const values allowed at `path` below `node`, through branches and local $refs. Each schema node is
    walked once per depth of the path (`seen`): a schema that refers to itself (`{"anyOf": [{"$ref": "#"}, ...]}`)
    ends, and one whose branches share nodes costs its size, not the number of ways through it."""
    seen = set() if seen is None else seen
    node = jsonstate._resolve(root, node)
    if not isinstance(node, dict) or (id(node), len(path)) in seen:
        return []
    seen.add((id(node), len(path)))
    found: list[Any] = []
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in node.get(key) or []:
            found.extend(_values(root, branch, path, seen))
    if not path:
        if "const" in node:
            found.append(node["const"])
        found.extend(node.get("enum") or [])
        if node.get("type") == "boolean" and not found:
            found.extend([True, False])
        return found
    step, rest = path[0], path[1:]
    if isinstance(step, int):
        prefix_items = node.get("prefixItems") or []
        child = prefix_items[step] if step < len(prefix_items) else node.get("items")
    else:
        child = (node.get("properties") or {}).get(step)
    return found + (_values(root, child, rest, seen) if child is not None else [])


def _language(engine: LocalEngine, constraint: Constraint, prefix_ids: list[int]) -> list[str]:
    """Every string the constraint accepts after the prefix: llguidance's matcher walked depth first over
    every token its mask allows, each distinct text visited once (llguidance may allow only some spellings)."""
    matcher = llguidance_matcher(engine, constraint, prefix_ids)
    if matcher is None:
        raise UnsupportedConstraintError(
            "scoring a regex or grammar walks its language with llguidance, which cannot read this one", field="grammar"
        )
    skip = engine.runner.special_ids | engine.runner.eos_ids
    found: list[str] = []
    seen = {""}
    stack = [(matcher, "")]
    while stack:
        row_budget.walked()
        node, text = stack.pop()
        if node.is_accepting():
            found.append(text)
            _bounded(found, f"the {constraint.kind}'s language")
        if node.is_stopped():
            continue
        bits = np.unpackbits(np.frombuffer(node.compute_bitmask(), dtype=np.uint8), bitorder="little")
        for token in reversed(bits[: engine.vocab_size].nonzero()[0].tolist()):
            piece = engine.token_text(token)
            if token in skip or not piece or "\ufffd" in piece or text + piece in seen:
                continue
            if len(text + piece) > MAX_ALTERNATIVE_CHARS or len(seen) > MAX_WALK_TEXTS:
                raise UnsupportedConstraintError(
                    f"the {constraint.kind}'s language is too large to score: answers longer than "
                    f"{MAX_ALTERNATIVE_CHARS} characters, or without end",
                    field="grammar",
                )
            seen.add(text + piece)
            child = node.deep_copy()
            child.consume_token(token)
            stack.append((child, text + piece))
    if not found:
        raise InvalidConstraintError(f"the {constraint.kind} allows no answer after the prefix", field="grammar")
    return sorted(found)
