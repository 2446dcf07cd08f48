"""What one row may spend inside the batch's step, and what one request may spend in all.

Every row's constraint work (its processors and mask, the JSON EOS gate, probing forced tokens) runs in
the batch's step, so every other request waits for it: an ambiguous grammar whose parse grows with each
token once slowed a co-batched request from 2 s to 27 s and decoded for 14 minutes. Each row has a budget
per step and in all, counted in the scheduler thread's CPU time (what the row costs, whatever else the
machine runs) with a wall-time backstop; a row past it leaves the batch with a 422. Every request has a
wall-clock bound too, kept by the scheduler between steps and by the reader, who stops waiting.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

from playground.context import bound
from playground.errors import WorkBudgetError

STEP_CPU_S = 0.25  # one row's constraint work in one step (llguidance's masks take ~1 ms)
ROW_CPU_S = 30.0  # one row's constraint work in all
WALL_FACTOR = 20.0  # a step's wall time may exceed the CPU budget this much (a busy machine, the GIL)
REQUEST_WALL_S = 600.0  # every local request, from joining the queue to its last token


class RowBudget:
    """One row's constraint work: charged per step, refused past STEP_CPU_S or ROW_CPU_S."""

    def __init__(self) -> None:
        self.spent_s = 0.0

    @contextlib.contextmanager
    def step(self, what: str = "the constraint", earlier_s: float = 0.0) -> Iterator[None]:
        """`earlier_s`: work done for this step beforehand (masks computed while the forward ran)."""
        cpu, wall = time.thread_time(), time.monotonic()
        yield
        took = time.thread_time() - cpu + earlier_s
        waited = time.monotonic() - wall + earlier_s
        self.spent_s += took
        if took > STEP_CPU_S or waited > STEP_CPU_S * WALL_FACTOR:
            raise WorkBudgetError(
                f"{what} took {max(took, waited / WALL_FACTOR):.2f} s of one decoding step (at most {STEP_CPU_S:g} s "
                "per row, so no request slows the others): the request left the batch"
            )
        if self.spent_s > ROW_CPU_S:
            raise WorkBudgetError(
                f"{what} took {self.spent_s:.1f} s over this answer (at most {ROW_CPU_S:g} s per row): "
                "the request left the batch"
            )


# A walk of text through the constraint outside decoding (/next_token's prefix, /check, /reason): its CPU.
WALK_CPU_S = 10.0
_walk_limit: ContextVar[float | None] = ContextVar("walk_limit", default=None)


@contextlib.contextmanager
def walking(what: str) -> Iterator[None]:
    """Within this block, `walked()` refuses to go on past WALK_CPU_S of this thread's CPU."""
    with bound(_walk_limit, time.thread_time() + WALK_CPU_S):
        yield


def walked() -> None:
    """One more position walked: a WorkBudgetError when the walk is past its budget."""
    limit = _walk_limit.get()
    if limit is not None and time.thread_time() > limit:
        raise WorkBudgetError(
            f"walking the text through the constraint took more than {WALK_CPU_S:g} s of CPU; send a shorter one"
        )


def deadline() -> float:
    """When a request starting now must be done (monotonic clock)."""
    return time.monotonic() + REQUEST_WALL_S


def past_deadline() -> WorkBudgetError:
    return WorkBudgetError(f"the request ran past its wall-clock bound of {REQUEST_WALL_S:g} s and was stopped")
