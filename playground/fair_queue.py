"""A queue of free workers handed out fairly between clients: one client's many slow jobs cannot make
another client's quick one wait behind all of them.

Eight slow compiles from one client once made a trivial regex from another wait 91 s in FIFO order.
Here a free item goes to the waiting client that holds the fewest items now; among equals, to the one
served longest ago (a newcomer first), then the longest-waiting: a newcomer waits at most for one job to
finish, not for a whole queue.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import Counter, OrderedDict, deque
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueue(Generic[T]):
    """Free items (workers) for waiting clients, fewest-held first; put/get_nowait as queue.Queue."""

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._cond = threading.Condition()
        self._waiting: list[tuple[int, str]] = []
        self._held: Counter[str] = Counter()
        # when each client last got an item (for turns among equals), least recently served first
        self._served: OrderedDict[str, int] = OrderedDict()
        self._order = itertools.count()

    def put(self, item: T) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    def get_nowait(self) -> T:
        with self._cond:
            if not self._items:
                raise queue.Empty
            return self._items.popleft()

    def get(self, client: str, timeout: float) -> T:
        """An item for `client` when its turn comes; queue.Empty after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            me = (next(self._order), client)
            self._waiting.append(me)
            try:
                while not (self._items and self._next() == me):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise queue.Empty
                    self._cond.wait(remaining)
                self._held[client] += 1
                self._served[client] = next(self._order)
                self._served.move_to_end(client)
                if len(self._served) > 10_000:
                    self._served.popitem(last=False)
                return self._items.popleft()
            finally:
                self._waiting.remove(me)
                self._cond.notify_all()

    def release(self, client: str) -> None:
        """`client` is done with an item it got (the item itself comes back through put, or is replaced)."""
        with self._cond:
            self._held[client] -= 1
            if self._held[client] <= 0:
                del self._held[client]
            self._cond.notify_all()

    def _next(self) -> tuple[int, str]:
        return min(self._waiting, key=lambda w: (self._held[w[1]], self._served.get(w[1], -1), w[0]))
