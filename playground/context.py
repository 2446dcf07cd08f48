"""A context variable set for one block: how the playground scopes per-request state (the client, the compiler in
use, the verdict and walk budgets) across threads and tasks without globals."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

# A request's events read on another thread than the one decoding them (the HTTP server's): set once that reader has
# gone, so a job still waiting for its first event (a long prefill) leaves then, not when it next has one to give.
reader_gone: ContextVar[threading.Event | None] = ContextVar("reader_gone", default=None)


@contextlib.contextmanager
def bound(var: ContextVar[T], value: T) -> Iterator[T]:
    """`var` is `value` inside the block and what it was before after it, however the block ends."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)
