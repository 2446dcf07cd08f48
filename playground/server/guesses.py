"""Key and login guessing is slow: a client with too many wrong keys in a minute waits before it may try again.

Clients are told apart by their address as the server sees it (behind a proxy, the proxy's forwarded
address when uvicorn trusts it). While a client waits, even the right key is refused, so guessing
learns nothing.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from starlette.types import Scope

MAX_FAILURES = 10
WINDOW_S = 60.0
BLOCK_S = 60.0
MAX_CLIENTS = 10_000  # failures are remembered for this many clients at most (the oldest are forgotten)


def client_of(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


class KeyGuesses:
    """Failed key attempts per client; past `max_failures` within `window_s`, `block_s` of 429."""

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        window_s: float = WINDOW_S,
        block_s: float = BLOCK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.block_s = block_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: OrderedDict[str, list[float]] = OrderedDict()
        self._blocked: dict[str, float] = {}

    def retry_after_s(self, client: str) -> int:
        """Seconds this client must wait before its next attempt; 0 when it may try now."""
        with self._lock:
            until = self._blocked.get(client, 0.0)
            now = self._clock()
            if until <= now:
                self._blocked.pop(client, None)
                return 0
            return max(1, math.ceil(until - now))

    def failed(self, client: str) -> None:
        """Count a wrong key; the attempt that reaches the limit starts the wait."""
        with self._lock:
            now = self._clock()
            recent = [t for t in self._failures.pop(client, []) if now - t < self.window_s] + [now]
            if len(recent) >= self.max_failures:
                self._blocked[client] = now + self.block_s
                recent = []
            self._failures[client] = recent
            while len(self._failures) > MAX_CLIENTS:
                self._failures.popitem(last=False)
            if len(self._blocked) > MAX_CLIENTS:
                self._blocked = {c: t for c, t in self._blocked.items() if t > now}

    def message(self, retry_after: int) -> str:
        return (
            f"too many wrong API keys from this client ({self.max_failures} in {self.window_s:g} s); "
            f"retry in {retry_after} s"
        )
