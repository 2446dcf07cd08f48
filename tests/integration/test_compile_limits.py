"""Through live servers: compiles run in worker processes that are stopped past the time or memory limit.

The servers run with small limits (64 MB a compile) so no test here can eat the machine.
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

# A short time limit, to show that waiting for a busy worker does not count toward it.
LIMITS = {"timeout_s": 2.0, "memory_mb": 64, "workers": 2}
FLAGS = ("--compile-timeout", "2", "--compile-memory", "64", "--compile-workers", "2", "--no-ui")
# A time limit no compile here reaches, so the memory limit is what stops the bomb, however fast the machine.
MEMORY_FLAGS = ("--compile-timeout", "600", "--compile-memory", "64", "--compile-workers", "1", "--no-ui")
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


@pytest.fixture(scope="module")
def memory_server() -> Iterator[LiveServer]:
    live = start_app(*MEMORY_FLAGS)
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


def _settled_workers(server: LiveServer, quiet_s: float = 3.0) -> set[int]:
    """The spawned workers once their set has not changed for `quiet_s` (a replacement starts in the background)."""
    deadline = time.monotonic() + ANSWERS_WITHIN_S
    workers, since = _workers(server), time.monotonic()
    while time.monotonic() - since < quiet_s or not workers:
        assert time.monotonic() < deadline, f"compile workers never settled:\n{server.output()}"
        time.sleep(0.5)
        now = _workers(server)
        if now != workers:
            workers, since = now, time.monotonic()
    return workers


def _rss_mb(server: LiveServer) -> dict[int, float]:
    """The memory of the server and each of its children, in MB, by pid."""
    process = psutil.Process(server.proc.pid)
    sizes = {}
    for each in [process, *process.children(recursive=True)]:
        try:
            sizes[each.pid] = each.memory_info().rss / 2**20
        except psutil.Error:
            pass
    return sizes


def test_info_reports_the_compile_limits(server):
    assert httpx.get(f"{server.url}/info", timeout=30).json()["compile_limits"] == LIMITS


def test_a_repetition_outlines_core_would_unroll_is_refused_at_once_naming_the_bound(server):
    response = _generate(server.url, _regex("[a-z]{1,100000}"), engine="outlines_core")
    assert response.status_code == 422, response.text
    assert "up to 100000 exceeds its limit of 1000" in response.json()["error"]


def test_a_compile_past_the_memory_limit_is_killed_and_the_server_stays_small(memory_server):
    server = memory_server
    assert _generate(server.url, _regex("(warm|up)")).status_code == 200
    before_workers = _wait_for_workers(server, 1)
    before_mb = sum(_rss_mb(server).values())
    response = _generate(server.url, _regex(MEMORY_BOMB), engine="outlines_core")
    assert response.status_code == 422, response.text
    assert "64 MB (the compile memory limit)" in response.json()["error"]
    killed = {pid for pid in before_workers if not psutil.pid_exists(pid) or _is_zombie(pid)}
    assert len(killed) == 1, (before_workers, _workers(server))
    # the killed worker's memory comes back; a fresh worker may be starting (~150 MB)
    deadline = time.monotonic() + 30
    while sum((after := _rss_mb(server)).values()) >= before_mb + 300 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sum(after.values()) < before_mb + 300, (before_mb, after)
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


def test_a_constraint_that_hit_a_limit_is_answered_from_memory(memory_server):
    server = memory_server
    first = _generate(server.url, _regex(MEMORY_BOMB + "z"), engine="outlines_core")
    assert first.status_code == 422 and "64 MB (the compile memory limit)" in first.json()["error"]
    workers = _settled_workers(server)  # the killed worker's replacement started, however loaded the machine
    again = _generate(server.url, _regex(MEMORY_BOMB + "z"), engine="outlines_core")
    assert again.status_code == 422
    assert again.json()["error"] == first.json()["error"]  # the same words: where the outcome came from is no news
    assert _workers(server) == workers  # nothing was compiled (or killed) for the repeat
