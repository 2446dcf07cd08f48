"""Free compile workers go to clients in turn: one client's queue of slow compiles cannot hold back
another client's quick one (on the old code a plain FIFO made it wait for all eight)."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from playground.fair_queue import FairQueue


def test_a_newcomer_gets_the_next_free_worker_before_a_busy_clients_backlog() -> None:
    free: FairQueue[str] = FairQueue()
    free.put("worker")
    assert free.get("busy", timeout=1) == "worker"  # the busy client's first job runs
    order: list[str] = []

    def wait(client: str) -> None:
        free.get(client, timeout=10)
        order.append(client)
        free.release(client)
        free.put("worker")

    threads = [threading.Thread(target=wait, args=("busy",)) for _ in range(4)]
    for thread in threads:
        thread.start()
        time.sleep(0.02)  # the backlog queues first
    newcomer = threading.Thread(target=wait, args=("quick",))
    newcomer.start()
    time.sleep(0.05)
    free.release("busy")  # the running job ends; its worker comes back
    free.put("worker")
    for thread in [*threads, newcomer]:
        thread.join(10)
    assert order[0] == "quick" and order.count("busy") == 4


def test_waiting_ends_at_the_timeout() -> None:
    with pytest.raises(queue.Empty):
        FairQueue().get("a", timeout=0.05)
