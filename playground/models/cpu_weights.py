"""Linear layers' weights laid out for the CPU's kernels: MKL for one row, oneDNN's blocked copy for several.

One row (a lone request's decode step): the weight is stored transposed (the same values, viewed as
before); MKL multiplies a row by an (in, out)-contiguous matrix faster than by the (out, in) layout torch
keeps. Tied embeddings stay tied (the parameter is shared); an embedding lookup reads the strided rows.

A few rows (a batch's step, fast-forwarded tokens, a short prompt): MKL repacks the weight on every call,
and a step of 8 rows cost twice one row. oneDNN multiplies them from a copy of the weight kept in its
blocked layout (made for 8 rows, it serves any number). Measured on the embedded model at 1 thread on an
AVX-512 Xeon, one forward: 8 rows 73-80 ms instead of 100-106, 16 rows 92 instead of 119, a 20-token prompt
88 instead of 101; one row stays on MKL (49 ms; oneDNN would take 58), and so do long prompts. Where the
kernels cross over depends on the CPU and the shape, so it is measured when the model loads
(kernel_probe.py) and each layer routes each row count to the kernel its shape's probe found faster. A
shape whose probe never favours the blocked copy keeps none. The copies double the linear weights'
memory at most, so `auto` keeps them only for float32 models whose copies take at most an eighth of the
memory the process may use (the machine's, or its container's limit); `on` whatever the memory (float32),
`off` never.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from playground.models.kernel_probe import Probe, RowTable, measure, row_tables

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
BLOCKED_FOR_ROWS = 8  # the row count oneDNN lays the copy out for


class BatchLinear(torch.nn.Linear):
    """nn.Linear that routes each row count to its fastest kernel: the GGUF's own blocks where `quant_rows`
    marks it (quant_weights.py), oneDNN's `blocked_weight` where `blocked_rows` does, MKL otherwise.

    Both are copies of the weight as it was when packed: once the weight is changed in place
    (load_state_dict, copy_) or replaced, moved off the CPU or trained, every count goes to F.linear
    (neither kernel has a backward). Edits through `.data` bypass the version counter: after one, pack
    the model again.
    """

    blocked_rows: RowTable = ()  # by row count (tokens in one forward): whether the blocked copy is faster
    quant_rows: RowTable = ()  # whether the GGUF blocks are (checked first)
    blocked_weight: torch.Tensor
    quant: Any  # quant_weights.QuantMatmul
    packed_from: torch.Tensor  # the weight parameter the copies were made from
    packed_version: int  # its version counter then

    def watch(self, weight: torch.Tensor) -> None:
        """Serve the copies while `weight` stays this parameter, unchanged."""
        object.__setattr__(self, "packed_from", weight)  # a plain attribute, not a second parameter
        self.packed_version = weight._version

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self._parameters["weight"]  # not self.weight: Module.__getattr__ costs more than a dict
        rows, quant, blocked = x.numel() // x.shape[-1], self.quant_rows, self.blocked_rows
        use_quant = rows < len(quant) and quant[rows]
        if (
            (use_quant or (rows < len(blocked) and blocked[rows]))
            and x.is_cpu
            and x.dtype is torch.float32
            and weight is self.packed_from
            and weight._version == self.packed_version
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        ):
            if use_quant:
                return self.quant(x, self.bias)
            return torch.ops.mkldnn._linear_pointwise(x, self.blocked_weight, self.bias, "none", [], "")
        return F.linear(x, weight, self.bias)


PLAIN_LINEAR = (torch.nn.Linear, BatchLinear)  # the layers these layouts (and the GGUF blocks) apply to


def pack_for_cpu(model: Any, batch_weights: str = "auto", cache_dir: Path | None = None, probe: Probe = measure) -> int:
    """Lay out every plain linear layer of `model` (on the CPU); the MB the blocked copies add (0: none).

    `auto` judges each model alone, when it loads; the probe's verdicts are cached in `cache_dir`.
    """
    if batch_weights not in MODES:
        raise ValueError(f"batch_weights must be one of {', '.join(MODES)}, not {batch_weights!r}")
    plain = [m for m in model.modules() if type(m) is torch.nn.Linear and m.weight.is_contiguous()]
    extra = sum(m.weight.numel() * m.weight.element_size() for m in plain)
    float32 = bool(plain) and all(m.weight.dtype == torch.float32 for m in plain)
    blocks: list[torch.Tensor] = []
    if float32 and (batch_weights == "on" or (batch_weights == "auto" and extra <= _memory() // 8)):
        blocks = _blocked(plain)
    for module in plain:  # quantized or wrapped subclasses keep their layout
        module.weight.data = module.weight.data.t().contiguous().t()
    if not blocks:
        return 0
    tables = row_tables(((m.weight, b, m.bias) for m, b in zip(plain, blocks)), cache_dir, probe)
    for module, block in zip(plain, blocks):
        table = tables[(module.in_features, module.out_features)]
        if not any(table):  # this shape multiplies every count faster with MKL: no copy to keep
            continue
        module.__class__ = BatchLinear
        module.blocked_weight = block
        module.blocked_rows = table
        module.watch(module.weight)
    return blocked_mb(model)


def blocked_mb(model: Any) -> int:
    """The MB of the blocked copies `model`'s layers keep."""
    layers = [m for m in model.modules() if type(m) is BatchLinear and m.blocked_rows]
    return round(sum(m.weight.numel() * m.weight.element_size() for m in layers) / 2**20)


def _blocked(plain: list[torch.nn.Linear]) -> list[torch.Tensor]:
    """Each layer's weight in oneDNN's blocked layout, once a probe shows this torch multiplies from it right."""
    try:
        with torch.no_grad():
            blocks = [torch.ops.mkldnn._reorder_linear_weight(m.weight.data, BLOCKED_FOR_ROWS) for m in plain]
            first = plain[0]
            probe = torch.ones(2, first.in_features)
            got = torch.ops.mkldnn._linear_pointwise(probe, blocks[0], first.bias, "none", [], "")
            torch.testing.assert_close(got, F.linear(probe, first.weight, first.bias), atol=1e-3, rtol=1e-4)
    except (RuntimeError, AttributeError, AssertionError) as exc:  # a torch build without them (some ARM builds)
        log.info("no blocked weights for batches (%s): they multiply with MKL's kernels", exc)
        return []
    return blocks


CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def _memory() -> int:
    """The memory this process may use in bytes: the machine's, or its container's limit when lower (0: unknown)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0
    for path in CGROUP_LIMITS:  # cgroup v2, v1 ("max" or a huge number: no limit)
        try:
            limit = path.read_text().strip()
        except OSError:
            continue
        if limit.isdigit():
            total = min(total, int(limit))
    return total
