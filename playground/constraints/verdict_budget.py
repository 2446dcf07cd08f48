"""A budget for one verdict: every keyword a validator evaluates and every error it makes is counted.

jsonschema validates a `$ref` each time it is reached, so twenty levels of `allOf` over shared `$ref`s
make 2^20 checks of a 1.5 KB schema (and `anyOf` keeps every branch's errors: memory grows as fast).
No memo makes every schema linear, so each verdict carries a budget instead: steps (keyword
evaluations, growing with the instance), the bytes of the errors made (what memory holds) and wall time. Past any of
them the verdict is "could not check" (valid: null), never a freeze.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from playground.context import bound

BASE_STEPS = 200_000  # a schema of hundreds of keywords over a modest instance needs a few thousand
STEPS_PER_BYTE = 20  # a large instance gets more: the budget is linear in the text
MAX_ERROR_BYTES = 64 << 20  # what the errors made may hold (anyOf keeps every branch's, each with its message)
ERROR_BYTES = 1024  # an error's own weight, beside its message
WALL_FACTOR = 4  # the wall clock may run this much longer than the CPU budget (a busy machine)


class TooCostly(Exception):
    """The verdict ran out of its budget; the message says which part."""


@dataclass
class Budget:
    """What one verdict may still spend."""

    steps: int
    error_bytes: int
    cpu_deadline: float  # this thread's CPU time: what the verdict costs, however busy the machine
    deadline: float  # wall clock, a backstop WALL_FACTOR times longer (pattern checks use it too)
    seconds: float
    spent: int = field(default=0)

    def step(self) -> None:
        self.spent += 1
        if self.spent > self.steps:
            raise TooCostly(f"too costly to check: more than {self.steps:,} schema evaluations")
        if not self.spent & 255 and (time.thread_time() > self.cpu_deadline or time.monotonic() > self.deadline):
            raise TooCostly(f"too costly to check within {self.seconds:g} s")

    def error(self, message: str) -> None:
        self.error_bytes -= ERROR_BYTES + len(message)
        if self.error_bytes < 0:
            raise TooCostly(f"too costly to check: its failed branches took more than {MAX_ERROR_BYTES >> 20} MB")


_current: ContextVar[Budget | None] = ContextVar("verdict_budget", default=None)


@contextlib.contextmanager
def bounded(seconds: float, text_bytes: int) -> Iterator[Budget]:
    """Within this block, metered keywords spend from one fresh budget."""
    budget = Budget(
        BASE_STEPS + STEPS_PER_BYTE * text_bytes,
        MAX_ERROR_BYTES,
        time.thread_time() + seconds,
        time.monotonic() + seconds * WALL_FACTOR,
        seconds,
    )
    with bound(_current, budget):
        yield budget


def active() -> bool:
    """True inside `bounded` (a verdict with a budget is running)."""
    return _current.get() is not None


def deadline() -> float:
    """When the current verdict's time is up (infinity outside `bounded`)."""
    budget = _current.get()
    return budget.deadline if budget is not None else float("inf")


def step() -> None:
    """Count one evaluation against the current budget (none outside `bounded`)."""
    budget = _current.get()
    if budget is not None:
        budget.step()


def metered(keyword: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
    """A jsonschema keyword function that spends a step per call and one per error it yields."""

    @functools.wraps(keyword)
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        budget = _current.get()
        if budget is None:
            yield from keyword(validator, value, instance, schema) or ()
            return
        budget.step()
        for error in keyword(validator, value, instance, schema) or ():
            budget.error(getattr(error, "message", ""))
            yield error

    return run
