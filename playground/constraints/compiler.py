"""Compiling constraints for a tokenizer: Outlines engines in worker processes, limits, a cache of outcomes.

Compiling yields an Outlines logits processor template from one of three engines (llguidance, xgrammar,
outlines_core); every generation gets a fresh copy of the template, so the expensive part is done once
per (constraint, engine, tokenizer). The compile itself runs in playground.constraints.compile_pool's workers under
time and memory limits. The cache keeps outcomes, refusals included (failures of the limits only for a
while), so each request reports its own fallbacks and warnings whatever was cached.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import time
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from playground import client_scope
from playground.constraints import Constraint, backends
from playground.constraints.compile_pool import CompileLimits, CompilePool
from playground.constraints.schema_check import DATA_KEYWORDS
from playground.context import bound
from playground.errors import (
    CompileMemoryError,
    CompileTimeoutError,
    ConstraintError,
    InvalidConstraintError,
    UnsatisfiableConstraintError,
    UnsupportedConstraintError,
)

# A constraint that hit a limit is not compiled again for this long: repeating it answers at once.
FAILURE_MEMORY_S = 600.0
_REFUSALS = {
    "unsupported": UnsupportedConstraintError,
    "invalid": InvalidConstraintError,
    "unsatisfiable": UnsatisfiableConstraintError,
}


@dataclass
class CompiledConstraint:
    """A compiled constraint for one request: a processor template, and this request's warnings."""

    constraint: Constraint
    engine: str
    template: Any
    compile_s: float
    warnings: list[str] = field(default_factory=list)
    cached: bool = False  # the template came from the cache, not from a compile for this request

    def new_processor(self) -> Any:
        """A fresh, stateful logits processor `(input_ids, scores) -> scores`."""
        processor = copy.copy(self.template)
        processor.reset()
        return processor


@dataclass(frozen=True)
class _Outcome:
    """What compiling (constraint, engine) gave: a template with the engine's warnings, or an error."""

    template: Any = None
    warnings: tuple[str, ...] = ()
    compile_s: float = 0.0
    error: ConstraintError | None = None
    expires: float | None = None  # failures of the limits are remembered only until then

    def fresh(self, now: float) -> bool:
        return self.expires is None or now < self.expires


