"""A request's hub load never hangs: a hub that accepts connections and never answers fails within the limit."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from tests.support import REPO_ROOT, child_env

PROBE = """
from playground.errors import ModelError
from playground.models.hub import hub_snapshot
try:
    hub_snapshot("no-org/no-model", timeout_s=2)
except ModelError as exc:
    print(exc.message)
"""


@pytest.fixture
def silent_hub() -> Iterator[str]:
    """A listener that accepts every connection and never sends a byte."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in held:
        conn.close()


def test_a_silent_hub_fails_within_the_time_limit(silent_hub: str) -> None:
    env = child_env({"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None, "HF_ENDPOINT": silent_hub})
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(
        "model 'no-org/no-model' is not in the local Hugging Face cache and the hub cannot be reached within 2 s"
    )
