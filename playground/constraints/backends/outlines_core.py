"""outlines_core: JSON Schema, regex and choice through one DFA index (TGI's engine); no grammars.

The worker's payload is the `Index` itself (it pickles). outlines_core builds one DFA state per
repetition, so counted repetition past OUTLINES_CORE_MAX_REPEAT is refused before it is unrolled.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from playground.constraints import jsonformat
from playground.constraints.backends.base import (
    TENSOR_LIBRARY,
    Backend,
    EngineRefusal,
    check_satisfiable,
    first_line,
    narrow_classes,
    outlines_backend,
    refusing,
)

# Measured: [a-z]{1,1000} ~ 200 MB, {1,5000} ~ 760 MB and 6 s; llguidance and xgrammar handle counted
# repetition without unrolling it.
OUTLINES_CORE_MAX_REPEAT = 1000
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")


class OutlinesCore(Backend):
    name: ClassVar[str] = "outlines_core"
    kinds: ClassVar[frozenset[str]] = frozenset({"json_schema", "regex", "choice"})
    # Measured with outlines_core 0.2.14: a one-keyword schema whose violating instance the mask still accepts.
    ignored_keywords: ClassVar[frozenset[str]] = frozenset(
        {"contains", "dependencies", "dependentRequired", "exclusiveMaximum", "exclusiveMinimum", "if"}
        | {"maxProperties", "maximum", "minProperties", "minimum", "multipleOf", "oneOf", "propertyNames"}
        | {"uniqueItems"}
    )
    notes: ClassVar[str] = "TGI's engine: one DFA over the regex a schema becomes; no grammars"

    def worker_backend(self, tokenizer: Any) -> Any:
        return outlines_backend("outlines_core", tokenizer)

    def compile_payload(self, backend: Any, kind: str, text: str) -> tuple[Any, list[str]]:
        if kind == "json_schema":
            check_satisfiable(text)
        pattern = check_bounds(kind, text)
        template = refusing(self.name, kind, lambda: backend.get_regex_logits_processor(pattern))
        return template.index, narrow_classes(self.name, kind, text, "dwsp")

    def rebuild_template(self, backend: Any, kind: str, text: str, payload: Any) -> Any:
        from outlines.backends.outlines_core import OutlinesCoreLogitsProcessor

        return OutlinesCoreLogitsProcessor(payload, TENSOR_LIBRARY)

    def compiled_form(self, constraint: Any, template: Any) -> str:
        return regex_of(constraint.kind, constraint.engine_input())


def regex_of(kind: str, text: str) -> str:
    """The regex outlines_core compiles: a schema's, with its JSON layout as the whitespace, or the text itself."""
    if kind != "json_schema":
        return text
    from outlines_core.json_schema import build_regex_from_schema

    schema, layout = jsonformat.layout_of(json.loads(text))
    named = {
        "pretty": jsonformat.PRETTY_PATTERN,
        "compact": jsonformat.COMPACT_PATTERN,
        "free": jsonformat.FREE_PATTERN,
    }
    try:
        return build_regex_from_schema(json.dumps(schema), whitespace_pattern=named.get(layout, layout))
    except Exception as exc:
        raise EngineRefusal("unsupported", f"outlines_core refused the json_schema: {first_line(exc)}") from None


def check_bounds(kind: str, text: str) -> str:
    """The regex to compile; refused when counted repetition would unroll past OUTLINES_CORE_MAX_REPEAT states."""
    text = regex_of(kind, text)
    repeat = max_repetition(text)
    if repeat > OUTLINES_CORE_MAX_REPEAT:
        raise EngineRefusal(
            "unsupported",
            f"outlines_core unrolls counted repetition into states: a repetition of up to {repeat} "
            f"exceeds its limit of {OUTLINES_CORE_MAX_REPEAT} (llguidance and xgrammar take it)",
        )
    return text


BACKEND = OutlinesCore()


def max_repetition(pattern: str) -> int:
    """The largest count a regex repeats anything, nested counts multiplied (`(a{1,10}){2}` -> 20)."""
    inner = [1]  # per open group: the largest product of counts inside it
    last, i = 1, 0  # last: the product the previous atom carries (a group's inner product, else 1)
    while i < len(pattern):
        char, step = pattern[i], 1
        if char == "\\":
            last, step = 1, 2
        elif char == "[":
            last, step = 1, _class_end(pattern, i) - i
        elif char == "(":
            inner.append(1)
            last = 1
        elif char == ")" and len(inner) > 1:
            last = inner.pop()
            inner[-1] = max(inner[-1], last)
        elif char == "{" and (match := _QUANTIFIER.match(pattern, i)):
            last *= int(match.group(2) or match.group(1))
            inner[-1] = max(inner[-1], last)
            step = match.end() - i
        else:
            last = 1
        i += step
    return max(inner)


def _class_end(pattern: str, start: int) -> int:
    """The index just past the character class opening at `start` (nested classes counted)."""
    depth, i = 0, start
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "[":
            depth += 1
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                i += 1
        elif pattern[i] == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(pattern)
