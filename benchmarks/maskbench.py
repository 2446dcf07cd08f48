"""MaskBench: does each engine accept every valid instance of a schema and refuse every invalid one?

python -m benchmarks.maskbench --data DIR [--engine auto|llguidance|xgrammar|outlines_core]
Each file of DIR holds {"schema", "tests": [{"data", "valid"}, ...]} (tests/data/maskbench-dev is a
sample). A schema is compiled with the embedded model's tokenizer under the compile time limit, then each
instance, serialized with json.dumps, is fed token by token through the decoder's own TokenChooser (as
/check does): the engine's mask at every token, then end of text through the JSON EOS gate. One line per
schema that does not pass fully, then one JSON line of figures last. Masks are timed in this thread's CPU
time (what a mask costs the decoding loop, whatever else a small shared machine runs meanwhile).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from playground.constraints import Constraint, backends
from playground.constraints.compiler import CompiledConstraint
from playground.decoding.engine import Engine
from playground.decoding.walk import masks
from playground.errors import CompileTimeoutError, ConstraintError
from playground.models import load_model
from playground.options import LOCAL


@dataclass
class Tally:
    """Counts and timings over all schemas."""

    schemas: int = 0
    compiled: int = 0
    compile_errors: int = 0
    timeouts: int = 0
    valid_total: int = 0
    valid_accepted: int = 0
    invalid_total: int = 0
    invalid_accepted: int = 0
    fully_passing: int = 0
    compile_s: list[float] = field(default_factory=list)
    mask_s: list[float] = field(default_factory=list)

    def figures(self) -> dict:
        """The benchmark's JSON line."""
        counts = {k: v for k, v in vars(self).items() if isinstance(v, int)}
        return {
            **counts,
            "compile_ms_p50": _ms(_quantile(self.compile_s, 0.5)),
            "compile_ms_p90": _ms(_quantile(self.compile_s, 0.9)),
            "mask_us_p50": round(_quantile(self.mask_s, 0.5) * 1e6, 1),
            "mask_us_p99": round(_quantile(self.mask_s, 0.99) * 1e6, 1),
        }


def _quantile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def run_schema(engine: Engine, case: dict, constraint_engine: str, tally: Tally) -> str | None:
    """Compile one schema and check its instances; why it does not pass fully, or None."""
    tests = case.get("tests") or []
    tally.schemas += 1
    tally.valid_total += sum(1 for t in tests if t["valid"])
    tally.invalid_total += sum(1 for t in tests if not t["valid"])
    start = time.perf_counter()
    try:
        constraint = Constraint.from_grammar({"type": "json", "value": case["schema"], "strict": False})
        compiled = engine.compiler.compile(constraint, constraint_engine)
    except CompileTimeoutError as exc:
        tally.timeouts += 1
        return f"timeout: {exc.message}"
    except ConstraintError as exc:
        tally.compile_errors += 1
        return f"compile error: {exc.message}"
    assert compiled is not None
    tally.compile_s.append(time.perf_counter() - start)
    tally.compiled += 1
    wrong = []
    for index, test in enumerate(tests):
        refused = first_refusal(engine, constraint, compiled, json.dumps(test["data"]), tally.mask_s)
        accepted = refused is None
        if accepted and test["valid"]:
            tally.valid_accepted += 1
        elif accepted:
            tally.invalid_accepted += 1
        if accepted != test["valid"]:
            wrong.append(f"#{index} " + (f"valid refused ({refused})" if test["valid"] else "invalid accepted"))
    if wrong:
        return "; ".join(wrong)
    tally.fully_passing += 1
    return None


def first_refusal(
    engine: Engine, constraint: Constraint, compiled: CompiledConstraint, text: str, mask_s: list[float]
) -> str | None:
    """Why decoding could not write `text` and then stop, or None: the decoder's own masks and EOS gate."""
    ids = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    walk = masks(engine, constraint, compiled, ids)
    for k in range(len(ids) + 1):
        start = time.thread_time()
        allowed, gated = next(walk)
        mask_s.append(time.thread_time() - start)
        token = ids[k] if k < len(ids) else min(engine.runner.eos_ids)
        if not bool(allowed[token]):
            where = "the end of text" if k == len(ids) else f"token {k} ({engine.token_text(token)!r})"
            who = "the EOS gate" if gated else f"{compiled.engine}'s mask"
            return f"{who} refuses {where}"
    return None


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.maskbench", description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, type=Path, help="folder of MaskBench *.json files")
    parser.add_argument("--engine", default="auto", choices=("auto", *backends.names()))
    parser.add_argument("--model", default="embedded", help="model whose tokenizer builds the masks")
    parser.add_argument(
        "--compile-timeout", type=float, default=LOCAL.compile_timeout, help="seconds per compile (the app's default)"
    )
    args = parser.parse_args(argv)
    files = sorted(args.data.glob("*.json"))
    if not files:
        parser.error(f"no *.json files under {args.data}")
    engine = Engine(load_model(args.model, threads=1), compile_timeout_s=args.compile_timeout)
    for name in backends.auto_order("json_schema") if args.engine == "auto" else (args.engine,):
        engine.compiler.warm(name)  # builds the engine's vocabulary tables outside the timed compiles
    tally = Tally()
    for path in files:
        why = run_schema(engine, json.loads(path.read_text()), args.engine, tally)
        if why:
            print(f"{path.name}: {why[:300]}", file=sys.stderr)
    figures = tally.figures()
    print(f"engine {args.engine}: {tally.fully_passing}/{tally.schemas} schemas pass fully", file=sys.stderr)
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
