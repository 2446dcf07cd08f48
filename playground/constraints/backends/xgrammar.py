"""xgrammar: every kind, GBNF grammars only; compiles more schemas but ignores some keywords.

The worker's payload is nothing: the server compiles the same input again with the same options, once the
worker has shown that the compile ends within the limits. Shipping the result costs more than compiling
twice: xgrammar 0.2's `CompiledGrammar.serialize_json()` writes the grammar's complete FSM once per rule
(MaskBench's Github_hard---o21372: a 3.3 MB grammar becomes 119 MB of JSON, 4.6 s to write, 2 s to read
back, over 1 GB while writing), against 1.8 s to compile it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from playground.constraints import jsonformat, segments
from playground.constraints.backends.base import (
    Backend,
    EngineRefusal,
    check_satisfiable,
    narrow_classes,
    outlines_backend,
    refusing,
)
from playground.constraints.backends.bitmask import BitmaskProcessor

# xgrammar's strict mode forbids unlisted properties although JSON Schema allows them (measured on MaskBench).
JSON_OPTIONS: dict[str, Any] = {"strict_mode": False}


@dataclass
class _InServer:
    """xgrammar in the server: the worker's kind of backend, and a lock so one proven compile runs at a time."""

    backend: Any
    lock: threading.Lock = field(default_factory=threading.Lock)


class XGrammar(Backend):
    name: ClassVar[str] = "xgrammar"
    kinds: ClassVar[frozenset[str]] = frozenset({"json_schema", "regex", "choice", "grammar", "structural_tag"})
    # Measured with xgrammar 0.2.9: a one-keyword schema whose violating instance the mask still accepts.
    ignored_keywords: ClassVar[frozenset[str]] = frozenset(
        {"allOf", "contains", "dependencies", "dependentRequired", "if", "not", "oneOf", "unevaluatedProperties"}
        | {"uniqueItems"}
    )
    notes: ClassVar[str] = "compiles the most schemas; ignores some keywords; reads GBNF, not Lark"

    def refusal(self, kind: str, dialect: str | None) -> str | None:
        if kind == "grammar" and dialect == "lark":
            return "xgrammar reads GBNF grammars (root ::= ...), not Lark; use llguidance or auto for Lark"
        return super().refusal(kind, dialect)

    def worker_backend(self, tokenizer: Any) -> Any:
        import xgrammar

        backend = outlines_backend("xgrammar", tokenizer)
        # playground.constraints.compiler keeps the cache of outcomes; xgrammar's own would only grow the process.
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer.get_vocab()))
        backend.grammar_compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        return backend

    def compile_payload(self, backend: Any, kind: str, text: str) -> tuple[Any, list[str]]:
        if kind == "json_schema":
            check_satisfiable(text)
        refusing(self.name, kind, lambda: _template(backend, kind, text))
        return None, narrow_classes(self.name, kind, text, "dw")  # the server compiles it again (module docstring)

    def server_backend(self, tokenizer: Any) -> Any:
        return _InServer(self.warmed(tokenizer))

    def rebuild_template(self, backend: Any, kind: str, text: str, payload: Any) -> Any:
        with backend.lock:  # a worker compiled it within the limits; one at a time, so the server grows by one
            return _template(backend.backend, kind, text)

    def compiled_form(self, constraint: Any, template: Any) -> str:
        return str(template.compiled_grammar.grammar)


def _template(backend: Any, kind: str, text: str) -> Any:
    """The processor template, from the grammar Outlines' backend compiles (with our options for schemas)."""
    if kind == "json_schema":
        schema, layout = jsonformat.layout_of(json.loads(text))
        options = {**JSON_OPTIONS, **_whitespace(layout)}
        return XGrammarProcessor(backend.grammar_compiler.compile_json_schema(json.dumps(schema), **options))
    if kind == "structural_tag":  # xgrammar's own; its markers are text (special tokens are never produced)
        return XGrammarProcessor(
            backend.grammar_compiler.compile_structural_tag(segments.to_xgrammar(json.loads(text)))
        )
    if kind == "regex":
        text = dot_without_newline(text)
    if kind in ("regex", "choice"):
        return XGrammarProcessor(backend.get_regex_logits_processor(text).compiled_grammar)
    return XGrammarProcessor(backend.get_cfg_logits_processor(text).compiled_grammar)


def dot_without_newline(pattern: str) -> str:
    r"""The regex with each `.` outside a class as `[^\n]`: the verdict's regex (and llguidance's and outlines_core's
    masks) read `.` so, xgrammar's lets a newline through (output then broke its constraint). Classes are read as
    xgrammar reads them: an unescaped `]` ends one (and xgrammar refuses inline flags such as `(?s)`)."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == ".":
            char = "[^\\n]"
        out.append(char)
        i += 1
    return "".join(out)


class XGrammarProcessor(BitmaskProcessor):
    """One row's xgrammar matcher, as Outlines' XGrammarLogitsProcessor drives it, over its bitmask."""

    rewinds = True

    def __init__(self, compiled_grammar: Any) -> None:
        self.compiled_grammar = compiled_grammar
        super().__init__(compiled_grammar.tokenizer_info.vocab_size)

    def reset(self) -> None:
        super().reset()
        self._matcher: Any = None
        self._last: np.ndarray | None = None

    def _start(self) -> None:
        import xgrammar

        self._matcher = xgrammar.GrammarMatcher(self.compiled_grammar)

    def _consume(self, tokens: list[int]) -> None:
        for token in tokens:
            if not self._matcher.is_terminated() and not self._matcher.accept_token(token):
                raise RuntimeError(f"XGrammar matcher rejected token {token}")

    def _restore(self, snapshot: Any, count: int) -> None:
        self._matcher.rollback(count)

    def _fill(self, out: np.ndarray) -> None:
        if self._matcher.is_terminated():  # Outlines leaves the last mask as it was (all allowed at first)
            out[:] = self._last if self._last is not None else -1
        else:
            self._matcher.fill_next_token_bitmask(out.reshape(1, -1), 0)
        self._last = out


def _whitespace(layout: str) -> dict[str, Any]:
    """A JSON layout as xgrammar's options: exact separators for compact, a bounded count for pretty."""
    if layout == "compact":
        return {"any_whitespace": False}
    if layout == "pretty":
        return {"any_whitespace": True, "max_whitespace_cnt": jsonformat.PRETTY_INDENT + 1}
    if layout == "free":
        return {"any_whitespace": True}
    raise EngineRefusal("unsupported", "xgrammar takes no whitespace_pattern (only compact, pretty or free layouts)")


BACKEND = XGrammar()
