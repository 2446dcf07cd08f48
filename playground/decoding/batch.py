"""The KV cache of every row decoding together (continuous batching): ragged rows kept rectangular.

Newcomers are prefilled (together when they can share a batch, each after what the prefix cache holds of
it), then their KV cache joins the batch's: the shorter side is padded on the left and an attention mask
hides the padding, while each row's position ids count only its own tokens
(so a row sees exactly what it would see alone). Rows leave when they finish; columns that no row uses
any more are dropped, and the whole cache goes when the last row leaves.

Only plain full-attention caches (transformers' DynamicLayer) can be padded and spliced like this;
`can_batch` tells the scheduler when a model's requests must decode one at a time instead.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F

from playground.decoding.runner import ModelRunner, plain_layers
from playground.models import llama_step


def can_batch(kv: Any) -> bool:
    """Caches that can be padded into a batch: plain growing layers (runner.plain_layers)."""
    return plain_layers(kv)


class BatchCache:
    """Every active row's keys and values, the mask of which columns each row really holds, its next position."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self._empty()

    def _empty(self) -> None:
        self.kv: Any = None
        self.mask = torch.zeros(0, 0, dtype=torch.long, device=self.runner.device)
        self.positions = torch.zeros(0, dtype=torch.long, device=self.runner.device)

    @property
    def rows(self) -> int:
        return int(self.mask.shape[0])

    def adopt(self, kv: Any) -> None:
        """An empty batch takes one prefilled row (its cache holds no padding)."""
        length = kv.get_seq_length()
        self.kv = kv
        self.mask = torch.ones(1, length, dtype=torch.long, device=self.mask.device)
        self.positions = torch.tensor([length], device=self.mask.device)

    def prefill(self, rows: list[tuple[Any, list[int]]]) -> torch.Tensor:
        """An empty batch runs several prompts at once: each row's (cached prefix's KV or None, tokens to run).

        The cached prefixes are padded on the left into one cache and the new tokens on the left of their
        block, so every row ends in the last column: one row of logits each (rows x vocab).
        """
        device = self.mask.device
        cached = [kv.get_seq_length() if kv is not None else 0 for kv, _ in rows]
        width = max(len(tokens) for _, tokens in rows)
        self.mask = torch.tensor([[0] * (max(cached) - c) + [1] * c for c in cached], device=device, dtype=torch.long)
        self.positions = torch.tensor(cached, device=device)
        if max(cached):
            template = next(kv for kv, _ in rows if kv is not None)
            self.kv = copy.copy(template)
            self.kv.layers = [copy.copy(layer) for layer in template.layers]
            for n, layer in enumerate(self.kv.layers):
                keys = [_pad_left(_layer_or_empty(kv, n, layer).keys, max(cached)) for kv, _ in rows]
                values = [_pad_left(_layer_or_empty(kv, n, layer).values, max(cached)) for kv, _ in rows]
                layer.keys, layer.values = torch.cat(keys), torch.cat(values)
        pad = self.runner.pad_id
        padded = [[pad] * (width - len(t)) + t for _, t in rows]
        new_mask = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for _, t in rows], device=device)
        positions = (
            (self.positions.unsqueeze(1) + torch.arange(width, device=device))
            .sub(torch.tensor([width - len(t) for _, t in rows], device=device).unsqueeze(1))
            .clamp(min=0)
        )
        self.mask = torch.cat([self.mask, new_mask], dim=1)
        self.positions = self.positions + torch.tensor([len(t) for _, t in rows], device=device)
        # the lean step where the model has one (it runs only the real tokens of ragged prompts through the linears)
        kv = self.kv if self.kv is not None else self.runner.fresh_cache()
        logits = None if kv is None else self.runner.lean_step(padded, positions, kv, self.mask, last=True)
        if logits is None:
            ids = torch.tensor(padded, device=device)
            logits, kv = self.runner.forward(ids, self.kv, attention_mask=self.mask, position_ids=positions)
        self.kv = kv
        return logits[:, -1].float()

    def merge(self, other: BatchCache) -> None:
        """Another batch's rows join at the end; the shorter side is padded on the left."""
        if other.kv is None:
            return
        if self.kv is None:
            self.kv, self.mask, self.positions = other.kv, other.mask, other.positions
            return
        width = max(self.mask.shape[1], other.mask.shape[1])
        for mine, theirs in zip(self.kv.layers, other.kv.layers):
            mine.keys = torch.cat([_pad_left(mine.keys, width), _pad_left(theirs.keys, width)])
            mine.values = torch.cat([_pad_left(mine.values, width), _pad_left(theirs.values, width)])
        self.mask = torch.cat([_pad_left_2d(self.mask, width), _pad_left_2d(other.mask, width)])
        self.positions = torch.cat([self.positions, other.positions])

    def keep(self, rows: list[int]) -> None:
        """Only these rows stay, in this order (a row named twice is copied: best_of); unused columns go."""
        if not rows:
            self._empty()
            return
        if rows == list(range(self.rows)):  # everyone stays as they are: no copy
            return
        index = torch.tensor(rows, device=self.mask.device)
        self.mask = self.mask[index]
        self.positions = self.positions[index]
        used = self.mask.any(dim=0)
        columns = None if bool(used.all()) else used.nonzero().squeeze(1)
        if columns is not None:
            self.mask = self.mask[:, columns]
        for layer in self.kv.layers:
            layer.keys, layer.values = layer.keys[index], layer.values[index]
            if columns is not None:
                layer.keys, layer.values = layer.keys[:, :, columns], layer.values[:, :, columns]

    def drop_last(self, row: int, count: int) -> None:
        """Row `row`'s last `count` positions go (drafted tokens the row did not choose). Only a lone row runs more
        than one token a step, so only a lone row's cache is cut; a plain cache's layers only (runner.py)."""
        if self.rows != 1 or row != 0:
            raise ValueError(f"only a lone row's positions can be dropped (row {row} of {self.rows})")
        self.mask = self.mask[:, :-count]
        self.positions = self.positions - count
        for layer in self.kv.layers:
            llama_step.crop(layer, count)

    def forward(self, tokens: list[list[int]]) -> list[torch.Tensor]:
        """Run each row's new tokens (one or more per row); each row's logits at its new positions."""
        width = max(len(t) for t in tokens)
        device = self.mask.device
        padded = [t + [self.runner.pad_id] * (width - len(t)) for t in tokens]
        new_mask = torch.tensor([[1] * len(t) + [0] * (width - len(t)) for t in tokens], device=device)
        self.mask = torch.cat([self.mask, new_mask], dim=1)
        positions = self.positions.unsqueeze(1) + torch.arange(width, device=device)
        self.positions = self.positions + torch.tensor([len(t) for t in tokens], device=device)
        # A mask without holes is left out: the model then takes exactly the path it takes for one request.
        mask = None if bool(self.mask.all()) else self.mask
        logits = self.runner.lean_step(padded, positions, self.kv, mask)  # where the model has one
        if logits is None:
            ids = torch.tensor(padded, device=device)
            logits, self.kv = self.runner.forward(ids, self.kv, keep=width, attention_mask=mask, position_ids=positions)
        return [logits[i, : len(t)].float() for i, t in enumerate(tokens)]

    def row_cache(self, row: int) -> Any:
        """Row `row`'s own KV cache (its columns only), as a one-row cache for the prefix cache: a copy of its
        keys and values (the batch's are never shared with it). A cache that cannot be batched (a sliding
        window's layers keep their last positions only, not the mask's columns) decodes one row alone: all of
        it is the row's, and its layers replace their tensors rather than write into them."""
        out = copy.copy(self.kv)
        if not can_batch(self.kv):
            if self.rows != 1:
                raise ValueError(f"a cache that cannot be batched holds one row, not {self.rows}")
            out.layers = [copy.copy(layer) for layer in self.kv.layers]
            return out
        columns = self.mask[row].nonzero().squeeze(1)
        out.layers = []
        for layer in self.kv.layers:
            mine = copy.copy(layer)
            mine.keys = layer.keys[row : row + 1, :, columns]
            mine.values = layer.values[row : row + 1, :, columns]
            out.layers.append(mine)
        return out


def _pad_left(t: torch.Tensor, width: int) -> torch.Tensor:
    """Zeros before the sequence axis (dim -2) up to `width` positions."""
    return F.pad(t, (0, 0, width - t.shape[-2], 0))


def _pad_left_2d(mask: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(mask, (width - mask.shape[1], 0))


def _layer_or_empty(kv: Any, n: int, like: Any) -> Any:
    """Layer n of a row's cached prefix, or an empty one shaped like `like` for a row with none."""
    if kv is not None:
        return kv.layers[n]
    empty = copy.copy(like)
    empty.keys = like.keys[:1, :, :0]
    empty.values = like.values[:1, :, :0]
    return empty
