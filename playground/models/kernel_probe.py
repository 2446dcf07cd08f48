"""Which kernel multiplies each row count fastest, measured on this machine for the model's own shapes.

Where MKL (one row's kernel, repacking the weight for several) stops and oneDNN's blocked copy starts to
pay depends on the CPU (AVX-512 or AVX2 only, its caches), the thread count and the layer's shape: a window
tuned on one machine loses on another (2.78 instead of 3.4 at 8 clients on an AVX2-only EPYC). So each
distinct weight shape is timed with both kernels at PROBED_ROWS counts when a model loads; a count between
two probed ones takes the lower one's verdict. The verdicts are cached per machine (CPU model, ISA flags
and the ISA caps oneDNN and MKL are given), torch version, thread count and shapes: one probe per machine
and model (the embedded model's takes a few seconds, about six forwards' worth of products per count).
The same probe decides where a GGUF's own blocks (quant_weights.py) beat a layer's float32 route.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import platform
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from playground.space import container_cpus

log = logging.getLogger(__name__)

PROBED_ROWS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # more rows than the last: MKL, as for a long prompt
QUANT_ROWS = (1, *PROBED_ROWS)  # the GGUF blocks (quant_weights.py) may win for a lone row too
PASSES = 2  # timed passes per kernel and count, after one untimed one (first touch, packing)
MARGIN = 0.97  # the blocked copy must be this much faster: a tie, or noise, keeps the one-copy kernel
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "asimd", "sve")
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")

Shape = tuple[int, int]  # (in_features, out_features)
RowTable = tuple[bool, ...]  # index: row count; True where the probed kernel is faster
Layer = tuple[Any, ...]  # the weight in MKL's layout first; blocked copy: (weight, its copy, bias)
Probe = Callable[[list[Layer]], list[int]]  # see measure()


def measure(layers: list[Layer]) -> list[int]:
    """The probed row counts at which the blocked copies multiply faster than MKL, timed here and now."""
    return faster_at(
        PROBED_ROWS,
        layers[0][0].shape[1],
        lambda x: [functools.partial(F.linear, x, weight, bias) for weight, _, bias in layers],
        lambda x: [
            functools.partial(torch.ops.mkldnn._linear_pointwise, x, blocked, bias, "none", [], "")
            for _, blocked, bias in layers
        ],
    )


def faster_at(
    counts: tuple[int, ...],
    in_features: int,
    baseline: Callable[[torch.Tensor], list[Callable[[], object]]],
    candidate: Callable[[torch.Tensor], list[Callable[[], object]]],
) -> list[int]:
    """The row counts at which the candidate's calls (one per layer of a shape, given the rows) beat the baseline's.

    Each timing passes over every layer of the shape, as a forward does: their weights stream from memory
    as they do there (one layer's would sit in the cache and flatter the kernel that rereads it). The two
    kernels alternate, and each keeps its fastest pass, the one least disturbed by other processes.
    """
    wins = []
    with torch.inference_mode():
        for rows in counts:
            x = torch.randn(rows, in_features)
            calls = {"baseline": baseline(x), "candidate": candidate(x)}
            best = {"baseline": math.inf, "candidate": math.inf}
            for timed in range(PASSES + 1):
                for kernel, each in calls.items():
                    took = _timed(each)
                    best[kernel] = min(best[kernel], took) if timed else best[kernel]
            if best["candidate"] < MARGIN * best["baseline"]:
                wins.append(rows)
    return wins


def _timed(calls: list[Callable[[], object]]) -> float:
    start = time.perf_counter()
    for call in calls:
        call()
    return time.perf_counter() - start


def row_tables(
    layers: Iterable[Layer],
    cache_dir: Path | None,
    probe: Probe = measure,
    *,
    kind: str = "blocked",
    extra: dict[str, str] | None = None,
    counts: tuple[int, ...] = PROBED_ROWS,
) -> dict[Shape, RowTable]:
    """Per shape, for every row count up to the last probed one, whether the candidate kernel wins.

    Layers are tuples whose first item is the weight (out x in); `probe` times a shape's layers at `counts`.
    `kind` and `extra` (what else the verdicts depend on) key the cache beside the machine.
    """
    samples: dict[Shape, list[Layer]] = {}
    for layer in layers:
        samples.setdefault((layer[0].shape[1], layer[0].shape[0]), []).append(layer)
    key = _machine_key(sorted(samples), {"kind": kind, **(extra or {})})
    path = cache_dir / f"{key}.json" if cache_dir is not None else None
    cached, cached_busy = _read(path)
    if cached is not None and set(cached) == set(samples) and not (cached_busy and not busy()):
        return {shape: _table(wins, counts) for shape, wins in cached.items()}
    start = time.perf_counter()
    wins = {shape: probe(sample) for shape, sample in samples.items()}
    probed_busy = busy()
    _write(path, wins, probed_busy)
    verdicts = {f"{i}x{o}": rows for (i, o), rows in wins.items()}
    log.info(
        "kernel probe, %s (%.1f s%s): wins at %s rows",
        kind,
        time.perf_counter() - start,
        ", machine busy: probed again at the first quiet start" if probed_busy else "",
        verdicts,
    )
    return {shape: _table(rows, counts) for shape, rows in wins.items()}


def busy() -> bool:
    """Whether other work competes for this container's CPUs (load average at least their count).

    Timings taken then are noisy (on the development VM a busy probe dropped most of the shapes the copy wins,
    `concurrent8_vs_single` 2.99 instead of 3.38): such verdicts are used and cached, but the first start on a
    quiet machine probes again and replaces them.
    """
    try:
        return os.getloadavg()[0] >= container_cpus()
    except OSError:  # no load average here: nothing to judge by
        return False


def _table(wins: list[int], counts: tuple[int, ...]) -> RowTable:
    """Every row count 0..counts[-1]: the verdict of the nearest probed count at or below it."""
    table = [False] * (counts[-1] + 1)
    for count in range(counts[0], len(table)):
        probed = max(r for r in counts if r <= count)
        table[count] = probed in wins
    return tuple(table)


def machine_facts() -> dict[str, object]:
    """What a kernel's speed here depends on: the CPU and its ISA caps, torch and its threads."""
    return {
        "cpu": _cpu_model(),
        "isa": [flag for flag in ISA_FLAGS if flag in cpu_flags()],
        "caps": {name: os.environ.get(name) for name in ISA_CAPS},
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def _machine_key(shapes: list[Shape], extra: dict[str, str]) -> str:
    """What the verdicts depend on, hashed: the machine, the shapes and what else the caller names."""
    facts = {**machine_facts(), "shapes": shapes, "extra": extra}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: the platform's own words
        return ""


def _cpu_model() -> str:
    for line in _cpuinfo().splitlines():
        if line.startswith(("model name", "Model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The CPU's feature flags as the kernel lists them (empty where it does not)."""
    for line in _cpuinfo().splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def _read(path: Path | None) -> tuple[dict[Shape, list[int]] | None, bool]:
    """The cached verdicts (None: none, or damaged) and whether they were probed on a busy machine."""
    if path is None or not path.is_file():
        return None, False
    try:
        data = json.loads(path.read_text())
        wins = {(int(i), int(o)): [int(r) for r in rows] for (i, o, rows) in data["wins"]}
        return wins, bool(data.get("busy", False))
    except (ValueError, KeyError, TypeError, AttributeError, OSError):  # a damaged file is probed again
        return None, False


def _write(path: Path | None, wins: dict[Shape, list[int]], probed_busy: bool) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"wins": [[i, o, rows] for (i, o), rows in wins.items()], "busy": probed_busy}))
        tmp.replace(path)
    except OSError as exc:  # a read-only cache: probe again next start
        log.info("kernel probe not cached: %s", exc)
