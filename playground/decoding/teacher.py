"""Teacher forcing: the model's own logprob of each token of many continuations of one context.

Scoring every allowed answer needs the same prompt followed by each alternative. The prompt runs once
(after what the prefix cache holds of it), its KV cache is repeated for every alternative, and the
alternatives run together in one batched forward, right-padded: attention is causal, so the padding
after a row's last token is never seen by that row's own tokens and needs no mask.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from playground.decoding.prefix_cache import ScopedCache
from playground.decoding.runner import ModelRunner

# One forward holds at most this many rows x (context + continuation) tokens of KV cache, and this many
# rows x continuation tokens of logits (each a vocabulary of floats): a larger set runs in several forwards.
KV_TOKEN_BUDGET = 32_768
LOGIT_TOKEN_BUDGET = 1_024


def continuation_logprobs(
    runner: ModelRunner,
    hold: Callable[[], AbstractContextManager[Any]],
    context: list[int],
    continuations: list[list[int]],
    cache: ScopedCache | None = None,
) -> tuple[list[list[float]], int]:
    """Each continuation's per-token raw logprobs after `context`, and how many batched forwards it took.

    `hold()` takes the model (the batch's steps take turns with us); every continuation is non-empty.
    """
    start, kv = cache.lookup(context) if cache else (0, None)
    with torch.inference_mode():
        with hold():
            logits, kv = runner.forward(runner.ids(context[start:]), kv)
        if cache:
            cache.store(context, kv)
        first = torch.log_softmax(logits[0, -1].float(), dim=-1)
        out: list[list[float]] = []
        forwards = 0
        for chunk in _chunks(continuations, len(context)):
            out.extend(_forward_rows(runner, hold, kv, first, chunk))
            forwards += 1
    return out, forwards


def _chunks(rows: list[list[int]], context_length: int) -> list[list[list[int]]]:
    """Consecutive groups of rows within the KV and logits budgets (at least one row each)."""
    groups: list[list[list[int]]] = []
    current: list[list[int]] = []
    for row in rows:
        longest = max([len(r) for r in current] + [len(row)])
        n = len(current) + 1
        if current and (n * (context_length + longest) > KV_TOKEN_BUDGET or n * longest > LOGIT_TOKEN_BUDGET):
            groups.append(current)
            current = []
        current.append(row)
    if current:
        groups.append(current)
    return groups


def _forward_rows(
    runner: ModelRunner,
    hold: Callable[[], AbstractContextManager[Any]],
    kv: Any,
    first: torch.Tensor,
    rows: list[list[int]],
) -> list[list[float]]:
    """One batched forward of `rows` after the shared context's cache `kv` (left untouched)."""
    out = [[float(first[row[0]])] for row in rows]
    longest = max(len(row) for row in rows)
    if longest == 1:  # every row is one token: the context's own logits scored them all
        return out
    # the last token of each row predicts nothing we need: feed the rows without it
    width = longest - 1
    ids = torch.full((len(rows), width), runner.pad_id, dtype=torch.long, device=runner.device)
    for r, row in enumerate(rows):
        if len(row) > 1:
            ids[r, : len(row) - 1] = torch.tensor(row[:-1], device=runner.device)
    shared = copy.deepcopy(kv)
    shared.batch_repeat_interleave(len(rows))
    with hold():
        logits, _ = runner.forward(ids, shared, keep=0)
    for r, row in enumerate(rows):
        if len(row) > 1:
            steps = torch.log_softmax(logits[r, : len(row) - 1].float(), dim=-1)
            targets = torch.tensor(row[1:], device=steps.device)
            out[r].extend(steps.gather(1, targets[:, None])[:, 0].tolist())
    return out
