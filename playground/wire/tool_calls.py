"""Tool calls read out of decoded text, whole (the answer) or as far as written (the stream).

The constraint writes a call as `{"name": ..., "arguments": {...}}` (a list of them with parallel calls),
or, for a named tool_choice, the arguments object alone. Both readings slice the arguments' own text,
so a stream's `arguments` deltas add up to the answer's `arguments`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_NEXT = re.compile(r"\s*\}\s*,")
_DECODER = json.JSONDecoder()


@dataclass
class Call:
    name: str
    arguments: str  # the arguments' JSON text so far
    complete: bool


def value_end(text: str, start: int) -> int | None:
    """The index just past the JSON value that starts at `start`, or None while it is unfinished."""
    depth, in_string, escaped = 0, False, False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                if depth == 0:
                    return index + 1
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
        elif depth == 0 and not char.isspace():  # a number, true, false or null: known once something follows
            try:
                _, end = _DECODER.raw_decode(text, index)
            except ValueError:
                return None
            return end if end < len(text) else None
    return None


def partial(text: str, named: str | None, parallel: bool) -> list[Call]:
    """The calls as far as they are written; a call appears once its name is known."""
    if named is not None:
        body = text.lstrip()
        if not body:
            return []
        start = len(text) - len(body)
        end = value_end(text, start)
        return [Call(named, text[start : end or len(text)], end is not None)]
    position = 0
    if parallel:
        opening = re.compile(r"\s*\[").match(text)
        if not opening:
            return []
        position = opening.end()
    calls: list[Call] = []
    while True:
        head = _HEAD.match(text, position)
        if not head:
            return calls
        name = json.loads(f'"{head.group(1)}"')
        end = value_end(text, head.end())
        calls.append(Call(name, text[head.end() : end or len(text)], end is not None))
        if end is None or not parallel:
            return calls
        following = _NEXT.match(text, end)
        if not following:
            return calls
        position = following.end()


def final(text: str, named: str | None, parallel: bool) -> list[tuple[str, str]] | None:
    """(name, arguments JSON text) of each call in a whole answer; None when it is not whole calls."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        return None
    if named is not None:
        return [(named, text.strip())]
    wanted = data if parallel and isinstance(data, list) else [data]
    if not wanted or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and "arguments" in c for c in wanted
    ):
        return None
    sliced = partial(text, None, parallel and isinstance(data, list))
    if len(sliced) == len(wanted) and all(c.complete for c in sliced):
        return [(c.name, c.arguments) for c in sliced]
    return [(c["name"], json.dumps(c["arguments"])) for c in wanted]
