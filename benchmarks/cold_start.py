"""A Space's cold start as a visitor sees it: container start -> usable page -> first answer.

python -m benchmarks.cold_start [--model embedded] [--cache DIR]
Starts app.py as a Space starts it (SPACE_ID and PORT set, so the Space's settings and hardware defaults
apply) with a fresh converted-weights cache, then again on the cache the first start filled. Each start
is timed on the wall clock from the process start: the page at / answering 200 with the loading banner
in its config, the first answer to a request sent as soon as the page answered, and /health's own
account of the load. On a shared, busy machine the wall clock stretches; the server's CPU seconds until
the page answered (page_cpu_s) are what an idle machine would spend on it. Prints a table, then one JSON
line of figures (seconds) last.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.05
LIMIT_S = 600.0
REQUEST = {"inputs": "Answer yes or no: is the sky blue?", "parameters": {"max_new_tokens": 4}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(model: str, cache: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    """app.py as a Space runs it; returns the process, its URL and when it was started."""
    port = free_port()
    env = {
        **os.environ,
        "SPACE_ID": "benchmarks/cold-start",
        "PORT": str(port),
        "PLAYGROUND_MODEL": model,
        "PLAYGROUND_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    env.pop("PLAYGROUND_THREADS", None)  # the Space's own default: the container's vCPUs
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return proc, f"http://127.0.0.1:{port}", began


def until(check: Any, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.perf_counter() + LIMIT_S
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"app.py exited with {proc.returncode}")
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(POLL_S)
    raise SystemExit(f"no answer within {LIMIT_S:g} s")


def one_start(model: str, cache: Path) -> dict[str, Any]:
    proc, url, began = start(model, cache)
    try:
        with httpx.Client(base_url=url, timeout=LIMIT_S) as client:
            until(lambda: client.get("/").status_code == 200, proc)
            page_s = time.perf_counter() - began
            cpu = psutil.Process(proc.pid).cpu_times()
            banner = "model-status" in client.get("/config").text
            loading = client.get("/health").status_code == 503
            answer = client.post("/generate", json=REQUEST)
            answer_s = time.perf_counter() - began
            if answer.status_code != 200:
                raise SystemExit(f"/generate answered {answer.status_code}: {answer.text[:200]}")
            health = client.get("/health").json()
    finally:
        proc.terminate()
        proc.wait(30)
    return {
        "page_s": round(page_s, 1),
        "page_cpu_s": round(cpu.user + cpu.system, 1),
        "page_said_loading": banner and loading,
        "first_answer_s": round(answer_s, 1),
        "model_load_s": health["startup"]["elapsed_s"],
        "answer_timings": {k: round(v, 2) for k, v in answer.json()["timings"].items() if isinstance(v, float)},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded", help="PLAYGROUND_MODEL (default: embedded, a GGUF to convert)")
    parser.add_argument("--cache", type=Path, default=None, help="an empty folder for the cache (default: a new one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
        cache = args.cache or Path(tmp)
        if any(cache.iterdir()):
            raise SystemExit(f"--cache {cache} is not empty: a cold start needs a fresh cache")
        figures = {"cold": one_start(args.model, cache), "warm": one_start(args.model, cache)}
    figures["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    figures["load_average"] = round(os.getloadavg()[0], 1)
    print(f"{'start':<6} {'page (s)':>9} {'page CPU (s)':>13} {'loading shown':>14} {'answer (s)':>11} {'load (s)':>9}")
    for name in ("cold", "warm"):
        row = figures[name]
        print(
            f"{name:<6} {row['page_s']:>9} {row['page_cpu_s']:>13} {str(row['page_said_loading']):>14} "
            f"{row['first_answer_s']:>11} {row['model_load_s']:>9}"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
