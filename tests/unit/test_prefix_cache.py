"""The prefix cache's bookkeeping on a real transformers DynamicCache: longest prefix, budget, LRU."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from playground.decoding.prefix_cache import PrefixCache
from playground.models import llama_step


def kv(length: int) -> DynamicCache:
    """A one-layer cache whose values say which position they hold."""
    cache = DynamicCache()
    positions = torch.arange(length, dtype=torch.float32).view(1, 1, length, 1)
    cache.update(positions, positions.clone(), 0)
    return cache


def test_longest_common_prefix_is_reused_and_cropped():
    cache = PrefixCache(100)
    cache.store([1, 2, 3, 4], kv(4))
    cache.store([1, 2, 9], kv(3))
    n, hit = cache.lookup([1, 2, 3, 7, 8])
    assert n == 3 and hit.get_seq_length() == 3
    assert hit.layers[0].keys.flatten().tolist() == [0.0, 1.0, 2.0]
    # the stored entry is untouched by the copy handed out
    n, again = cache.lookup([1, 2, 3, 4, 5])
    assert n == 4 and again.get_seq_length() == 4


def test_one_token_is_always_left_to_run():
    cache = PrefixCache(100)
    cache.store([1, 2, 3], kv(3))
    n, hit = cache.lookup([1, 2, 3])
    assert n == 2 and hit.get_seq_length() == 2
    assert cache.lookup([5, 6]) == (0, None)
    assert cache.usage() == {
        "max_tokens": 100,
        "entries": 1,
        "tokens": 3,
        "bytes": 24,  # keys and values: 3 positions of one float32 each
        "hits": 1,
        "misses": 1,
        "reused_tokens": 2,
    }


def test_a_longer_sequence_replaces_its_prefix_and_the_budget_evicts_the_oldest():
    cache = PrefixCache(10)
    cache.store([1, 2], kv(2))
    cache.store([1, 2, 3, 4], kv(4))
    assert cache.usage()["entries"] == 1
    cache.store([7, 8, 9, 10, 11], kv(5))
    cache.lookup([1, 2, 3, 4, 5])  # touch: now [7 ...] is the least recently used
    cache.store([20, 21, 22], kv(3))
    assert cache.lookup([7, 8, 9, 10, 11, 12])[0] == 0
    assert cache.lookup([1, 2, 3, 4, 5])[0] == 4
    cache.store(list(range(50, 70)), kv(20))  # larger than the budget: not kept
    assert cache.usage()["tokens"] <= 10


def test_zero_budget_turns_it_off():
    cache = PrefixCache(0)
    cache.store([1, 2, 3], kv(3))
    assert cache.lookup([1, 2, 3, 4]) == (0, None)
    assert cache.usage()["entries"] == 0


def test_what_is_stored_and_handed_out_never_changes_with_the_holders_decoding(monkeypatch):
    """Entries and hits share their keys and values with the caller (no copy per request), and stay as they were
    whatever the caller does next: grow by concatenation, grow in place (the lean step's room), crop."""
    monkeypatch.setattr(llama_step, "ROOM_FROM", 0)  # every append writes into room
    cache = PrefixCache(100)
    live = kv(3)
    cache.store([1, 2, 3], live)
    held = next(iter(cache._entries.values()))
    assert held is not live and held.layers[0].keys is live.layers[0].keys  # shared, not copied
    one = torch.ones(1, 1, 1, 1)
    live.update(one, one, 0)  # the caller decodes on
    with torch.inference_mode():
        for _ in range(2):
            n, hit = cache.lookup([1, 2, 3, 9])
            assert n == 3 and hit.layers[0].keys is held.layers[0].keys
            for _ in range(3):
                llama_step._append(hit.layers[0], one, one)  # in place from the second on
            hit.crop(-2)
            assert hit.layers[0].keys.flatten().tolist() == [0.0, 1.0, 2.0, 1.0]
    assert held.layers[0].keys.flatten().tolist() == [0.0, 1.0, 2.0]
    assert cache.lookup([1, 2, 3, 9])[1].layers[0].values.flatten().tolist() == [0.0, 1.0, 2.0]
