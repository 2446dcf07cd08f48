"""Where a lone request's decode step goes: the engine's loop, the model's forward, its weights' stream, by op.

python -m benchmarks.step [--runs 3] [--tokens 48] [--model embedded] [--threads 1]
Per generated token, interleaved in one process, process CPU time on CPU, medians over runs:
  engine_ms     the engine decoding alone (Engine.stream, after the first token)
  forward_ms    the model's forward alone on the same prompt (one token per call, its growing KV cache)
  lean_step_ms  the same through the lean lone-row step the engine takes (playground/models/llama_step.py;
                the model's forward where it does not apply)
  generate_ms   transformers' generate (its decode: 48 tokens' time less one token's)
  linears_ms    every linear layer's weight multiplied by one row once, in order: the weights' stream alone
  batch_take_ms     8 constrained clients at once (benchmarks.serve's): the scheduler's own work on each row
                    of each step (Decode.take: scoring, fast-forward's probes, records; not the masks computed
                    beside the forward), the scheduler thread's CPU time
  batch_forward_ms  the same clients: each step's forward, all 8 rows (the scheduler thread's CPU time)
Then loop_ms = engine - lean_step (the loop's own cost), other_ops_ms = forward - linears (every other op
and the modelling code's Python; lean_other_ops_ms the same for the lean step), and ceiling_vs_generate =
generate / linears: the `engine_vs_generate` a step that cost nothing but its matrix products would reach.
torch.profiler's table of one forward by op (self CPU time; the profiler inflates small ops) comes first;
one JSON line of figures last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.decode import PROMPTS, _clock, _messages
from benchmarks.serve import _client_grammar
from playground.decoding.batch import BatchCache
from playground.decoding.engine import Engine
from playground.decoding.rows import Decode
from playground.models import load_model
from playground.types import GenerateParameters

MATRIX_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::mv", "mkldnn::_linear_pointwise"}


def _engine_ms(engine: Engine, prompt: str, tokens: int) -> float:
    params = GenerateParameters(max_new_tokens=tokens, top_n_tokens=1)
    first = None
    for event in engine.stream(_messages(prompt), params):  # noqa: B007 - the last event is the result
        if first is None:
            first = _clock()
    return (_clock() - first) * 1000 / max(1, event.best.generated_tokens - 1)


def _forward_ms(engine: Engine, prompt: str, tokens: int, *, lean: bool = False) -> float:
    """The model alone: greedy tokens one forward each (or, `lean`, the lone-row step), as a lone row runs them."""
    runner = engine.runner
    _, ids = engine.encode_prompt(_messages(prompt))
    with torch.inference_mode():
        logits, kv = runner.forward(runner.ids(ids))
        start = _clock()
        for n in range(tokens - 1):
            token = int(logits[0, -1].argmax())
            stepped = runner.lone_step(token, len(ids) + n, kv) if lean else None
            if stepped is None:
                stepped, kv = runner.forward(runner.ids([token]), kv)
            logits = stepped
        return (_clock() - start) * 1000 / (tokens - 1)


def _generate_ms(engine: Engine, prompt: str, tokens: int) -> float:
    _, ids = engine.encode_prompt(_messages(prompt))
    input_ids = torch.tensor([ids], device=engine.device)
    spent, made = [], []
    for n in (1, tokens):
        start = _clock()
        with torch.inference_mode():
            out = engine.model.generate(
                input_ids, max_new_tokens=n, do_sample=False, pad_token_id=engine.tokenizer.eos_token_id
            )
        spent.append(_clock() - start)
        made.append(out.shape[1] - len(ids))
    return (spent[1] - spent[0]) * 1000 / max(1, made[1] - made[0])


def _linears_ms(engine: Engine, repeats: int = 5) -> float:
    """One row through every linear layer once (the layer's own forward, so its kernel routing)."""
    layers = [m for m in engine.model.modules() if isinstance(m, torch.nn.Linear)]
    rows = [torch.randn(1, m.in_features, device=engine.device) for m in layers]
    with torch.inference_mode():
        start = _clock()
        for _ in range(repeats):
            for layer, row in zip(layers, rows):
                layer(row)
        return (_clock() - start) * 1000 / repeats


@contextmanager
def _timed(owner: type, name: str, spent: list[float]) -> Any:
    """Each call of owner.name appends its CPU time on the calling thread (the scheduler's) to `spent`."""
    method: Callable[..., Any] = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            spent.append(time.thread_time() - start)

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, method)


