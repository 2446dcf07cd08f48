"""Which client a request comes from, for state that must not be shared across clients (the prefix cache).

The server sets it per HTTP request (ClientScope, from the caller's address and credentials) and the UI
per conversation; code outside a server (a notebook, a script, a test) is one client, LOCAL.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from contextvars import ContextVar

LOCAL = "local"
_current: ContextVar[str] = ContextVar("playground_client_scope", default=LOCAL)


def current() -> str:
    """The client of the work running now."""
    return _current.get()


@contextlib.contextmanager
def scoped(scope: str) -> Iterator[None]:
    """Work in this block belongs to `scope`."""
    token = _current.set(scope)
    try:
        yield
    finally:
        _current.reset(token)


def enter(scope: str) -> None:
    """Set the scope for the rest of this context (a request's task, a generator's first step)."""
    _current.set(scope)


def of_client(address: str) -> str:
    """A request's scope: its address as the server sees it, digested."""
    return "client:" + hashlib.sha256(address.encode()).hexdigest()[:24]
