"""The device-dependent branches of loading and decoding, proven without a GPU where torch allows it.

A "meta" model stands for one on an accelerator: its parameters carry a device and dtype but no data,
so what the loader does off the CPU (the dtype asked, no blocked CPU copy of the weights) and where the
decode's own tensors are made (a request's ids, the batch's mask and positions) can be read. (Our code
pins no memory: on ZeroGPU the `spaces` package moves the weights into each lease itself.)
"""

from __future__ import annotations

import torch

from playground.decoding.batch import BatchCache
from playground.decoding.engine import Engine
from playground.models import load_model
from playground.models.cpu_weights import BatchLinear


def test_off_the_cpu_the_model_has_the_dtype_asked_and_no_cpu_weight_copy() -> None:
    loaded = load_model("embedded", device="meta", dtype="bfloat16", threads=1)
    assert (loaded.device, loaded.dtype, loaded.batch_weights_mb) == ("meta", "bfloat16", 0)
    params = list(loaded.model.parameters())
    assert {p.device.type for p in params} == {"meta"} and {p.dtype for p in params} == {torch.bfloat16}
    # the CPU-only layouts (models/cpu_weights.py): no blocked copy, no transposed weights off the CPU
    linears = [m for m in loaded.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and not any(isinstance(m, BatchLinear) for m in linears)
    assert all(m.weight.is_contiguous() for m in linears)
    engine = Engine(loaded)
    assert engine.runner.ids([1, 2]).device.type == "meta"
    batch = BatchCache(engine.runner)
    assert (batch.mask.device.type, batch.positions.device.type) == ("meta", "meta")
