"""The KV cache of every row decoding together (continuous batching): ragged rows kept rectangular.

Each request is prefilled alone, then its KV cache joins the batch's: the shorter side is padded on the
left and an attention mask hides the padding, while each row's position ids count only its own tokens
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
from transformers.cache_utils import DynamicLayer

from playground.runner import ModelRunner


def can_batch(kv: Any) -> bool:
    """Caches whose layers are plain growing key/value tensors (no sliding window, no recurrent state)."""
    layers = getattr(kv, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


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

    def add(self, kv: Any, copies: int) -> None:
        """A newly prefilled request (one row of `kv`, no padding) joins as `copies` rows at the end."""
        length = kv.get_seq_length()
        mask = torch.ones(copies, length, dtype=torch.long, device=self.mask.device)
        positions = torch.full((copies,), length, dtype=torch.long, device=self.mask.device)
        if copies > 1:
            kv.batch_repeat_interleave(copies)
        if self.kv is None:
            self.kv, self.mask, self.positions = kv, mask, positions
            return
        width = max(self.mask.shape[1], length)
        for mine, theirs in zip(self.kv.layers, kv.layers):
            mine.keys = torch.cat([_pad_left(mine.keys, width), _pad_left(theirs.keys, width)])
            mine.values = torch.cat([_pad_left(mine.values, width), _pad_left(theirs.values, width)])
        self.mask = torch.cat([F.pad(self.mask, (width - self.mask.shape[1], 0)), F.pad(mask, (width - length, 0))])
        self.positions = torch.cat([self.positions, positions])

    def keep(self, rows: list[int]) -> None:
        """Only these rows stay (in this order); columns no remaining row holds are dropped."""
        if not rows:
            self._empty()
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

    def forward(self, tokens: list[list[int]]) -> list[torch.Tensor]:
        """Run each row's new tokens (one or more per row); each row's logits at its new positions."""
        width = max(len(t) for t in tokens)
        device = self.mask.device
        ids = torch.tensor([t + [self.runner.pad_id] * (width - len(t)) for t in tokens], device=device)
        new_mask = torch.tensor([[1] * len(t) + [0] * (width - len(t)) for t in tokens], device=device)
        self.mask = torch.cat([self.mask, new_mask], dim=1)
        positions = self.positions.unsqueeze(1) + torch.arange(width, device=device)
        self.positions = self.positions + torch.tensor([len(t) for t in tokens], device=device)
        # A mask without holes is left out: the model then takes exactly the path it takes for one request.
        mask = None if bool(self.mask.all()) else self.mask
        logits, self.kv = self.runner.forward(ids, self.kv, keep=width, attention_mask=mask, position_ids=positions)
        return [logits[i, : len(t)].float() for i, t in enumerate(tokens)]

    def row_cache(self, row: int) -> Any:
        """Row `row`'s own KV cache (its columns only), as a one-row cache for the prefix cache."""
        columns = self.mask[row].nonzero().squeeze(1)
        out = copy.copy(self.kv)
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
