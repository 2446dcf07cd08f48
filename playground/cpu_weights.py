"""Linear layers' weights laid out for the CPU's kernels: MKL for one row, oneDNN's blocked copy for several.

One row (a lone request's decode step): the weight is stored transposed (the same values, viewed as
before); MKL multiplies a row by an (in, out)-contiguous matrix faster than by the (out, in) layout torch
keeps. Tied embeddings stay tied (the parameter is shared); an embedding lookup reads the strided rows.

A few rows (a batch's step, fast-forwarded tokens, a short prompt): MKL repacks the weight on every call,
and a step of 8 rows cost twice one row. oneDNN multiplies them from a copy of the weight kept in its
blocked layout (made for 8 rows, it serves any number). Measured on the embedded model at 1 thread, one
forward: 8 rows 73-80 ms instead of 100-106, 16 rows 92 instead of 119, a 20-token prompt 88 instead of
101. One row stays on MKL (49 ms; oneDNN would take 58), and so do more than 32 rows (MKL is faster from
about 40: a 64-token prompt takes 133 ms with MKL, 152 with oneDNN). The copy doubles the linear weights'
memory, so `auto` keeps one only for float32 models whose copy takes at most an eighth of the machine's
memory; `on` always (float32), `off` never.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
BLOCKED_FOR_ROWS = 8  # the row count oneDNN lays the copy out for
ONEDNN_ROWS = range(2, 33)  # the row counts (tokens in one forward) it multiplies faster than MKL


class BatchLinear(torch.nn.Linear):
    """nn.Linear that multiplies 2 to 32 rows with oneDNN from `blocked_weight`, other counts with MKL."""

    blocked_weight: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() // x.shape[-1] in ONEDNN_ROWS and x.dtype == torch.float32:
            return torch.ops.mkldnn._linear_pointwise(x, self.blocked_weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def pack_for_cpu(model: Any, batch_weights: str = "auto") -> int:
    """Lay out every plain linear layer of `model` (on the CPU); the MB the blocked copies add (0: none)."""
    plain = [m for m in model.modules() if type(m) is torch.nn.Linear and m.weight.is_contiguous()]
    extra = sum(m.weight.numel() * m.weight.element_size() for m in plain)
    float32 = bool(plain) and all(m.weight.dtype == torch.float32 for m in plain)
    blocks: list[torch.Tensor] = []
    if float32 and (batch_weights == "on" or (batch_weights == "auto" and extra <= _memory() // 8)):
        try:
            blocks = [torch.ops.mkldnn._reorder_linear_weight(m.weight.data, BLOCKED_FOR_ROWS) for m in plain]
        except (RuntimeError, AttributeError) as exc:  # a torch build without oneDNN's linear (some ARM builds)
            log.info("no blocked weights for batches (%s): they multiply with MKL's kernels", exc)
    for module, block in zip(plain, blocks):
        module.blocked_weight = block
        module.__class__ = BatchLinear
    for module in plain:  # quantized or wrapped subclasses keep their layout
        module.weight.data = module.weight.data.t().contiguous().t()
    return round(extra / 2**20) if blocks else 0


def _memory() -> int:
    """The machine's physical memory in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
