"""Prompts of different lengths joining a batch together: their padding run through the model or left out.

python -m benchmarks.ragged_prefill [--runs 4] [--threads 1]
For each set of new-token counts, the rows prefill together as the scheduler does (batch.py's prefill: the shorter
padded on the left), ms of the calling thread's CPU, after a cached 60-token prefix each (`cached_`) or from
nothing (`fresh_`). `padded` is the way before packing: after a cached prefix the lean step
(playground/models/llama_step.py) with every place of the block through the linear layers (PACK_FROM past 1), from
nothing the model's own forward; `packed` the lean step with the real tokens alone (the default). Interleaved in one
process, medians; `padded_vs_packed` > 1 is the gain. One JSON line of figures last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from playground.decoding.batch import BatchCache
from playground.decoding.runner import ModelRunner
from playground.models import llama_step, load_model

SETS = ((200, 20, 20, 20), (120, 60, 30, 10, 80, 40, 20, 100), (30, 30, 30, 31))  # new tokens per row
PREFIX = 60  # cached positions before each row's new tokens (the `cached_` figures)


def _ms(runner: ModelRunner, counts: tuple[int, ...], prefix: int, padded: bool) -> float:
    cached = [1 + (j * 13) % 4000 for j in range(prefix)]
    rows = [
        (runner.forward(runner.ids(cached))[1] if prefix else None, [2 + (i * 7 + j * 3) % 4000 for j in range(n)])
        for i, n in enumerate(counts)
    ]
    default, llama_step.PACK_FROM = llama_step.PACK_FROM, 2.0 if padded else llama_step.PACK_FROM
    fresh = runner.fresh_cache
    if padded:
        runner.fresh_cache = lambda: None  # the model's own forward
    try:
        start = time.thread_time()
        BatchCache(runner).prefill(rows)
        return (time.thread_time() - start) * 1000
    finally:
        llama_step.PACK_FROM, runner.fresh_cache = default, fresh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    runner = ModelRunner(load_model("embedded", threads=args.threads))
    if runner._lean_step is None:
        raise SystemExit("the embedded model takes no lean step here: nothing to compare")
    figures: dict[str, object] = {"threads": args.threads, "runs": args.runs, "pack_from": llama_step.PACK_FROM}
    with torch.inference_mode():
        _ms(runner, SETS[-1], PREFIX, False)  # first touch
        for prefix, kind in ((PREFIX, "cached"), (0, "fresh")):
            for counts in SETS:
                packed, padded = [], []
                for run in range(args.runs):  # which goes first alternates
                    for pad in (False, True) if run % 2 else (True, False):
                        (padded if pad else packed).append(_ms(runner, counts, prefix, pad))
                name = f"{kind}_rows" + "_".join(map(str, counts))
                figures[f"{name}_padded_ms"] = round(statistics.median(padded), 1)
                figures[f"{name}_packed_ms"] = round(statistics.median(packed), 1)
                figures[f"{name}_padded_vs_packed"] = round(statistics.median(padded) / statistics.median(packed), 3)
                padded_ms, packed_ms = figures[f"{name}_padded_ms"], figures[f"{name}_packed_ms"]
                print(f"{kind} {counts}: padded {padded_ms} ms, packed {packed_ms} ms")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
