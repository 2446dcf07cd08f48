"""KV caches of recent sequences, so a prompt that starts like one of them prefills only the rest.

Chat turns (the conversation so far plus the last answer), Retry, Compare, best_of and the next-token
view all begin with a sequence decoded moments ago. Entries are bounded by a token budget, least
recently used out; a lookup takes the longest common prefix with any entry, so a prompt that diverges
(a re-tokenized answer, an edited message) still reuses the part before the change.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from typing import Any


class PrefixCache:
    """Recent sequences' KV caches for one model, within `max_tokens` tokens in all (0 turns it off)."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._bytes: dict[tuple[int, ...], int] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.reused_tokens = 0

    def lookup(self, ids: list[int]) -> tuple[int, Any]:
        """(n, a private copy of a KV cache for ids[:n]) for the longest cached prefix; (0, None) if none.

        At least one token is left to run, since the model's logits for the last position are needed.
        """
        if not self.max_tokens:
            return 0, None
        with self._lock:
            best, key = 0, None
            for entry in self._entries:
                n = _common_prefix(entry, ids, len(ids) - 1)
                if n > best:
                    best, key = n, entry
            if key is None:
                self.misses += 1
                return 0, None
            self._entries.move_to_end(key)
            kv = copy.deepcopy(self._entries[key])
            self.hits += 1
            self.reused_tokens += best
        extra = kv.get_seq_length() - best
        if extra:
            kv.crop(-extra)
        return best, kv

    def store(self, ids: list[int], kv: Any) -> None:
        """Keep a copy of `kv`, which holds exactly `ids`; entries it extends are dropped."""
        if not self.max_tokens or not ids or len(ids) > self.max_tokens or not _croppable(kv):
            return
        key = tuple(ids)
        kv = copy.deepcopy(kv)
        with self._lock:
            for entry in [e for e in self._entries if len(e) <= len(key) and key[: len(e)] == e]:
                del self._entries[entry]
                del self._bytes[entry]
            self._entries[key] = kv
            self._bytes[key] = _nbytes(kv)
            while sum(len(e) for e in self._entries) > self.max_tokens:
                oldest, _ = self._entries.popitem(last=False)
                del self._bytes[oldest]

    def usage(self) -> dict[str, int]:
        """What /info reports: budget, what is held, and how often it helped."""
        with self._lock:
            return {
                "max_tokens": self.max_tokens,
                "entries": len(self._entries),
                "tokens": sum(len(e) for e in self._entries),
                "bytes": sum(self._bytes.values()),
                "hits": self.hits,
                "misses": self.misses,
                "reused_tokens": self.reused_tokens,
            }


def _nbytes(kv: Any) -> int:
    """The memory an entry holds: its keys and values."""
    return sum(t.nbytes for layer in kv.layers for t in (layer.keys, layer.values))


def _croppable(kv: Any) -> bool:
    """Only caches that crop back exactly can serve a shorter prefix (not sliding windows, not recurrent states)."""
    return bool(getattr(kv, "is_croppable", False)) and not any(getattr(kv, "is_sliding", None) or [])


def _common_prefix(a: tuple[int, ...], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
