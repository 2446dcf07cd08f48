"""/health tells a stuck engine from a busy one: 503 while running work has not moved for --stall-timeout."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.support import REPO_ROOT

PLUGINS = str(REPO_ROOT / "tests" / "plugins")


def health_until(url: str, status: int) -> httpx.Response:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        response = httpx.get(f"{url}/health", timeout=10)
        if response.status_code == status:
            return response
        time.sleep(0.1)
    raise AssertionError(f"/health never answered {status}; last: {response.status_code} {response.text}")


def test_health_is_503_while_the_engine_is_stuck_and_ok_after(start_server, tmp_path: Path) -> None:
    url = start_server(
        "--no-ui", "--stall-timeout", "1", "--custom-modules", "sp_gate_plugin", env={"PYTHONPATH": PLUGINS}
    )
    gate = tmp_path / "open"
    body = {
        "inputs": "Hello",
        "parameters": {"max_new_tokens": 1, "logits_processors": [{"name": "wait_for_file", "params": [str(gate)]}]},
    }
    with ThreadPoolExecutor(max_workers=1) as pool:
        stuck = pool.submit(httpx.post, f"{url}/generate", json=body, timeout=180)
        unhealthy = health_until(url, 503)
        assert unhealthy.json()["error_type"] == "unhealthy"
        assert "the engine has made no progress for" in unhealthy.json()["error"]
        gate.touch()
        assert stuck.result().status_code == 200
    assert health_until(url, 200).json()["status"] == "ok"
