"""What an engine has generated, counted for a /metrics scrape (TGI's metric names; see playground.server.metrics).

One EngineStats per engine, updated by `Engine.stream` from the threads that read generations (the API's, the UI's):
requests started, finished and failed (by error type), prompt and generated lengths, and the times TGI reports.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass, field

from playground.types import GenerationResult

# Seconds the request waited for an admission slot before it reached the engine: set by the server's admission
# gate in the request's context (which its generation thread copies), so the durations count from the request's
# arrival, as TGI's do. Zero where nothing gates (the UI, the widget).
ADMISSION_WAIT_S: ContextVar[float] = ContextVar("admission_wait_s", default=0.0)
SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)


@dataclass
class Histogram:
    """Prometheus' histogram: counts per upper bound (cumulated when rendered), their sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(le, count of observations <= le) for each bound and infinity."""
        out, running = [], 0
        for bound, count in zip([*self.bounds, math.inf], self.counts):
            running += count
            out.append((bound, running))
        return out


class EngineStats:
    """An engine's counters and histograms; every method is safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = 0
        self.succeeded = 0
        self.failed: Counter[str] = Counter()  # by error type ("cancelled": the reader left before the end)
        self.finish_reasons: Counter[str] = Counter()
        self.input_length = Histogram(TOKENS)
        self.generated_tokens = Histogram(TOKENS)
        self.duration_s = Histogram(SECONDS)
        self.time_to_first_token_s = Histogram(SECONDS)
        self.prompt_tokens_total = 0
        self.generated_tokens_total = 0

    def start(self) -> None:
        with self._lock:
            self.started += 1

    def finish(self, result: GenerationResult) -> None:
        generated = result.best.generated_tokens + sum(s.generated_tokens for s in result.best_of_sequences)
        waited = ADMISSION_WAIT_S.get()
        with self._lock:
            self.succeeded += 1
            self.finish_reasons[result.best.finish_reason] += 1
            self.input_length.observe(result.input_length)
            self.generated_tokens.observe(generated)
            self.duration_s.observe(waited + result.timings.total_s)
            self.time_to_first_token_s.observe(waited + result.timings.time_to_first_token_s)
            self.prompt_tokens_total += result.input_length
            self.generated_tokens_total += generated

    def fail(self, error_type: str) -> None:
        with self._lock:
            self.failed[error_type] += 1

    def snapshot(self) -> EngineStats:
        """A consistent copy to render (the live one keeps counting)."""
        copy = EngineStats()
        with self._lock:
            for name, value in vars(self).items():
                if name != "_lock":
                    setattr(copy, name, _copied(value))
        return copy


def _copied(value: object) -> object:
    if isinstance(value, Histogram):
        twin = Histogram(value.bounds)
        twin.counts, twin.total, twin.count = list(value.counts), value.total, value.count
        return twin
    return Counter(value) if isinstance(value, Counter) else value
