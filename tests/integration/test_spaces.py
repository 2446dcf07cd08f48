"""The folder deploy.py assembles runs on its own, as a Space would run it."""

from __future__ import annotations

from pathlib import Path

import httpx

from playground.models import EMBEDDED_NAME
from tests.support import LiveServer, free_port, run_app

FLAGS = ("--model", "--host", "--port", "--providers", "--custom-modules", "--api-key")


def assemble_space(dest: Path) -> None:
    args = ("--repo-id", "someone/structured-playground", "--dry-run", "--output", str(dest))
    done = run_app(*args, program="spaces/deploy.py")
    assert done.returncode == 0, done.stderr
    assert not (dest / "tests").exists() and not (dest / "spaces").exists()


def test_assembled_space_shows_its_help_alone(tmp_path: Path) -> None:
    assemble_space(tmp_path / "space")
    done = run_app("--help", cwd=tmp_path / "space", env={"PYTHONPATH": None})
    assert done.returncode == 0, done.stderr
    assert [flag for flag in FLAGS if flag not in done.stdout] == []


def test_assembled_space_serves_on_the_space_port_on_all_interfaces(tmp_path: Path) -> None:
    assemble_space(tmp_path / "space")
    port = free_port()
    env = {
        "SPACE_ID": "someone/structured-playground",
        "PLAYGROUND_MODEL": "embedded",
        "PORT": str(port),
        "PYTHONPATH": None,
    }
    server = LiveServer([], port=port, env=env, cwd=tmp_path / "space")
    try:
        server.wait_healthy()
        # 127.0.0.2 reaches a socket bound to 0.0.0.0, never one bound to 127.0.0.1 only.
        assert httpx.get(f"http://127.0.0.2:{port}/health", timeout=10).status_code == 200
        assert httpx.get(f"{server.url}/info", timeout=10).json()["model_id"] == EMBEDDED_NAME
    finally:
        server.stop()
