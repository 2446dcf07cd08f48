"""Where a partial JSON text stands: the open containers, the current path, what may come next.

Reasons and the field roll-up read the answer as JSON while it is still being written; this scanner is
tolerant of an unfinished text and says None only when the text cannot be the start of any JSON value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Path = tuple[str | int, ...]
_LITERALS = ("true", "false", "null")
_NUMBER_CHARS = set("0123456789+-.eE")


@dataclass
class Frame:
    """One open object or array."""

    kind: str  # "object" | "array"
    keys: list[str] = field(default_factory=list)
    key: str | None = None
    index: int = 0
    expect: str = (
        "key_or_end"  # object: key_or_end, key, colon, value, comma_or_end; array: value_or_end, value, comma_or_end
    )


@dataclass
class JsonState:
    """The scanner's view after a prefix."""

    stack: list[Frame] = field(default_factory=list)
    started: bool = False
    done: bool = False
    in_string: bool = False
    string_is_key: bool = False
    string: str = ""
    scalar: str = ""
    escaping: bool = False  # inside a string's escape (`\\`, `\\u00`): the next character is no mark

    @property
    def path(self) -> Path:
        """The JSON path of the value being written (a key being written belongs to its object)."""
        out: list[str | int] = []
        for frame in self.stack:
            if frame.kind == "array":
                out.append(frame.index)
            elif frame.key is not None and not (frame is self.stack[-1] and self.string_is_key):
                out.append(frame.key)
        return tuple(out)

    @property
    def container_path(self) -> Path:
        """The path of the innermost open object or array."""
        out: list[str | int] = []
        for frame in self.stack[:-1]:
            if frame.kind == "array":
                out.append(frame.index)
            elif frame.key is not None:
                out.append(frame.key)
        return tuple(out)

    @property
    def top(self) -> Frame | None:
        return self.stack[-1] if self.stack else None


_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}  # (`"`, `\\` and `/` stand for themselves)
_HEX = frozenset("0123456789abcdefABCDEF")


class Scanner:
    """A character-level JSON prefix scanner, fed as the text grows; `failed` once no JSON value starts that way."""

    def __init__(self) -> None:
        self.s = JsonState()
        self.escape = False
        self.unicode: str | None = None  # the hex digits of a `\\u` escape so far
        self.failed = False

    def feed(self, text: str) -> bool:
        if self.failed:
            return False
        for char in text:
            if not self._char(char):
                self.failed = True
                return False
        return True

    def _char(self, c: str) -> bool:
        s = self.s
        if s.in_string:
            return self._string_char(c)
        if s.scalar:
            if c in _NUMBER_CHARS or c.isalpha():
                s.scalar += c
                return True
            self._end_value()
        if c in " \t\r\n":
            return True
        if s.done:
            return False
        top = s.top
        if top is None:
            return self._value_start(c) if not s.started else False
        if top.kind == "object":
            return self._object_char(top, c)
        return self._array_char(top, c)

    def _string_char(self, c: str) -> bool:
        s = self.s
        if self.unicode is not None:
            self.unicode += c
            if len(self.unicode) == 4:
                code = int(self.unicode, 16) if all(h in _HEX for h in self.unicode) else 0xFFFD
                self.unicode, s.escaping = None, False
                high = ord(s.string[-1]) if s.string else 0
                if 0xDC00 <= code <= 0xDFFF and 0xD800 <= high <= 0xDBFF:  # a surrogate pair: one character
                    s.string = s.string[:-1] + chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00))
                else:
                    s.string += chr(code)
            return True
        if self.escape:
            self.escape = False
            if c == "u":
                self.unicode = ""
                return True
            s.escaping = False
            s.string += _ESCAPES.get(c, c)
            return True
        if c == "\\":
            self.escape = s.escaping = True
            return True
        if c == '"':
            s.in_string = False
            if s.string_is_key:
                top = s.top
                assert top is not None
                top.key = s.string
                top.keys.append(s.string)
                top.expect = "colon"
                s.string_is_key = False
            else:
                self._end_value()
            return True
        s.string += c
        return True

    def _object_char(self, top: Frame, c: str) -> bool:
        if top.expect in ("key_or_end", "key") and c == '"':
            self.s.in_string, self.s.string_is_key, self.s.string = True, True, ""
            return True
        if top.expect in ("key_or_end", "comma_or_end") and c == "}":
            return self._close()
        if top.expect == "colon" and c == ":":
            top.expect = "value"
            return True
        if top.expect == "comma_or_end" and c == ",":
            top.expect, top.key = "key", None
            return True
        return top.expect == "value" and self._value_start(c)

    def _array_char(self, top: Frame, c: str) -> bool:
        if top.expect in ("value_or_end", "comma_or_end") and c == "]":
            return self._close()
        if top.expect == "comma_or_end" and c == ",":
            top.index += 1
            top.expect = "value"
            return True
        return top.expect in ("value_or_end", "value") and self._value_start(c)

    def _value_start(self, c: str) -> bool:
        s = self.s
        s.started = True
        if c == "{":
            s.stack.append(Frame("object"))
        elif c == "[":
            s.stack.append(Frame("array", expect="value_or_end"))
        elif c == '"':
            s.in_string, s.string_is_key, s.string = True, False, ""
        elif c in "-0123456789" or c in "tfn":
            s.scalar = c
        else:
            return False
        return True

    def _close(self) -> bool:
        self.s.stack.pop()
        self._end_value()
        return True

    def _end_value(self) -> None:
        s = self.s
        s.scalar = ""
        if s.top is None:
            s.done = True
        else:
            s.top.expect = "comma_or_end"


def scan(text: str) -> JsonState | None:
    """The state after `text`, or None when no JSON value starts that way."""
    scanner = Scanner()
    return scanner.s if scanner.feed(text) else None


def subschema(schema: dict, path: Path) -> dict | None:
    """The schema that governs the value at `path` (local $ref followed); None where it can't be told."""
    node: Any = _resolve(schema, schema)
    for step in path:
        if not isinstance(node, dict):
            return None
        if isinstance(step, int):
            prefix = node.get("prefixItems") or []
            node = prefix[step] if step < len(prefix) else node.get("items")
        else:
            props = node.get("properties") or {}
            node = props.get(step, node.get("additionalProperties"))
        node = _resolve(schema, node)
    return node if isinstance(node, dict) else None


def _resolve(root: dict, node: Any) -> Any:
    """Follow local `$ref`s ("#/$defs/x"), at most a few hops."""
    for _ in range(8):
        if not (isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#")):
            return node
        target: Any = root
        for part in node["$ref"].lstrip("#").strip("/").split("/"):
            if not part:
                continue
            if not isinstance(target, dict) or part not in target:
                return None
            target = target[part]
        node = target
    return node


def path_text(path: Path) -> str:
    """A path as people write it: `address.city`, `items[2]`; `(root)` for the whole answer."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or "(root)"
