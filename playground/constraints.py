"""Constraints: parse and check before decoding, compile (cached, time-limited), validate the output.

A Constraint is a kind plus its canonical value. Compiling it for a tokenizer yields an Outlines logits
processor template from one of three engines (llguidance, xgrammar, outlines_core); every generation
gets a fresh copy of the template, so the expensive part is done once per (constraint, tokenizer).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from playground.errors import (
    CompileTimeoutError,
    ConstraintError,
    InvalidConstraintError,
    UnsupportedConstraintError,
)
from playground.types import ConstraintKind, GrammarType, Validation

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


@dataclass(frozen=True)
class Constraint:
    """A parsed, checked constraint: kind and canonical value (schema dict, pattern, choices, grammar)."""

    kind: ConstraintKind
    value: Any = None

    @classmethod
    def none(cls) -> "Constraint":
        return cls("none", None)

    @classmethod
    def from_grammar(cls, grammar: GrammarType | dict | None) -> "Constraint":
        """From TGI's `grammar` parameter (json, json_schema, regex) or ours (choice, grammar)."""
        if grammar is None:
            return cls.none()
        if isinstance(grammar, dict):
            grammar = GrammarType.model_validate(grammar)
        if grammar.type == "json":
            return cls.json_schema(grammar.value)
        if grammar.type == "json_schema":
            value = grammar.value
            if isinstance(value, str):
                value = _load_json(value, "grammar.value")
            if not isinstance(value, dict) or "schema" not in value:
                raise InvalidConstraintError(
                    "grammar of type json_schema needs a value {name?, schema}", field="parameters.grammar.value"
                )
            return cls.json_schema(value["schema"])
        if grammar.type == "regex":
            return cls.regex(grammar.value)
        if grammar.type == "choice":
            return cls.choice(grammar.value)
        return cls.grammar(grammar.value)

    @classmethod
    def parse(cls, kind: str, text: str) -> "Constraint":
        """From the UI's (kind, text) pair; choice text is a JSON list or one choice per line."""
        if kind in ("none", "", None):
            return cls.none()
        if kind == "json_schema":
            return cls.json_schema(text)
        if kind == "regex":
            return cls.regex(text)
        if kind == "choice":
            stripped = text.strip()
            if stripped.startswith("["):
                return cls.choice(_load_json(stripped, "choice list"))
            return cls.choice([line for line in text.splitlines() if line.strip()])
        if kind == "grammar":
            return cls.grammar(text)
        raise InvalidConstraintError(f"unknown constraint kind {kind!r}; use none, json_schema, regex, choice or grammar")

    @classmethod
    def json_schema(cls, schema: Any) -> "Constraint":
        """Accepts a dict, JSON text, or a pydantic model class."""
        if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
            schema = schema.model_json_schema()
        if isinstance(schema, str):
            schema = _load_json(schema, "JSON schema")
        if isinstance(schema, bool):
            schema = {} if schema else {"not": {}}
        if not isinstance(schema, dict):
            raise InvalidConstraintError(f"a JSON schema must be an object, got {type(schema).__name__}")
        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
            raise InvalidConstraintError(f"not a valid JSON Schema at {where}: {exc.message}") from None
        return cls("json_schema", _Frozen(schema))

    @classmethod
    def regex(cls, pattern: Any) -> "Constraint":
        if not isinstance(pattern, str) or not pattern:
            raise InvalidConstraintError("a regex constraint needs a non-empty pattern string")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidConstraintError(f"invalid regex at position {exc.pos}: {exc.msg}") from None
        return cls("regex", pattern)

    @classmethod
    def choice(cls, choices: Any) -> "Constraint":
        if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
            raise InvalidConstraintError("a choice constraint needs a non-empty list of non-empty strings")
        return cls("choice", tuple(dict.fromkeys(choices)))

    @classmethod
    def grammar(cls, text: Any) -> "Constraint":
        if not isinstance(text, str) or not text.strip():
            raise InvalidConstraintError("a grammar constraint needs Lark grammar text with a `start` rule")
        return cls("grammar", text)

    @property
    def schema(self) -> dict:
        return self.value.data if isinstance(self.value, _Frozen) else {}

    def engine_input(self) -> str:
        """The text an engine compiles: schema JSON, a regex (choices become an alternation), a grammar."""
        if self.kind == "json_schema":
            return json.dumps(self.schema)
        if self.kind == "choice":
            return "(" + "|".join(_escape_rust_regex(c) for c in self.value) + ")"
        return self.value

    def validate(self, text: str) -> Validation:
        """The verdict on a finished output; the last line of defence whatever engine made the mask."""
        if self.kind == "none":
            return Validation(valid=None, message="no constraint")
        if self.kind == "json_schema":
            return _validate_json(self.schema, text)
        if self.kind == "regex":
            ok = re.fullmatch(self.value, text) is not None
            return Validation(valid=ok, message="full match" if ok else f"does not fully match /{self.value}/")
        if self.kind == "choice":
            ok = text in self.value
            return Validation(valid=ok, message="one of the choices" if ok else "not one of the choices")
        return _validate_lark(self.value, text)


