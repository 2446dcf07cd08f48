"""When running work last moved, so /health can tell a busy engine from a stuck one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Heartbeat:
    """Work marks itself running and beats on each step; no beat for long while work runs means stuck."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._running = 0
        self._last = clock()

    @contextmanager
    def working(self) -> Iterator[Callable[[], None]]:
        """Around one request's work; yields the beat to call on each step (each token, say)."""
        with self._lock:
            if self._running == 0:
                self._last = self._clock()
            self._running += 1
        try:
            yield self.beat
        finally:
            with self._lock:
                self._running -= 1
                self._last = self._clock()

    def beat(self) -> None:
        self._last = self._clock()

    def stalled_s(self) -> float:
        """Seconds since work last moved; 0 while nothing runs."""
        with self._lock:
            return self._clock() - self._last if self._running else 0.0
