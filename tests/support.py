"""Helpers shared by the test tiers: free ports and app.py started as a real subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# axe-core for the accessibility checks: `make test` (target `axe`) fetches it from the npm registry
AXE_JS = REPO_ROOT / ".cache" / "axe-core-4.14.1" / "axe.min.js"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# How long a browser assertion retries (playwright's default, 5 s, is short while the other pytest worker
# decodes on the same 2 cores).
EXPECT_TIMEOUT_MS = 15_000
# The first start on a fresh machine dequantizes the embedded GGUF (~30 s on 2 shared cores).
START_TIMEOUT_S = float(os.environ.get("PLAYGROUND_TEST_START_TIMEOUT", "180"))
STOP_TIMEOUT_S = 12  # the server's own grace for open connections (playground.cli.SHUTDOWN_GRACE_S) and then some
# Every subprocess of the suite runs offline, single-threaded and without telemetry.
TEST_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "PLAYGROUND_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}


def free_port() -> int:
    """A port nobody listens on right now, so parallel servers never collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(overrides: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The test environment plus overrides; an override of None removes the variable."""
    env = {**os.environ, **TEST_ENV}
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_app(
    *args: str, env: Mapping[str, str | None] | None = None, cwd: Path = REPO_ROOT, program: str = "app.py"
) -> subprocess.CompletedProcess[str]:
    """`python app.py ARGS` (or another script) run to its end, output captured: for --help and start-up refusals."""
    return subprocess.run(
        [sys.executable, program, *args],
        cwd=cwd,
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=120,
    )


class LiveServer:
    """`python app.py ...` running in a subprocess, with its output kept for failure messages."""

    def __init__(
        self,
        args: list[str],
        *,
        port: int,
        env: Mapping[str, str | None] | None = None,
        cwd: Path = REPO_ROOT,
        host: str = "127.0.0.1",
    ) -> None:
        self.url = f"http://{host}:{port}"
        self.port = port
        self.args = args
        self._log = tempfile.NamedTemporaryFile(prefix="playground-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [sys.executable, "app.py", *args],
            cwd=cwd,
            env=child_env(env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def log_path(self) -> str:
        return self._log.name

    def output(self) -> str:
        """What the server printed so far (the tail), for failure messages."""
        self._log.flush()
        return Path(self._log.name).read_text(errors="replace")[-6000:]

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll GET /health until 200; fail with the server's own output when it dies or hangs."""
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                output = self.output()
                self.stop(check=False)
                raise RuntimeError(f"app.py {' '.join(self.args)} exited with {code}:\n{output}")
            try:
                response = httpx.get(f"{self.url}/health", timeout=5)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            time.sleep(0.5)
        output = self.output()
        self.stop(check=False)  # the start's own failure is the message
        raise RuntimeError(f"app.py {' '.join(self.args)} not healthy after {timeout_s:.0f} s ({last}):\n{output}")

    def stop(self, *, check: bool = True) -> None:
        """Terminate politely, then kill; always remove the log.

        With `check`, a server that outlives SIGTERM by STOP_TIMEOUT_S fails the test that stopped it: open
        connections (a browser tab's heartbeat, a stream) get a few seconds of grace, not forever.
        """
        hung = ""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                hung = self.output()
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)
        if hung and check:
            raise AssertionError(f"app.py {' '.join(self.args)} still ran {STOP_TIMEOUT_S} s after SIGTERM:\n{hung}")


def start_app(*args: str, env: Mapping[str, str | None] | None = None, cwd: Path = REPO_ROOT) -> LiveServer:
    """Start app.py on 127.0.0.1 and a free port with extra flags; returns once /health answers."""
    port = free_port()
    server = LiveServer(["--host", "127.0.0.1", "--port", str(port), *args], port=port, env=env, cwd=cwd)
    server.wait_healthy()
    return server


class TinyTokenizer:
    """The tokenizer facts the runner and the decode read, for tiny_llama: one letter per token, 0 the EOS."""

    all_special_ids = [0]
    eos_token_id = 0
    pad_token_id = None

    def __init__(self, hidden: tuple[int, ...] = (0,)) -> None:
        self.hidden = set(hidden)  # ids decoded as no text (the end-of-sequence ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(97 + i % 26) for i in ids if i not in self.hidden)

    def convert_ids_to_tokens(self, token_id: int) -> str:
        return self.decode([token_id])


def tiny_llama(**config: object):  # -> LlamaForCausalLM; transformers loads only for the tests that use it
    """A tiny random Llama (2 layers, hidden 32, grouped-query attention), seeded, in eval mode; no download."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    shape = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    return LlamaForCausalLM(LlamaConfig(**{**shape, **config})).eval()


# The debugger tests' pet: an enum, a bounded string, no other key; the embedded model fills it in ~30 tokens.
PET_SCHEMA = {
    "type": "object",
    "properties": {"kind": {"enum": ["cat", "dog"]}, "name": {"type": "string", "maxLength": 8}},
    "required": ["kind", "name"],
    "additionalProperties": False,
}
# Constraints every parse refuses as invalid, by kind: (text, words the message holds). The live check and the
# request's grammar both read them through Constraint.parse.
INVALID_CONSTRAINTS: dict[str, list[tuple[str, str]]] = {
    "json_schema": [
        ("{", "invalid JSON"),
        ('{"type": ', "JSON"),
        ('{"type": "strin"}', "not a valid JSON Schema"),
        ('{"type": "objekt"}', "not a valid JSON Schema"),
    ],
    "regex": [("(ab", "invalid regex"), ("(", "invalid regex"), ("a\\", "trailing backslash")],
    "grammar": [("start: undefined_rule", "undefined_rule"), ("", "Lark grammar")],
    "choice": [("", "non-empty list")],
    "nonsense": [("x", "unknown constraint kind")],
    "bogus": [("x", "unknown constraint kind")],
}


def table_rows(table: Mapping[Any, list[tuple]]) -> list[tuple]:
    """Parametrize rows from a table grouped by one value (a kind, an expected message): (key, *case) each."""
    return [(key, *case) for key, cases in table.items() for case in cases]


def error_of(path: str, body: dict) -> tuple[str, str]:
    """(message, error type) of an error body, checking it has the shape the route's protocol uses:
    OpenAI's `{"error": {"message", "type", "param", "code"}}` on /v1/*, TGI's `{"error", "error_type"}` elsewhere."""
    if path.startswith("/v1/"):
        error = body["error"]
        assert set(error) == {"message", "type", "param", "code"}, body
        return error["message"], error["code"]
    assert isinstance(body["error"], str), body
    return body["error"], body["error_type"]


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """An app built in this process on a real socket, for tests that watch the process's own objects while it serves."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
