"""One hostile row cannot hold the batch: constraint work has a budget per row and step, and every request
a wall-clock bound. On the old code the slow rows below decoded to the end, holding every step.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from playground.decoding import row_budget
from playground.decoding.scheduler import Job, Scheduler
from playground.errors import WorkBudgetError
from tests.unit.test_batching import decode_of, run_alone, runner, same, submit_together, tokens_of

__all__ = ["runner"]  # the tiny model fixture, shared with the batching tests


class BurnsCpu:
    """A constraint whose mask costs more each step, as an ambiguous grammar's parse does."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        end = time.thread_time() + self.seconds
        while time.thread_time() < end:
            pass
        return scores


class Sleeps:
    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        time.sleep(0.01)
        return scores


@pytest.fixture
def scheduler(runner) -> Scheduler:
    return Scheduler(runner, threading.Lock(), max_rows=32)


def test_a_row_past_its_step_budget_leaves_the_batch_and_the_others_go_on(runner, scheduler, monkeypatch):
    monkeypatch.setattr(row_budget, "STEP_CPU_S", 0.02)

    def make():
        return decode_of(runner, [5, 6, 7], tokens=12)

    want = run_alone(runner, make)
    hostile, fine = Job(decode_of(runner, [8, 9], tokens=200, processors=[BurnsCpu(0.05)])), Job(make())
    submit_together(scheduler, [hostile, fine])
    with pytest.raises(WorkBudgetError, match="left the batch") as caught:
        tokens_of(hostile)
    assert caught.value.status == 422 and caught.value.error_type == "budget"
    same(tokens_of(fine), want)
    assert scheduler.usage()["requests"] == 0


def test_a_row_past_its_budget_in_all_leaves_too(runner, scheduler, monkeypatch):
    monkeypatch.setattr(row_budget, "ROW_CPU_S", 0.1)
    job = Job(decode_of(runner, [8, 9], tokens=200, processors=[BurnsCpu(0.01)]))
    scheduler.submit(job)
    with pytest.raises(WorkBudgetError, match="over this answer"):
        tokens_of(job)


def test_every_request_has_a_wall_clock_bound(runner, scheduler, monkeypatch):
    monkeypatch.setattr(row_budget, "REQUEST_WALL_S", 0.3)
    job = Job(decode_of(runner, [8, 9], tokens=100_000, processors=[Sleeps()]))
    scheduler.submit(job)
    with pytest.raises(WorkBudgetError, match="wall-clock bound"):
        tokens_of(job)


def test_the_reader_stops_waiting_at_the_deadline_even_if_no_step_returns(runner) -> None:
    job = Job(decode_of(runner, [8, 9]), deadline=time.monotonic() + 0.2)  # never scheduled: a stuck loop
    with pytest.raises(WorkBudgetError, match="wall-clock bound"):
        next(job.events())
    assert job.cancelled.is_set()


def test_a_long_prompt_prefills_a_chunk_per_step_while_the_batch_decodes(runner, scheduler, monkeypatch):
    from playground.decoding import scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "PREFILL_CHUNK", 4)
    long_prompt = list(range(3, 40))  # 37 tokens: 10 chunks

    def make_long():
        return decode_of(runner, long_prompt, tokens=5)

    want = run_alone(runner, make_long)
    short = Job(decode_of(runner, [5, 6, 7], tokens=60))
    scheduler.submit(short)
    next(e for e in short.events() if not isinstance(e, list))  # decoding, and the model batchable
    long = Job(make_long())
    with scheduler.model_lock:  # the scheduler waits between two steps
        scheduler.submit(long)
        before = short.outbox.qsize()
    events = long.events()
    next(e for e in events if not isinstance(e, list))
    assert short.outbox.qsize() - before >= 8  # the short request decoded while the long prompt prefilled
    same(tokens_of(long), want[1:])  # the rest; chunked, it decodes as it would alone
    tokens_of(short)
