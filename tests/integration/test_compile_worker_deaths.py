"""A compile worker that died while idle costs nobody an error: the next compile takes another worker (on the old
code the next compile wrote to the dead worker's pipe and answered 500, BrokenPipeError). An interrupt does not kill
the workers, and a program without a main guard starts them as one with it does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from playground.constraints.compile_pool import CompileLimits, CompilePool
from tests.support import REPO_ROOT, child_env


def test_a_worker_killed_while_idle_is_replaced_and_the_compile_succeeds(loaded_model) -> None:
    pool = CompilePool(loaded_model.tokenizer, CompileLimits(workers=1))
    try:
        pool.compile("llguidance", "regex", "[0-9]+")
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)  # dead and reaped, still in the idle queue
        payload, warnings = pool.compile("llguidance", "regex", "[a-z]+")
        assert payload is None and warnings == []
        assert pid not in pool.pids()
    finally:
        pool.close()


def test_an_interrupt_is_the_server_s_and_leaves_the_workers_serving(loaded_model) -> None:
    """A notebook's interrupt (SIGINT to the whole process group) killed every worker with a traceback in the cell;
    the next compile waited for new ones."""
    pool = CompilePool(loaded_model.tokenizer, CompileLimits(workers=1))
    try:
        pool.compile("llguidance", "regex", "[0-9]+")
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGINT)
        time.sleep(0.5)
        assert pool.compile("llguidance", "regex", "[a-z]+") == (None, [])
        assert list(pool.pids()) == [pid]
    finally:
        pool.close()


# A program without `if __name__ == "__main__":`, as a notebook's code pasted into a script is. Its first use of
# native code spawns a sandbox (compile workers start the same way, with `sandbox.main_left_out`).
UNGUARDED = """
print("the program ran")
from playground.constraints import sandbox

print(sandbox.call("json:dumps", [1, 2]))
"""


def test_a_program_without_a_main_guard_runs_and_its_processes_do_not_run_it_again(tmp_path: Path) -> None:
    """Spawned processes imported the program's main module: its code ran again in each and started processes of
    its own there, which multiprocessing refuses while a child starts; a compile then waited 300 s for a worker."""
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO_ROOT,
        env=child_env({"PYTHONPATH": str(REPO_ROOT)}),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["the program ran", "[1, 2]"], done.stdout
