"""Constraint engines as backends: one module per engine, registered once, every engine list read from here.

A backend works on both sides of the compile worker (playground.constraints.compile_pool): in a worker
process it compiles (`compile_payload`: slow, unbounded in the engine itself) and sends back a payload;
in the server it rebuilds a processor template from that payload cheaply (`rebuild_template`).
Adding an engine is one module that subclasses Backend and calls `register`.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from playground.constraints.backends import llguidance, outlines_core, xgrammar
from playground.constraints.backends.base import Backend, EngineRefusal

__all__ = ["Backend", "EngineRefusal", "ServerBackends", "auto_order", "get", "names", "register", "worker_backend"]

_registry: dict[str, Backend] = {}
_registry_lock = threading.Lock()


def register(backend: Backend) -> Backend:
    """Add an engine (in the `auto` order: registration order); a second one by the same name replaces it."""
    with _registry_lock:
        _registry[backend.name] = backend
    return backend


def unregister(name: str) -> None:
    with _registry_lock:
        _registry.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered engine, in the `auto` order."""
    with _registry_lock:
        return tuple(_registry)


def get(name: str) -> Backend:
    """The engine called `name`; a KeyError names the known ones."""
    with _registry_lock:
        backend = _registry.get(name)
    if backend is None:
        raise KeyError(f"unknown constraint engine {name!r}; use auto, {', '.join(names())}")
    return backend


def auto_order(kind: str) -> tuple[str, ...]:
    """The engines `auto` tries for `kind`, in order: every registered engine that reads it."""
    return tuple(n for n in names() if kind in get(n).kinds)


def worker_backend(name: str, tokenizer: Any) -> Any:
    """What a worker keeps warm for engine `name`; a first compile builds its tables outside any limit."""
    return get(name).warmed(tokenizer)


class ServerBackends:
    """What the server needs per (engine, tokenizer) to rebuild templates: built once, freed with the tokenizer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[tuple[str, int], tuple[Any, Any]] = {}

    def get(self, engine: str, tokenizer: Any) -> Any:
        key = (engine, id(tokenizer))
        with self._lock:
            hit = self._built.get(key)
            if hit is None or hit[0]() is not tokenizer:
                built = get(engine).server_backend(tokenizer)
                self._built[key] = (weakref.ref(tokenizer, lambda _, k=key: self._forget(k)), built)
                return built
            return hit[1]

    def _forget(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._built.pop(key, None)


# Measured on MaskBench (README, "Benchmarks"): llguidance compiles fastest and never accepts an invalid
# instance; xgrammar compiles more schemas but may ignore what it can't enforce; outlines_core is last.
for _module in (llguidance, xgrammar, outlines_core):
    register(_module.BACKEND)
