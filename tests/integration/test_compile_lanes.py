"""Two compile lanes: background work (the inspect panel, /inspect) never takes a worker a turn waits for.

prepare() (the UI calls it at start-up) starts both lanes with every engine warm.
"""

from __future__ import annotations

import time

from playground.constraints import Constraint
from playground.constraints.compile_pool import CompileLimits
from playground.constraints.compiler import ConstraintCompiler
from playground.constraints.inspection import inspect_constraint


def _started(pool, deadline: float) -> list[int]:
    while not pool.pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    return pool.pids()


def test_prepare_starts_both_lanes_and_inspect_runs_in_the_background_one(loaded_model) -> None:
    compiler = ConstraintCompiler(loaded_model.tokenizer, limits=CompileLimits(workers=1))
    compiler.prepare()
    turns, background = compiler.pool(), compiler.pool(background=True)
    try:
        deadline = time.monotonic() + 300
        (turn_pid,), (background_pid,) = _started(turns, deadline), _started(background, deadline)
        assert turn_pid != background_pid
        turns.close()  # no worker left for turns: an inspection that needed one would wait for minutes
        report = inspect_constraint(compiler, Constraint.parse("regex", "[0-9]{3}-[a-z]{2}"))
        assert [r.compiled for r in report.engines] == [True, True, True], report
    finally:
        turns.close()
        background.close()