class ConstraintCompiler:
    """Compiles constraints for a tokenizer under CompileLimits, caching outcomes per (constraint, engine)."""

    def __init__(self, tokenizer: Any, *, limits: CompileLimits | None = None, cache_size: int = 128) -> None:
        self.tokenizer = tokenizer
        self.limits = limits or CompileLimits()
        # keyed by client too: whether a constraint was compiled before (its speed, `compile_cached`, a
        # remembered failure) would tell one client what another sent (playground.client_scope)
        self._cache: OrderedDict[tuple[str, Constraint, str], _Outcome] = OrderedDict()
        self._inflight: dict[tuple[str, Constraint, str], Future] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._pools: dict[bool, CompilePool] = {}  # by lane: False for requests, True for background work
        _COMPILERS.add(self)

    def _forked(self) -> None:
        """In a forked child (a ZeroGPU lease's worker): own compile workers, nothing waited on from the parent.

        The parent's workers' pipes would carry both processes' jobs, and its compiles in flight never end here."""
        self._lock = threading.Lock()
        self._inflight = {}
        self._pools = {}

    @property
    def timeout_s(self) -> float:
        return self.limits.timeout_s

    def pool(self, background: bool = False, engines: tuple[str, ...] | None = None) -> CompilePool:
        """The worker processes of a lane, started by its first compile (a server that never compiles spawns none).

        Background work (the inspect panel, /inspect) has a pool of its own, one worker: it never takes a
        worker a request is waiting for. (Not at a lower CPU priority: on a busy machine its compiles would
        run into the time limit.)
        """
        with self._lock:
            pool = self._pools.get(background)
            if pool is None:
                workers = 1 if background else None
                pool = self._pools[background] = CompilePool(
                    self.tokenizer, self.limits, engines=engines, workers=workers
                )
                weakref.finalize(self, pool.close)  # an engine dropped takes its workers with it
            return pool

    def warm(self, engine: str = "llguidance") -> None:
        """Build the server's tables for the default engine ahead of the first request (seconds, once)."""
        _backends.get(engine, self.tokenizer)

    def prepare(self) -> None:
        """What a first compile would wait for, done now (the UI calls this in the background at start): the
        requests' workers (the engine auto tries first warm), the background worker (every engine warm, as
        the inspect panel asks them all) and every engine's tables in the server."""
        self.pool()
        self.pool(background=True, engines=backends.names())
        for engine in backends.names():
            with contextlib.suppress(Exception):  # an engine that cannot read this tokenizer refuses per request
                self.warm(engine)

    def compile(
        self, constraint: Constraint, engine: str = "auto", *, background: bool = False
    ) -> CompiledConstraint | None:
        """The compiled constraint, or None for kind 'none'; raises a ConstraintError subclass.

        `background`: compiled in the background lane (see `pool`), for work no request waits on.
        """
        if constraint.kind == "none":
            return None
        refusals: list[str] = []
        for name in self._candidates(constraint, engine):
            outcome, cached = self._outcome(constraint, name, background)
            error = outcome.error
            if error is None:
                return _for_request(constraint, name, outcome, cached, refusals)
            if engine != "auto" or type(error) is not UnsupportedConstraintError:
                # the same words however it was found (a cache is no news), after the engines that refused before it
                before = f"; before it, {'; '.join(refusals)}" if refusals else ""
                raise type(error)(error.message + before)
            lenient = lenient_form(constraint, name, error)
            if lenient is not None:
                outcome, cached = self._outcome(lenient, name, background)
                if outcome.error is None:  # the verdict still judges by the constraint as sent
                    compiled = _for_request(constraint, name, outcome, cached, refusals)
                    compiled.warnings.append(LENIENT_NOTE)
                    return compiled
                if isinstance(outcome.error, UnsatisfiableConstraintError):  # fewer keywords, and still no value
                    raise type(outcome.error)(outcome.error.message)
                refusals.append(f"{error.message}; read leniently, {outcome.error.message}")
                continue
            refusals.append(error.message)
        raise UnsupportedConstraintError("no engine can enforce this constraint: " + " | ".join(refusals))

    def _candidates(self, constraint: Constraint, engine: str) -> tuple[str, ...]:
        if engine == "auto":
            return tuple(
                name
                for name in backends.auto_order(constraint.kind)
                if backends.get(name).refusal(constraint.kind, constraint.grammar_dialect) is None
            )
        try:
            backend = backends.get(engine)
        except KeyError as exc:
            raise ConstraintError(exc.args[0], field="constraint_engine") from None
        refusal = backend.refusal(constraint.kind, constraint.grammar_dialect)
        if refusal is not None:
            raise UnsupportedConstraintError(refusal)
        return (engine,)

    def _outcome(self, constraint: Constraint, engine: str, background: bool) -> tuple[_Outcome, bool]:
        """This client's cached outcome, the one its concurrent request is compiling, or a new compile's."""
        key = (client_scope.current(), constraint, engine)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit.fresh(time.monotonic()):
                self._cache.move_to_end(key)
                return hit, True
            waiting = self._inflight.get(key)
            if waiting is None:
                future = self._inflight[key] = Future()
        if waiting is not None:
            return waiting.result(), False
        try:
            outcome = self._compile_one(constraint, engine, background)
        except BaseException as exc:
            with self._lock:
                self._inflight.pop(key, None)
            future.set_exception(exc)
            raise
        with self._lock:
            self._inflight.pop(key, None)
            self._cache[key] = outcome
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        future.set_result(outcome)
        return outcome, False

    def _compile_one(self, constraint: Constraint, engine: str, background: bool) -> _Outcome:
        start = time.perf_counter()
        text = constraint.engine_input()
        try:
            payload, warnings = self.pool(background).compile(engine, constraint.kind, text)
        except backends.EngineRefusal as exc:
            return _Outcome(error=_REFUSALS[exc.kind](exc.message))
        except (CompileTimeoutError, CompileMemoryError) as exc:
            note = f"; the same constraint is not compiled with {engine} again for {FAILURE_MEMORY_S:g} s"
            return _Outcome(error=type(exc)(exc.message + note), expires=time.monotonic() + FAILURE_MEMORY_S)
        backend = _backends.get(engine, self.tokenizer)
        try:
            template = backends.get(engine).rebuild_template(backend, constraint.kind, text, payload)
        except backends.EngineRefusal as exc:  # (an engine's own limit, met building its first masks)
            return _Outcome(error=_REFUSALS[exc.kind](exc.message))
        return _Outcome(template, tuple(warnings), time.perf_counter() - start)


LENIENT_NOTE = (
    "auto took llguidance's lenient reading of the schema: the output is still validated against every keyword"
)


