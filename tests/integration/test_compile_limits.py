"""Through a live server: compiles run in worker processes that are stopped past the time or memory limit.

The server runs with small limits (64 MB a compile, 2 s, 2 workers) so no test here can eat the machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest

from tests.support import LiveServer, start_app

LIMITS = {"timeout_s": 2.0, "memory_mb": 64, "workers": 2}
FLAGS = ("--compile-timeout", "2", "--compile-memory", "64", "--compile-workers", "2", "--no-ui")
# outlines_core unrolls each count into DFA states with thousands of token transitions each: this regex
# stays under its repetition bound but needs far more than 64 MB (measured ~200 MB per 1,000 states).
MEMORY_BOMB = "[a-z]{1,999}[A-Z]{1,999}[0-9]{1,999}[a-z]{1,999}"
# A liveness bound for requests that must end, not a speed assert.
ANSWERS_WITHIN_S = 180


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = start_app(*FLAGS)
    yield live
    live.stop()


def _generate(url: str, grammar: dict, engine: str = "auto") -> httpx.Response:
    parameters = {"max_new_tokens": 2, "constraint_engine": engine, "grammar": grammar}
    return httpx.post(
        f"{url}/generate", json={"inputs": "Answer: ", "parameters": parameters}, timeout=ANSWERS_WITHIN_S
    )


def _regex(value: str) -> dict[str, Any]:
    return {"type": "regex", "value": value}


def _workers(server: LiveServer) -> set[int]:
    """The server's compile worker processes (spawned children)."""
    children = psutil.Process(server.proc.pid).children(recursive=True)
    return {c.pid for c in children if any("spawn_main" in part for part in _cmdline(c))}


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _wait_for_workers(server: LiveServer, count: int) -> set[int]:
    deadline = time.monotonic() + ANSWERS_WITHIN_S
    while len(workers := _workers(server)) < count:
        assert time.monotonic() < deadline, f"compile workers never started:\n{server.output()}"
        time.sleep(0.5)
    return workers


def _rss_mb(server: LiveServer) -> float:
    """The server's memory with all its children, in MB."""
    process = psutil.Process(server.proc.pid)
    total = 0
    for each in [process, *process.children(recursive=True)]:
        try:
            total += each.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def test_info_reports_the_compile_limits(server):
    assert httpx.get(f"{server.url}/info", timeout=30).json()["compile_limits"] == LIMITS


def test_a_repetition_outlines_core_would_unroll_is_refused_at_once_naming_the_bound(server):
    response = _generate(server.url, _regex("[a-z]{1,100000}"), engine="outlines_core")
    assert response.status_code == 422, response.text
    assert "up to 100000 exceeds its limit of 1000" in response.json()["error"]


def test_a_compile_past_the_memory_limit_is_killed_and_the_server_stays_small(server):
    assert _generate(server.url, _regex("(warm|up)")).status_code == 200
    before_workers = _wait_for_workers(server, LIMITS["workers"])
    before_mb = _rss_mb(server)
    response = _generate(server.url, _regex(MEMORY_BOMB), engine="outlines_core")
    assert response.status_code == 422, response.text
    assert "64 MB (the compile memory limit)" in response.json()["error"]
    killed = {pid for pid in before_workers if not psutil.pid_exists(pid) or _is_zombie(pid)}
    assert len(killed) == 1, (before_workers, _workers(server))
    # the killed worker's memory is gone; a fresh worker may be starting (~150 MB)
    assert _rss_mb(server) < before_mb + 300
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
    assert _generate(server.url, _regex("(after|bomb)")).status_code == 200


def _is_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def test_slow_compiles_do_not_starve_a_trivial_one(server):
    slow = [_regex(MEMORY_BOMB + "x"), _regex(MEMORY_BOMB + "y")]
    answers: list[httpx.Response] = []
    threads = [
        threading.Thread(target=lambda g=g: answers.append(_generate(server.url, g, "outlines_core")), daemon=True)
        for g in slow
    ]
    for thread in threads:
        thread.start()
    time.sleep(1)  # ordering only: both slow compiles are queued or running before the trivial one
    trivial = _generate(server.url, _regex("(yes|no)"))
    assert trivial.status_code == 200, trivial.text
    for thread in threads:
        thread.join(ANSWERS_WITHIN_S)
    assert [a.status_code for a in answers] == [422, 422], [a.text for a in answers]


def test_a_constraint_that_hit_a_limit_is_answered_from_memory(server):
    first = _generate(server.url, _regex(MEMORY_BOMB + "z"), engine="outlines_core")
    assert first.status_code == 422 and "was stopped" in first.json()["error"]
    workers = _wait_for_workers(server, LIMITS["workers"])
    again = _generate(server.url, _regex(MEMORY_BOMB + "z"), engine="outlines_core")
    assert again.status_code == 422
    assert "remembered from an earlier request" in again.json()["error"]
    assert _workers(server) == workers  # nothing was compiled (or killed) for the repeat
