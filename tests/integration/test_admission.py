"""Admission control on a real server: bounded running and waiting requests, 429 past the queue, no threads
for waiters, and a queued request whose client left never reaches the model.

The test plugin `wait_for_file` holds the running request inside its first decode step until the test
creates a file, so which request runs and which wait is decided by the test, not by timing.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from playground.types.sizes import limits_info
from tests.support import REPO_ROOT, LiveServer, start_app

MAX_QUEUE = 12
PLUGINS = str(REPO_ROOT / "tests" / "plugins")


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    live = start_app(
        "--no-ui",
        "--max-concurrent",
        "1",
        "--max-queue",
        str(MAX_QUEUE),
        "--custom-modules",
        "sp_gate_plugin",
        env={"PYTHONPATH": PLUGINS},
    )
    yield live
    live.stop()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=MAX_QUEUE + 4) as executor:
        yield executor


def gated(gate: Path, marker: Path | None = None) -> dict:
    params = [str(gate)] + ([str(marker)] if marker else [])
    return {
        "inputs": "Hello",
        "parameters": {"max_new_tokens": 1, "logits_processors": [{"name": "wait_for_file", "params": params}]},
    }


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/generate", json=body, timeout=180)


def wait_for(url: str, condition: Callable[[dict], bool]) -> dict:
    """Poll /health until `condition` holds on its body (the server's own count of running and waiting)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        body = httpx.get(f"{url}/health", timeout=10).json()
        if condition(body):
            return body
        time.sleep(0.05)
    raise AssertionError(f"/health never reached the expected state; last: {body}")


def fill(url: str, pool: ThreadPoolExecutor, gate: Path, waiting: int) -> list[Future]:
    """One request running (held at the gate) and `waiting` more queued behind it."""
    futures = [pool.submit(post, url, gated(gate))]
    wait_for(url, lambda h: h.get("running") == 1)
    futures += [pool.submit(post, url, gated(gate)) for _ in range(waiting)]
    wait_for(url, lambda h: h.get("waiting") == waiting)
    return futures


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def test_past_the_queue_requests_get_429_with_retry_after(server: LiveServer, pool, tmp_path: Path) -> None:
    gate = tmp_path / "open"
    futures = fill(server.url, pool, gate, MAX_QUEUE)
    refused = post(server.url, gated(gate))
    assert refused.status_code == 429
    assert refused.json()["error_type"] == "overloaded"
    assert f"1 request running and {MAX_QUEUE} waiting (max_queue)" in refused.json()["error"]
    assert int(refused.headers["retry-after"]) >= 1
    gate.touch()
    assert [f.result().status_code for f in futures] == [200] * (MAX_QUEUE + 1)


def test_info_reports_the_enforced_limits(server: LiveServer) -> None:
    info = httpx.get(f"{server.url}/info", timeout=30).json()
    assert info["max_concurrent_requests"] == 1 + MAX_QUEUE
    assert (info["max_running_requests"], info["max_queue"]) == (1, MAX_QUEUE)
    assert {key: info[key] for key in limits_info()} == limits_info()  # the request size limits too


def test_queued_requests_take_no_thread_each(server: LiveServer, pool, tmp_path: Path) -> None:
    gate = tmp_path / "open"
    futures = fill(server.url, pool, gate, 1)
    before = threads_of(server.proc.pid)
    futures += [pool.submit(post, server.url, gated(gate)) for _ in range(MAX_QUEUE - 1)]
    wait_for(server.url, lambda h: h.get("waiting") == MAX_QUEUE)
    grown = threads_of(server.proc.pid) - before
    gate.touch()
    assert [f.result().status_code for f in futures] == [200] * (MAX_QUEUE + 1)
    assert grown < 4, f"{MAX_QUEUE - 1} more queued requests added {grown} threads"


def raw_post(url: str, body: dict) -> socket.socket:
    """Send a request on a bare socket and keep it open, so the test decides when the client leaves."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = f"POST /generate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    sock.sendall(head.encode() + data)
    return sock


def test_a_queued_request_whose_client_left_never_reaches_the_model(server: LiveServer, pool, tmp_path: Path) -> None:
    gate, left, later = tmp_path / "open", tmp_path / "left.log", tmp_path / "later.log"
    running = pool.submit(post, server.url, gated(gate))
    wait_for(server.url, lambda h: h.get("running") == 1)
    sock = raw_post(server.url, gated(gate, left))
    wait_for(server.url, lambda h: h.get("waiting") == 1)
    sock.close()
    wait_for(server.url, lambda h: h.get("waiting") == 0)
    gate.touch()
    assert running.result().status_code == 200
    # Queued after the one that left: when it has run, the one that left would have run before it.
    assert post(server.url, gated(gate, later)).status_code == 200
    assert later.exists()
    assert not left.exists()
