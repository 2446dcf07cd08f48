"""A batch's decode step on short and long caches: keys and values grown in place against concatenated, and the
C kernel's attention against torch's sdpa.

python -m benchmarks.kv_cache [--runs 5] [--steps 12] [--threads 1]
For each (rows, cached positions), the embedded model's lean step (playground/models/llama_step.py) on a batch
of distinct prompts, ms per step: `room`, the cache grown in place within spare room of its buffers (the default
from ROOM_FROM positions on), and `cat`, transformers' concatenation at every step (ROOM_FROM past the cache),
both with the C kernel's attention (the default where a C compiler is); `room_sdpa`, in place with torch's sdpa.
Interleaved in one process, each run on a fresh copy of the same batch, medians; `cat_vs_room` > 1 is the
in-place cache's gain, `sdpa_vs_kernel` > 1 the kernel's. One JSON line of figures last.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

from playground.decoding.batch import BatchCache
from playground.decoding.runner import ModelRunner
from playground.models import llama_step, load_model

SHAPES = ((1, 40), (1, 1000), (8, 40), (8, 1000))  # (rows, cached positions)


def _batch(runner: ModelRunner, rows: int, length: int) -> BatchCache:
    batch = BatchCache(runner)
    for row in range(rows):
        one = BatchCache(runner)
        ids = [(1000 + 37 * row + 11 * i) % 40000 + 100 for i in range(length)]
        one.adopt(runner.forward(runner.ids(ids))[1])
        batch.merge(one)
    return batch


def _ms_per_step(base: BatchCache, steps: int, room_from: int, attend: llama_step.Attend | None) -> float:
    batch = BatchCache(base.runner)  # a fresh copy of the cache (the runner and its model shared)
    batch.kv, batch.mask, batch.positions = copy.deepcopy(base.kv), base.mask.clone(), base.positions.clone()
    step = base.runner._lean_step
    saved = llama_step.ROOM_FROM, step.attend
    llama_step.ROOM_FROM, step.attend = room_from, attend
    try:
        start = time.perf_counter()
        for k in range(steps):
            batch.forward([[500 + k]] * batch.rows)
        return (time.perf_counter() - start) * 1000 / steps
    finally:
        llama_step.ROOM_FROM, step.attend = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    loaded = load_model("embedded", threads=args.threads)
    runner = ModelRunner(loaded)
    if runner._lean_step is None:
        raise SystemExit("the embedded model takes no lean step here: nothing to compare")
    attend = loaded.attend
    figures: dict[str, object] = {
        "threads": args.threads,
        "runs": args.runs,
        "room_from": llama_step.ROOM_FROM,
        "attention_kernel": attend is not None,
    }
    with torch.inference_mode():
        for rows, length in SHAPES:
            base = _batch(runner, rows, length)
            room, cat, sdpa = [], [], []
            arms = [(room, 0, attend), (cat, 10**9, attend), (sdpa, 0, None)]
            for run in range(args.runs):  # the arms take turns going first: none always meets a colder cache
                for times, room_from, attention in arms[run % 3 :] + arms[: run % 3]:
                    times.append(_ms_per_step(base, args.steps, room_from, attention))
            name = f"r{rows}_len{length}"
            figures[f"{name}_room_ms"] = round(statistics.median(room), 2)
            figures[f"{name}_cat_ms"] = round(statistics.median(cat), 2)
            figures[f"{name}_room_sdpa_ms"] = round(statistics.median(sdpa), 2)
            figures[f"{name}_cat_vs_room"] = round(statistics.median(cat) / statistics.median(room), 3)
            figures[f"{name}_sdpa_vs_kernel"] = round(statistics.median(sdpa) / statistics.median(room), 3)
            print(
                f"{rows} rows, {length} positions: room {figures[f'{name}_room_ms']} ms, "
                f"cat {figures[f'{name}_cat_ms']} ms, room with sdpa {figures[f'{name}_room_sdpa_ms']} ms"
            )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
