"""KV caches of recent sequences, so a prompt that starts like one of them prefills only the rest.

Chat turns (the conversation so far plus the last answer), Retry, Compare, best_of and the next-token
view all begin with a sequence decoded moments ago. Entries are bounded by a token budget, least
recently used out; a lookup takes the longest common prefix with any entry, so a prompt that diverges
(a re-tokenized answer, an edited message) still reuses the part before the change.

Entries belong to the client that made them (playground.client_scope): a lookup sees only its own
client's, so neither a hit nor its speed tells anyone what another client sent.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from typing import Any

from transformers.cache_utils import DynamicLayer

from playground import client_scope

# /info shows the memory held in steps of this much: fine figures would move with other clients' requests.
PUBLIC_BYTES_STEP = 64 << 20


class PrefixCache:
    """Recent sequences' KV caches for one model, within `max_tokens` tokens in all (0 turns it off)."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[str, tuple[int, ...]], Any] = OrderedDict()
        self._bytes: dict[tuple[str, tuple[int, ...]], int] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.reused_tokens = 0

    def scoped(self, scope: str | None = None) -> ScopedCache:
        """This cache as one client sees it (default: the client of the current request)."""
        return ScopedCache(self, client_scope.current() if scope is None else scope)

    def lookup(self, ids: list[int], scope: str = client_scope.LOCAL) -> tuple[int, Any]:
        """(n, a KV cache of the caller's own for ids[:n]) for the longest prefix `scope` cached; (0, None) if none.

        At least one token is left to run, since the model's logits for the last position are needed.
        """
        if not self.max_tokens:
            return 0, None
        with self._lock:
            best, key = 0, None
            for entry in self._entries:
                if entry[0] != scope:
                    continue
                n = _common_prefix(entry[1], ids, len(ids) - 1)
                if n > best:
                    best, key = n, entry
            if key is None:
                self.misses += 1
                return 0, None
            self._entries.move_to_end(key)
            kv = _own(self._entries[key])
            self.hits += 1
            self.reused_tokens += best
        extra = kv.get_seq_length() - best
        if extra:
            kv.crop(-extra)
        return best, kv

    def store(self, ids: list[int], kv: Any, scope: str = client_scope.LOCAL) -> None:
        """Keep `kv`, which holds exactly `ids`, for `scope` (as it is now: the caller decodes on with its own);
        its entries that `ids` extends are dropped."""
        if not self.max_tokens or not ids or len(ids) > self.max_tokens or not _croppable(kv):
            return
        tokens = tuple(ids)
        kv = _own(kv)
        with self._lock:
            for entry in [
                e for e in self._entries if e[0] == scope and len(e[1]) <= len(tokens) and tokens[: len(e[1])] == e[1]
            ]:
                del self._entries[entry]
                del self._bytes[entry]
            self._entries[(scope, tokens)] = kv
            self._bytes[(scope, tokens)] = _nbytes(kv)
            while sum(len(e[1]) for e in self._entries) > self.max_tokens:
                oldest, _ = self._entries.popitem(last=False)
                del self._bytes[oldest]

    def usage(self) -> dict[str, int]:
        """Budget, what is held, and how often it helped (for the operator and tests; /info shows less)."""
        with self._lock:
            return {
                "max_tokens": self.max_tokens,
                "entries": len(self._entries),
                "tokens": sum(len(e[1]) for e in self._entries),
                "bytes": sum(self._bytes.values()),
                "hits": self.hits,
                "misses": self.misses,
                "reused_tokens": self.reused_tokens,
            }

    def public_usage(self) -> dict[str, int | str]:
        """What /info may show anyone: the budget and memory held in coarse steps, never hits or sizes that
        move with another client's request."""
        held = self.usage()["bytes"]
        return {
            "max_tokens": self.max_tokens,
            "bytes": held // PUBLIC_BYTES_STEP * PUBLIC_BYTES_STEP,
            "scope": "client",
        }


class ScopedCache:
    """One client's view of a PrefixCache: it finds and keeps only that client's sequences."""

    def __init__(self, cache: PrefixCache, scope: str) -> None:
        self.cache = cache
        self.scope = scope

    def lookup(self, ids: list[int]) -> tuple[int, Any]:
        return self.cache.lookup(ids, self.scope)

    def store(self, ids: list[int], kv: Any) -> None:
        self.cache.store(ids, kv, self.scope)


def _own(kv: Any) -> Any:
    """A cache that grows, crops or splices without changing `kv`, and `kv` without changing it: for plain growing
    layers, a copy of the cache and its layers over the same keys and values (no one writes a cache's tensors in
    place: transformers' update, crop and the batch's splices make new ones, and the lean step's `_append` writes
    only into room past the end of the view it last wrote), else a deep copy. (A deep copy costs ~2 ms for a
    short prompt of the embedded model: every request that hits or fills the cache paid it.)"""
    if not all(type(layer) is DynamicLayer for layer in kv.layers):
        return copy.deepcopy(kv)
    own = copy.copy(kv)
    own.layers = [copy.copy(layer) for layer in kv.layers]
    return own


def _nbytes(kv: Any) -> int:
    """The memory an entry holds: its keys' and values' storage (a view holds all of its buffer)."""
    return sum(t.untyped_storage().nbytes() for layer in kv.layers for t in (layer.keys, layer.values))


def _croppable(kv: Any) -> bool:
    """Only caches that crop back exactly can serve a shorter prefix (not sliding windows, not recurrent states)."""
    return bool(getattr(kv, "is_croppable", False)) and not any(getattr(kv, "is_sliding", None) or [])


def _common_prefix(a: tuple[int, ...], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
