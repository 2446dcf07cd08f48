"""A context variable set for one block: how the playground scopes per-request state (the client, the compiler in
use, the verdict and walk budgets) across threads and tasks without globals."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def bound(var: ContextVar[T], value: T) -> Iterator[T]:
    """`var` is `value` inside the block and what it was before after it, however the block ends."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)