def _batch_ms(engine: Engine, clients: int = 8, tokens: int = 24) -> tuple[float, float]:
    """(ms of take per row and step, ms of forward per step) of `clients` constrained requests decoding together."""
    takes: list[float] = []
    forwards: list[float] = []

    failed: list[BaseException] = []

    def one(i: int) -> None:
        params = GenerateParameters(grammar=_client_grammar(i), max_new_tokens=tokens, details=True)
        try:
            engine.generate(f"Client {i} asks: write the record for order {i}.", params)
        except BaseException as exc:  # noqa: BLE001 - raised below, on the benchmark's thread
            failed.append(exc)

    with _timed(Decode, "take", takes), _timed(BatchCache, "forward", forwards):
        threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failed:
        raise failed[0]
    return statistics.mean(takes) * 1000, statistics.mean(forwards) * 1000


def _by_op(engine: Engine, steps: int = 4) -> dict[str, float]:
    """torch.profiler over a few forward steps (the prompt's last token again: the op counts are the same)."""
    runner = engine.runner
    _, ids = engine.encode_prompt(_messages(PROMPTS[0]))
    with torch.inference_mode():
        _, kv = runner.forward(runner.ids(ids))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                _, kv = runner.forward(runner.ids(ids[-1:]), kv)
    events = prof.key_averages()
    print(events.table(sort_by="self_cpu_time_total", row_limit=15))
    total = sum(e.self_cpu_time_total for e in events)
    matrix = sum(e.self_cpu_time_total for e in events if e.key in MATRIX_OPS)
    attention = sum(e.self_cpu_time_total for e in events if "scaled_dot_product" in e.key)
    return {
        "profiled_matrix_share": round(matrix / total, 3),
        "profiled_attention_share": round(attention / total, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    engine = Engine(load_model(args.model, threads=args.threads))
    _engine_ms(engine, PROMPTS[0], 4)
    _generate_ms(engine, PROMPTS[0], 4)
    by_op = _by_op(engine)
    _batch_ms(engine)  # every client's constraint compiled once
    seen: dict[str, list[float]] = {"engine": [], "forward": [], "lean_step": [], "generate": [], "linears": []}
    seen |= {"batch_take": [], "batch_forward": []}
    for _ in range(args.runs):
        for prompt in PROMPTS:
            seen["engine"].append(_engine_ms(engine, prompt, args.tokens))
            seen["forward"].append(_forward_ms(engine, prompt, args.tokens))
            seen["lean_step"].append(_forward_ms(engine, prompt, args.tokens, lean=True))
            seen["generate"].append(_generate_ms(engine, prompt, args.tokens))
            seen["linears"].append(_linears_ms(engine))
        take, forward = _batch_ms(engine)
        seen["batch_take"].append(take)
        seen["batch_forward"].append(forward)
    med = {name: statistics.median(values) for name, values in seen.items()}
    figures = {
        "model": engine.model_id,
        "threads": torch.get_num_threads(),
        "runs": args.runs * len(PROMPTS),  # (the batch's: args.runs)
        "tokens": args.tokens,
        **{f"{name}_ms": round(value, 2) for name, value in med.items()},
        "loop_ms": round(med["engine"] - med["lean_step"], 2),
        "other_ops_ms": round(med["forward"] - med["linears"], 2),
        "lean_other_ops_ms": round(med["lean_step"] - med["linears"], 2),
        "ceiling_vs_generate": round(med["generate"] / med["linears"], 3),
        **by_op,
    }
    for key, value in figures.items():
        print(f"{key:>28}  {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
