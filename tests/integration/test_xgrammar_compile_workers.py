"""xgrammar through the compile workers: what it compiles in-process compiles there too, under the default limits.

xgrammar 0.2's serialized form copies a grammar's complete FSM once per rule: these MaskBench schemas
became 80-660 MB of JSON and over 1 GB while the worker wrote it, so they were stopped by the memory limit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from playground.constraints import Constraint
from playground.constraints.backends import xgrammar
from playground.constraints.compile_pool import CompileLimits
from playground.constraints.compiler import ConstraintCompiler
from playground.errors import CompileMemoryError
from playground.types import GenerateParameters
from tests.support import REPO_ROOT, child_env

DATA = REPO_ROOT / "tests" / "data" / "maskbench-dev"
# Two schemas whose serialized form was among the largest (89 and 82 MB); each compiles in 1-2 s.
SCHEMAS = ("Github_hard---o45201", "Github_hard---o14514")

# xgrammar needs far more than 64 MB to compile this (measured: stopped at the limit within a second).
ENUM_BOMB = {"enum": [f"value number {i} of many" for i in range(20000)]}

# A process that starts the compile workers and exits as soon as one is spawned, before any is ready.
EXIT_WHILE_STARTING = """
import time

import psutil

from playground.constraints.compile_pool import CompileLimits, CompilePool
from playground.models import load_model


def spawned() -> bool:
    return any("spawn_main" in " ".join(c.cmdline()) for c in psutil.Process().children())


if __name__ == "__main__":
    CompilePool(load_model("embedded", threads=1).tokenizer, CompileLimits(workers=2))
    while not spawned():
        time.sleep(0.01)
"""


@pytest.mark.parametrize("name", SCHEMAS)
def test_xgrammar_compiles_large_schemas_through_the_workers_and_masks_them(engine, name):
    assert engine.compiler.limits == CompileLimits()  # 10 s, 1024 MB: the server's defaults
    case = json.loads((DATA / f"{name}.json").read_text())
    params = GenerateParameters(grammar={"type": "json", "value": case["schema"]}, constraint_engine="xgrammar")
    _, compiled = engine.compile(params)
    assert compiled.engine == "xgrammar"
    assert not compiled.cached
    answers = [(t["valid"], engine.accepts(json.dumps(t["data"]), params)) for t in case["tests"]]
    assert {valid for valid, _ in answers} == {True, False}
    assert all(valid == accepted for valid, (accepted, _) in answers), answers


def test_an_xgrammar_compile_the_worker_stopped_never_runs_in_the_server(loaded_model, monkeypatch):
    compiled_here: list[str] = []  # xgrammar compiles in this process; the spawned workers keep the original
    real = xgrammar._template
    monkeypatch.setattr(xgrammar, "_template", lambda *a: compiled_here.append(a[2]) or real(*a))
    limits = CompileLimits(timeout_s=600, memory_mb=64, workers=1)
    compiler = ConstraintCompiler(loaded_model.tokenizer, limits=limits)
    try:
        bomb = Constraint.from_grammar({"type": "json", "value": ENUM_BOMB})
        with pytest.raises(CompileMemoryError, match="64 MB"):
            compiler.compile(bomb, "xgrammar")
        small = Constraint.from_grammar({"type": "json", "value": {"enum": ["yes", "no"]}})
        assert compiler.compile(small, "xgrammar").engine == "xgrammar"
    finally:
        compiler.pool().close()
    assert bomb.engine_input() not in compiled_here
    assert small.engine_input() in compiled_here  # what the worker compiled in bounds is compiled here too


def test_exiting_while_workers_start_prints_no_traceback(tmp_path: Path):
    script = tmp_path / "exit_while_starting.py"  # a file: spawned workers import it, as they would app.py
    script.write_text(EXIT_WHILE_STARTING)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO_ROOT,
        env=child_env({"PYTHONPATH": str(REPO_ROOT)}),  # this tree's code, wherever the script lies
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
