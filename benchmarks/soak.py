"""Soak: minutes of mixed benign and hostile traffic against one server; does it stay up, bounded and fair?

python -m benchmarks.soak [--minutes 3] [--clients 6] [--model embedded] [--threads 1] [--flags "..."]
Starts app.py (real HTTP, no UI) and runs `--clients` threads for `--minutes`, each drawing requests from
a fixed mix: constrained generations, chat, streams, /check, /inspect, /tokenize, and hostile ones (a
grammar that crashes native parsers, an exponential schema, tool floods, malformed history, long
debugger prefixes, wrong keys...). A separate thread polls /health. Prints a line per minute, then one
JSON line of figures last: requests and answers by status, 5xx and transport errors (a dead server shows
there), benign latency p50/p99, the slowest /health, and the server's memory (its own RSS and its compile
workers' and sandboxes').
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import statistics
import threading
import time
from collections import Counter
from typing import Any

import httpx
import psutil

from benchmarks.serve import server

CRASH_GRAMMAR = "start: r0\n" + "\n".join(f'r{i}: r{i + 1} "a"' for i in range(3000)) + '\nr3000: "b"\n'
DEFS: dict[str, Any] = {"d0": {"type": "integer"}}
for _k in range(1, 21):
    DEFS[f"d{_k}"] = {"allOf": [{"$ref": f"#/$defs/d{_k - 1}"}, {"$ref": f"#/$defs/d{_k - 1}"}]}
EXPONENTIAL = {"$defs": DEFS, "$ref": "#/$defs/d20"}
USER = [{"role": "user", "content": "Give me a short answer."}]


def _tool(i: int, size: int) -> dict:
    return {"type": "function", "function": {"name": f"t{i}", "description": "é" * size, "parameters": {}}}


def _gen(grammar: dict | None, tokens: int = 12, inputs: str = "Answer:") -> dict:
    parameters: dict[str, Any] = {"max_new_tokens": tokens}
    if grammar:
        parameters["grammar"] = grammar
    return {"inputs": inputs, "parameters": parameters}


# (name, benign, method, path, body, headers)
MIX: list[tuple[str, bool, str, str, Any, dict]] = [
    ("regex", True, "POST", "/generate", _gen({"type": "regex", "value": "[a-z]+( [a-z]+){2,5}\\."}), {}),
    (
        "schema",
        True,
        "POST",
        "/generate",
        _gen(
            {"type": "json", "value": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
        ),
        {},
    ),  # noqa: E501
    ("chat", True, "POST", "/v1/chat/completions", {"messages": USER, "max_tokens": 12}, {}),
    ("stream", True, "POST", "/generate_stream", _gen(None, 12), {}),
    ("check", True, "POST", "/check", {"grammar": {"type": "regex", "value": "[0-9]+"}, "text": "123"}, {}),
    ("inspect", True, "POST", "/inspect", {"grammar": {"type": "regex", "value": "(yes|no)"}}, {}),
    ("tokenize", True, "POST", "/tokenize", {"inputs": "hello world " * 20}, {}),
    ("crash_grammar", False, "POST", "/generate", _gen({"type": "grammar", "value": CRASH_GRAMMAR}, 1), {}),
    ("crash_inspect", False, "POST", "/inspect", {"grammar": {"type": "grammar", "value": CRASH_GRAMMAR}}, {}),
    ("exponential_schema", False, "POST", "/generate", _gen({"type": "json", "value": EXPONENTIAL}, 4), {}),
    (
        "exponential_check",
        False,
        "POST",
        "/check",
        {"grammar": {"type": "json", "value": EXPONENTIAL}, "text": "5"},
        {},
    ),  # noqa: E501
    (
        "tool_flood",
        False,
        "POST",
        "/v1/chat/completions",
        {"messages": USER, "tools": [_tool(i, 15_000) for i in range(64)]},
        {},
    ),  # noqa: E501
    (
        "bad_tool_calls",
        False,
        "POST",
        "/v1/chat/completions",
        {
            "messages": [*USER, {"role": "assistant", "tool_calls": [{"function": {"name": "t0"}}]}],
            "tools": [_tool(0, 10)],
        },
        {},
    ),  # noqa: E501
    (
        "long_prefix",
        False,
        "POST",
        "/next_token",
        {"inputs": "Count:", "prefix": "1" * 4096, "parameters": {"grammar": {"type": "regex", "value": "[0-9]*"}}},
        {},
    ),  # noqa: E501
    (
        "backtracking",
        False,
        "POST",
        "/check",
        {"grammar": {"type": "regex", "value": "(a+)+b"}, "text": "a" * 5000},
        {},
    ),
    ("big_tokenize", False, "POST", "/tokenize", {"inputs": "\u4e00" * 131_072}, {}),
    ("long_prompt", False, "POST", "/generate", _gen(None, 1, "lorem ipsum " * 1500), {}),
    ("wrong_key", False, "GET", "/info", None, {"Authorization": "Bearer guess", "X-Forwarded-For": "10.0.0.9"}),
]


def _memory_mb(pid: int) -> tuple[float, float]:
    """(the server's RSS, its children's RSS together) in MB."""
    try:
        proc = psutil.Process(pid)
        children = sum(c.memory_info().rss for c in proc.children(recursive=True) if c.is_running())
        return proc.memory_info().rss / 2**20, children / 2**20
    except psutil.Error:
        return 0.0, 0.0


def _client(url: str, seed: int, until: float, out: dict[str, Any], lock: threading.Lock) -> None:
    rng = random.Random(seed)
    with httpx.Client(timeout=660) as http:
        while time.monotonic() < until:
            name, benign, method, path, body, headers = rng.choice(MIX)
            start = time.monotonic()
            try:
                reply = http.request(method, url + path, json=body, headers=headers)
                status = str(reply.status_code)
            except httpx.HTTPError as exc:
                status = f"transport:{type(exc).__name__}"
            took = time.monotonic() - start
            with lock:
                out["statuses"][status] += 1
                out["by_kind"][f"{name}:{status}"] += 1
                if benign and status == "200":
                    out["benign_s"].append(took)


def _health(url: str, until: float, out: dict[str, Any]) -> None:
    with httpx.Client(timeout=60) as http:
        while time.monotonic() < until:
            start = time.monotonic()
            try:
                http.get(url + "/health")
            except httpx.HTTPError:
                out["health_failures"] += 1
            out["health_max_s"] = max(out["health_max_s"], time.monotonic() - start)
            time.sleep(0.5)


def soak(url: str, pid: int, minutes: float, clients: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "statuses": Counter(),
        "by_kind": Counter(),
        "benign_s": [],
        "health_max_s": 0.0,
        "health_failures": 0,
    }
    lock = threading.Lock()
    rss_start, children_start = _memory_mb(pid)
    until = time.monotonic() + minutes * 60
    threads = [threading.Thread(target=_client, args=(url, i, until, out, lock)) for i in range(clients)]
    threads.append(threading.Thread(target=_health, args=(url, until, out)))
    for thread in threads:
        thread.start()
    peak, children_peak, started = rss_start, children_start, time.monotonic()
    while any(t.is_alive() for t in threads):
        time.sleep(5)
        rss, children = _memory_mb(pid)
        peak, children_peak = max(peak, rss), max(children_peak, children)
        if int(time.monotonic() - started) % 60 < 5:
            print(f"{(time.monotonic() - started) / 60:4.1f} min: {dict(out['statuses'])} rss {rss:.0f} MB", flush=True)
    rss_end, children_end = _memory_mb(pid)
    statuses, benign = out["statuses"], sorted(out["benign_s"])
    return {
        "minutes": minutes,
        "clients": clients,
        "requests": sum(statuses.values()),
        "statuses": dict(statuses),
        "errors_5xx": sum(n for s, n in statuses.items() if s.startswith("5")),
        "transport_errors": sum(n for s, n in statuses.items() if s.startswith("transport")),
        "server_alive": psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE,
        "benign_ok": len(benign),
        "benign_p50_s": round(statistics.median(benign), 3) if benign else None,
        "benign_p99_s": round(benign[min(len(benign) - 1, int(0.99 * len(benign)))], 3) if benign else None,
        "health_max_s": round(out["health_max_s"], 3),
        "health_failures": out["health_failures"],
        "rss_start_mb": round(rss_start), "rss_peak_mb": round(peak), "rss_end_mb": round(rss_end),
        "children_rss_peak_mb": round(children_peak), "children_rss_end_mb": round(children_end),
        "by_kind": dict(sorted(out["by_kind"].items())),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--flags", default="", help="more app.py flags, e.g. '--max-concurrent 4'")
    args = parser.parse_args()
    with server(args.model, args.threads, *shlex.split(args.flags)) as (url, pid):
        figures = soak(url, pid, args.minutes, args.clients)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
