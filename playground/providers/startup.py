"""The operator's model loading on a thread of its own, so the server answers (and the page shows) at once.

A Space's cold start downloads the model or converts a GGUF for tens of seconds; meanwhile the page says
so, /health answers 503 "loading", and a request for that model waits for it (up to a limit).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from playground.errors import ModelError, ModelLoadingError, first_line

log = logging.getLogger("playground.providers")
LOADING_WAIT_S = 120.0  # how long a request waits for the model before it is told to come back


class Startup:
    """One background load: its name, when it began, and how it ended."""

    def __init__(self, name: str, load: Callable[[], Any], clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._load = load
        self._clock = clock
        self._started = clock()
        self._took: float | None = None
        self._done = threading.Event()
        self.error: str | None = None

    def start(self) -> None:
        """Run the load on its own thread; its failure is kept (and shown) instead of ending the server."""
        self._started = self._clock()

        def run() -> None:
            try:
                self._load()
            except Exception as exc:  # noqa: BLE001 - the page and every request say why, the server stays up
                log.exception("loading %s failed", self.name)
                self.error = first_line(exc)
            self._took = self._clock() - self._started
            self._done.set()

        threading.Thread(target=run, name="model-load", daemon=True).start()

    def ready(self) -> bool:
        return self._done.is_set() and self.error is None

    def wait(self, timeout_s: float = LOADING_WAIT_S) -> None:
        """Return once the model is loaded; raise ModelLoadingError past `timeout_s`, ModelError if it failed."""
        if not self._done.wait(timeout_s):
            raise ModelLoadingError(
                f"model {self.name!r} is still loading ({self.elapsed_s():.0f} s so far; a first start downloads "
                "or converts it): try again in a few seconds",
                field="model",
            )
        if self.error is not None:
            raise ModelError(f"model {self.name!r} failed to load: {self.error}", field="model")

    def elapsed_s(self) -> float:
        return self._took if self._took is not None else self._clock() - self._started

    def status(self) -> dict[str, Any]:
        """What /health and the page show: loading, ready or failed, for how long, and why it failed."""
        state = "loading" if not self._done.is_set() else "failed" if self.error else "ready"
        return {"model": self.name, "state": state, "elapsed_s": round(self.elapsed_s(), 1), "error": self.error}
