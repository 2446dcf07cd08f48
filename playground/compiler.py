"""Compiling constraints for a tokenizer: Outlines backends, a time limit, an LRU cache.

Compiling yields an Outlines logits processor template from one of three engines (llguidance, xgrammar,
outlines_core); every generation gets a fresh copy of the template, so the expensive part is done once
per (constraint, engine, tokenizer).
"""

from __future__ import annotations

import copy
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from playground.constraints import Constraint
from playground.errors import (
    CompileTimeoutError,
    ConstraintError,
    InvalidConstraintError,
    UnsupportedConstraintError,
    first_line,
)

ENGINES = ("llguidance", "xgrammar", "outlines_core")
# Measured on MaskBench (shared/data/README): llguidance compiles fastest and never accepts an invalid
# instance; xgrammar compiles more schemas but may ignore what it can't enforce; outlines_core is last.
AUTO_ORDER: dict[str, tuple[str, ...]] = {
    "json_schema": ("llguidance", "xgrammar", "outlines_core"),
    "regex": ("llguidance", "xgrammar", "outlines_core"),
    "choice": ("llguidance", "xgrammar", "outlines_core"),
    "grammar": ("llguidance",),
}
SUPPORTS: dict[str, tuple[str, ...]] = {
    "llguidance": ("json_schema", "regex", "choice", "grammar"),
    "xgrammar": ("json_schema", "regex", "choice", "grammar"),
    "outlines_core": ("json_schema", "regex", "choice"),
}


@dataclass
class CompiledConstraint:
    """A compiled constraint: a processor template for one tokenizer, copied fresh per generation."""

    constraint: Constraint
    engine: str
    template: Any
    compile_s: float
    warnings: list[str] = field(default_factory=list)

    def new_processor(self) -> Any:
        """A fresh, stateful logits processor `(input_ids, scores) -> scores`."""
        processor = copy.copy(self.template)
        processor.reset()
        return processor


class _Backends:
    """One Outlines backend per (engine, tokenizer); building one reads the whole vocabulary."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._backends: dict[tuple[str, int], Any] = {}

    def get(self, engine: str, tokenizer: Any) -> Any:
        key = (engine, id(tokenizer))
        with self._lock:
            if key not in self._backends:
                self._backends[key] = _make_backend(engine, tokenizer)
            return self._backends[key]


def _make_backend(engine: str, tokenizer: Any) -> Any:
    from outlines import backends
    from outlines.models.transformers import Transformers

    # Outlines' backends read only the tokenizer; the model slot is unused by them.
    outlines_model = Transformers(None, tokenizer)
    classes = {
        "llguidance": backends.LLGuidanceBackend,
        "xgrammar": backends.XGrammarBackend,
        "outlines_core": backends.OutlinesCoreBackend,
    }
    backend = classes[engine](outlines_model)
    if engine == "llguidance":
        _warm_llguidance(backend)
    return backend


def _warm_llguidance(backend: Any) -> None:
    """llguidance builds its token trie on the first mask (seconds); pay that here, inside the time limit."""
    import llguidance
    import llguidance.torch

    matcher = llguidance.LLMatcher(backend.llg_tokenizer, llguidance.grammar_from("regex", "a"))
    bitmask = llguidance.torch.allocate_token_bitmask(1, backend.llg_tokenizer.vocab_size)
    llguidance.torch.fill_next_token_bitmask(matcher, bitmask, 0)


_backends = _Backends()
_executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="compile")


def _compile_with(engine: str, constraint: Constraint, tokenizer: Any) -> tuple[Any, list[str]]:
    backend = _backends.get(engine, tokenizer)
    text = constraint.engine_input()
    try:
        if constraint.kind == "json_schema":
            template = backend.get_json_schema_logits_processor(text)
        elif constraint.kind in ("regex", "choice"):
            template = backend.get_regex_logits_processor(text)
        else:
            template = backend.get_cfg_logits_processor(text)
    except NotImplementedError as exc:
        raise UnsupportedConstraintError(f"{engine} cannot enforce a {constraint.kind} constraint: {exc}") from None
    except Exception as exc:  # engines raise their own types (RuntimeError, ValueError, ...)
        raise UnsupportedConstraintError(f"{engine} refused the {constraint.kind}: {first_line(exc)}") from None
    warnings: list[str] = []
    if engine == "llguidance":
        import llguidance

        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            template.grammar, template.llg_tokenizer
        )
        if is_error:
            kind = InvalidConstraintError if constraint.kind == "grammar" else UnsupportedConstraintError
            raise kind(f"llguidance refused the {constraint.kind}: {'; '.join(messages)}")
        warnings.extend(messages)
    return template, warnings


class ConstraintCompiler:
    """Compiles constraints for a tokenizer under a time limit, with an LRU cache."""

    def __init__(self, tokenizer: Any, *, timeout_s: float = 10.0, cache_size: int = 128) -> None:
        self.tokenizer = tokenizer
        self.timeout_s = timeout_s
        self._cache: OrderedDict[tuple[Constraint, str], CompiledConstraint] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def warm(self, engine: str = "llguidance") -> None:
        """Build the default engine's tables ahead of the first request (seconds, once per tokenizer)."""
        _backends.get(engine, self.tokenizer)

    def compile(self, constraint: Constraint, engine: str = "auto") -> CompiledConstraint | None:
        """The compiled constraint, or None for kind 'none'; raises a ConstraintError subclass."""
        if constraint.kind == "none":
            return None
        candidates = self._candidates(constraint, engine)
        refusals: list[str] = []
        for name in candidates:
            key = (constraint, name)
            with self._lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    return self._cache[key]
            try:
                compiled = self._compile_timed(constraint, name)
            except UnsupportedConstraintError as exc:
                if engine != "auto":
                    raise
                refusals.append(exc.message)
                continue
            if refusals:
                compiled.warnings.insert(
                    0, "; ".join(refusals) + f" — fell back to {name}; the output is still validated"
                )
            with self._lock:
                self._cache[key] = compiled
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            return compiled
        raise UnsupportedConstraintError("no engine can enforce this constraint: " + " | ".join(refusals))

    def _candidates(self, constraint: Constraint, engine: str) -> tuple[str, ...]:
        if engine == "auto":
            return AUTO_ORDER[constraint.kind]
        if engine not in ENGINES:
            raise ConstraintError(
                f"unknown constraint engine {engine!r}; use auto, {', '.join(ENGINES)}", field="constraint_engine"
            )
        if constraint.kind not in SUPPORTS[engine]:
            raise UnsupportedConstraintError(f"{engine} does not support {constraint.kind} constraints")
        if engine == "xgrammar" and constraint.kind == "grammar" and constraint.grammar_dialect == "lark":
            raise UnsupportedConstraintError(
                "xgrammar reads GBNF grammars (root ::= ...), not Lark; use llguidance or auto for Lark"
            )
        return (engine,)

    def _compile_timed(self, constraint: Constraint, engine: str) -> CompiledConstraint:
        start = time.perf_counter()
        future = _executor.submit(_compile_with, engine, constraint, self.tokenizer)
        try:
            template, warnings = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            # The worker thread cannot be killed; it finishes in the background and its result is dropped.
            raise CompileTimeoutError(
                f"compiling the {constraint.kind} with {engine} took longer than {self.timeout_s:g} s"
            ) from None
        return CompiledConstraint(constraint, engine, template, time.perf_counter() - start, warnings)
