"""A compile worker that died while idle costs nobody an error: the next compile takes another worker.

On the old code the next compile wrote to the dead worker's pipe and answered 500 (BrokenPipeError).
"""

from __future__ import annotations

import os
import signal
import time

from playground.constraints.compile_pool import CompileLimits, CompilePool


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
