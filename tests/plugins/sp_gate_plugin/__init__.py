"""Test plugin: `wait_for_file` holds each decode step until a file exists, so a test decides when work moves.

Params: `[gate]` or `[gate, marker]`. The gate is a path; the step waits (up to two minutes) until it
exists. The marker, when given, gets a line on the first step, so a test can tell whether a request
ever reached the model.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from playground.processors import register_factory

MAX_WAIT_S = 120.0


class WaitForFile:
    """A logits processor that changes nothing and waits for the gate file before every step."""

    def __init__(self, gate: Path, marker: Path | None) -> None:
        self.gate = gate
        self.marker = marker
        self.started = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.marker is not None and not self.started:
            with self.marker.open("a") as handle:
                handle.write("reached the model\n")
        self.started = True
        deadline = time.monotonic() + MAX_WAIT_S
        while not self.gate.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return scores


def wait_for_file(params: list[str], tokenizer: Any) -> WaitForFile:
    if len(params) not in (1, 2):
        raise ValueError(f"wait_for_file takes [gate] or [gate, marker], got {params!r}")
    return WaitForFile(Path(params[0]), Path(params[1]) if len(params) == 2 else None)


register_factory("wait_for_file", wait_for_file, description="Test plugin: each step waits until a file exists.")