class _Frozen:
    """A hashable wrapper for a schema dict, so constraints can key the compile cache."""

    __slots__ = ("data", "_key")

    def __init__(self, data: dict) -> None:
        self.data = data
        self._key = json.dumps(data, sort_keys=True)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen) and other._key == self._key

    def __repr__(self) -> str:
        return self._key


def _load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidConstraintError(f"invalid JSON in {what}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def _escape_rust_regex(text: str) -> str:
    """Escape for the Rust regex dialect the engines use (Python's re.escape over-escapes some chars)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$#&\-~])", r"\\\1", text)


def _validate_json(schema: dict, text: str) -> Validation:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return Validation(valid=False, message=f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    errors = sorted(validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER).iter_errors(data), key=str)
    if not errors:
        return Validation(valid=True, message="valid against the schema")
    first = errors[0]
    where = "/".join(str(p) for p in first.absolute_path) or "(root)"
    return Validation(valid=False, message=f"schema violation at {where}: {first.message}")


def _validate_lark(grammar: str, text: str) -> Validation:
    import lark

    try:
        parser = _lark_parser(grammar)
    except lark.exceptions.LarkError as exc:
        return Validation(valid=None, message=f"could not check with lark: {str(exc).splitlines()[0]}")
    try:
        parser.parse(text)
    except lark.exceptions.LarkError as exc:
        return Validation(valid=False, message=f"does not parse: {str(exc).splitlines()[0]}")
    return Validation(valid=True, message="parses with the grammar")


_lark_cache: dict[str, Any] = {}


def _lark_parser(grammar: str) -> Any:
    import lark

    if grammar not in _lark_cache:
        _lark_cache[grammar] = lark.Lark(grammar, start="start", parser="earley")
    return _lark_cache[grammar]


# --- compiling ---------------------------------------------------------------------------------


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
        raise UnsupportedConstraintError(f"{engine} refused the {constraint.kind}: {_first_line(exc)}") from None
    warnings: list[str] = []
    if engine == "llguidance":
        import llguidance

        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(template.grammar, template.llg_tokenizer)
        if is_error:
            kind = InvalidConstraintError if constraint.kind == "grammar" else UnsupportedConstraintError
            raise kind(f"llguidance refused the {constraint.kind}: {'; '.join(messages)}")
        warnings.extend(messages)
    return template, warnings


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


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
                compiled.warnings.insert(0, "; ".join(refusals) + f" — fell back to {name}; the output is still validated")
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
            raise ConstraintError(f"unknown constraint engine {engine!r}; use auto, {', '.join(ENGINES)}", field="constraint_engine")
        if constraint.kind not in SUPPORTS[engine]:
            raise UnsupportedConstraintError(f"{engine} does not support {constraint.kind} constraints")
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


def check_constraint(kind: str, text: str) -> str | None:
    """For live checks in the UI: an error message, or None when the text parses as that kind."""
    try:
        Constraint.parse(kind, text)
    except ConstraintError as exc:
        return exc.message
    return None