def lenient_form(constraint: Constraint, engine: str, error: ConstraintError) -> Constraint | None:
    """What `auto` tries next when llguidance refuses a JSON schema for keywords it does not implement (`not`,
    `uniqueItems`, `contains`) or a `format` it does not know: the same schema under its `lenient` option, whose
    mask leaves out just those (its warning names them) and enforces the rest. Leaving a keyword out only widens
    what the mask allows, and the verdict and the EOS gate still judge the output by every keyword; the next
    engines ignore what they cannot enforce without a word (xgrammar dropped a whole `allOf` of an `enum` and a
    `not`: MaskBench's draft 2019-09 `not` schemas came out as objects, refused at their end). None where that
    does not apply, or where the schema sets `lenient` itself."""
    if engine != "llguidance" or constraint.kind != "json_schema":
        return None
    if "Unimplemented keys" not in error.message and "Unknown format" not in error.message:
        return None
    own = constraint.schema.get("x-guidance")
    if isinstance(own, dict) and "lenient" in own:
        return None
    return constraint.with_schema(with_format_patterns(constraint.schema)).with_guidance(lenient=True)


# Formats llguidance does not know and the verdict checks: a pattern (or a format it knows) whose every match passes
# the check, for the lenient mask to enforce where it would leave the format out (`"format": "uri-reference"` at
# temperature 0 wrote `{ ` and the verdict refused it). Each is a subset of its format, tested against jsonschema's
# own checks in tests/unit/test_format_patterns.py.
FORMAT_PATTERNS = {
    "json-pointer": {"pattern": r"^(?:/(?:[^~/]|~[01])*)*$"},
    "relative-json-pointer": {"pattern": r"^(?:0|[1-9]+)(?:#|(?:/(?:[^~/]|~[01])*)*)$"},  # (jsonschema refuses "10")
    "uri-reference": {
        "pattern": r"^(?:[A-Za-z][A-Za-z0-9+.-]*://[A-Za-z0-9.-]*)?(?:[A-Za-z0-9._~-]+)?(?:/[A-Za-z0-9._~-]*)*"
        r"(?:\?[A-Za-z0-9._~/?=&-]*)?(?:#[A-Za-z0-9._~/?-]*)?$"
    },
    "iri-reference": {"format": "uri"},
    "iri": {"format": "uri"},
    "uri-template": {"pattern": r"^(?:[A-Za-z0-9._~:/?#@!$&'()*+,;=-]|\{[A-Za-z0-9_]+\})*$"},
    "idn-email": {"format": "email"},
    "idn-hostname": {"pattern": r"^[a-z0-9]{1,20}(?:\.[a-z0-9]{1,20}){0,3}$"},
    "regex": {"pattern": r"^[A-Za-z0-9 _-]*$"},  # text without a special character is a regex of itself
}


def with_format_patterns(schema: Any) -> Any:
    """The schema with FORMAT_PATTERNS in place of the formats llguidance does not know (a string schema that has
    a pattern of its own keeps it: the format is left out of the mask, as before)."""
    if isinstance(schema, list):
        return [with_format_patterns(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: value if key in DATA_KEYWORDS else with_format_patterns(value) for key, value in schema.items()}
    stand_in = FORMAT_PATTERNS.get(out.get("format")) if isinstance(out.get("format"), str) else None
    if stand_in is not None and "pattern" not in out:
        out.update(stand_in)
        if "pattern" in stand_in:
            del out["format"]
    return out


def _for_request(
    constraint: Constraint, engine: str, outcome: _Outcome, cached: bool, refusals: list[str]
) -> CompiledConstraint:
    """This request's view of an outcome: its own fallback report first, then the engine's warnings."""
    warnings = list(outcome.warnings)
    if refusals:
        warnings.insert(0, "; ".join(refusals) + f" — fell back to {engine}; the output is still validated")
    return CompiledConstraint(constraint, engine, outcome.template, outcome.compile_s, warnings, cached)


_backends = backends.ServerBackends()
_COMPILERS: weakref.WeakSet[ConstraintCompiler] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for compiler in list(_COMPILERS):
        compiler._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
_current: ContextVar[ConstraintCompiler | None] = ContextVar("playground_compiler", default=None)
_defaults: weakref.WeakKeyDictionary[Any, ConstraintCompiler] = weakref.WeakKeyDictionary()
_defaults_lock = threading.Lock()


def compiling_with(compiler: ConstraintCompiler) -> AbstractContextManager[ConstraintCompiler | None]:
    """Processors built by name inside this block compile with `compiler` (an engine's, with its limits)."""
    return bound(_current, compiler)


def compiler_for(tokenizer: Any) -> ConstraintCompiler:
    """The compiler of the engine building processors now; outside an engine, one default per tokenizer."""
    current = _current.get()
    if current is not None and current.tokenizer is tokenizer:
        return current
    with _defaults_lock:
        compiler = _defaults.get(tokenizer)
        if compiler is None:
            compiler = _defaults[tokenizer] = ConstraintCompiler(tokenizer)
        return compiler
