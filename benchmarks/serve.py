"""The server as users meet it: concurrent constrained clients, a long chat's 5th turn, fast-forward.

python -m benchmarks.serve [--runs 3] [--tokens 24] [--model embedded] [--threads 1] [--flags "..."]
Starts app.py on 127.0.0.1 (real HTTP), once with the prefix cache and once without, and prints a table,
then one JSON line of figures last. Ratios are measured in the same run, the counts of clients taking turns
run by run; figures are medians over runs, timed on the wall clock (the server is another process).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = (1, 4, 8, 16)
FIXED_KEYS = {
    "type": "object",
    "properties": {
        name: {"type": "integer", "minimum": 0, "maximum": 9}
        for name in (
            "customer_account_identification_number",
            "customer_shipping_address_verification_status",
            "customer_preferred_communication_channel_code",
            "customer_loyalty_programme_membership_tier",
        )
    },
    "required": [
        "customer_account_identification_number",
        "customer_shipping_address_verification_status",
        "customer_preferred_communication_channel_code",
        "customer_loyalty_programme_membership_tier",
    ],
    "additionalProperties": False,
}
SYSTEM = (
    "You are the support assistant of a bicycle shop. You answer briefly and politely, you never invent "
    "prices, and you ask for the order number when a customer asks about a delivery. "
)
QUESTIONS = [
    "Do you repair electric bikes?",
    "How long does a tyre change take?",
    "Can I bring my own parts?",
    "Do you sell helmets for children?",
    "What are your opening hours on Saturday?",
]
# One client for every request, as a load generator keeps its connection pool: `httpx.post` builds a client per
# call, whose TLS context (the CA bundle, even for plain HTTP) costs ~35 ms of CPU on the cores the server uses.
HTTP = httpx.Client(timeout=600)


def _client_grammar(i: int) -> dict:
    """Each client its own constraint: a regex or a small schema."""
    if i % 2:
        return {"type": "regex", "value": rf"(Order|Ticket) {i}-[0-9]{{4}}: [a-z]+( [a-z]+){{3,12}}\."}
    schema = {
        "type": "object",
        "properties": {f"field_{i}": {"type": "string", "maxLength": 40}, "ok": {"type": "boolean"}},
        "required": [f"field_{i}", "ok"],
    }
    return {"type": "json", "value": schema}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def healthy(
    command: list[str], port: int, env: dict[str, str], name: str, limit_s: float = 300
) -> Iterator[tuple[str, int]]:
    """`command` serving on 127.0.0.1:`port`, once its /health answers 200; yields (base URL, pid)."""
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"{name} exited: {log.read().decode(errors='replace')[-3000:]}")
            try:
                if HTTP.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@contextmanager
def server(model: str, threads: int, *flags: str) -> Iterator[tuple[str, int]]:
    """app.py on a free port; yields (base URL, pid)."""
    port = free_port()
    args = ["--no-ui", "--host", "127.0.0.1", "--port", str(port), "--model", model, "--threads", str(threads)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}
    with healthy([sys.executable, "app.py", *args, *flags], port, env, "app.py") as running:
        yield running


def rss_mb(pid: int) -> float:
    """The server's resident memory."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def idle_rss_mb(url: str, pid: int, settle_s: float = 2.0) -> float:
    """The server's resident memory once its batch is empty and it has settled (what it keeps, not what it used)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        batch = HTTP.get(f"{url}/info", timeout=30).json()["batch"]
        if not batch["requests"] and not batch["joining"]:
            break
        time.sleep(0.2)
    time.sleep(settle_s)
    return rss_mb(pid)


def generate(url: str, parameters: dict, inputs: str) -> tuple[float, int]:
    """(latency s, generated tokens) of one /generate."""
    start = time.perf_counter()
    reply = HTTP.post(f"{url}/generate", json={"inputs": inputs, "parameters": parameters})
    reply.raise_for_status()
    return time.perf_counter() - start, reply.json()["details"]["generated_tokens"]


def concurrent(url: str, clients: int, tokens: int) -> tuple[float, float, float]:
    """(aggregate tokens/s, p50 latency, p90 latency) of `clients` constrained requests at once."""

    def one(i: int) -> tuple[float, int]:
        params = {"grammar": _client_grammar(i), "max_new_tokens": tokens, "details": True}
        return generate(url, params, f"Client {i} asks: write the record for order {i}.")

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, range(clients)))
    wall = time.perf_counter() - start
    latencies = sorted(r[0] for r in results)
    return sum(r[1] for r in results) / wall, latencies[len(latencies) // 2], latencies[int(0.9 * (len(latencies) - 1))]


def fifth_turn_ttft(url: str, session: int, tokens: int) -> tuple[float, int]:
    """(time to first token, prompt tokens) of the 5th turn of a ~1,000-token chat; the server answers 1-4."""
    messages = [{"role": "system", "content": f"Session {session}. " + SYSTEM * 23}]
    ttft, prompt_tokens = 0.0, 0
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        body = {
            "messages": messages,
            "max_tokens": tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        start = time.perf_counter()
        answer, first = "", None
        with HTTP.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
            for line in reply.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                prompt_tokens = (chunk.get("usage") or {}).get("prompt_tokens", prompt_tokens)
                delta = chunk["choices"][0]["delta"].get("content") if chunk.get("choices") else None
                if delta:
                    first = first or time.perf_counter()
                    answer += delta
        ttft = (first or time.perf_counter()) - start
        messages.append({"role": "assistant", "content": answer})
    return ttft, prompt_tokens


def fast_forward(url: str, on: bool) -> float:
    """Decode tokens/s on a schema of long fixed keys, with fast-forward on or off."""
    params = {"grammar": {"type": "json", "value": FIXED_KEYS}, "max_new_tokens": 120, "fast_forward": on}
    params["details"] = True
    body = {"inputs": "A customer record as JSON:", "parameters": params}
    reply = HTTP.post(f"{url}/generate", json=body).json()
    return reply["timings"]["tokens_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--flags", default="", help="more app.py flags for the servers, e.g. '--cpu-batch-weights off'")
    args = parser.parse_args()
    extra = tuple(shlex.split(args.flags))
    med = statistics.median
    figures: dict[str, object] = {"model": args.model, "threads": args.threads, "runs": args.runs, "flags": args.flags}
    busy = ("--max-concurrent", "16", "--max-queue", "64", *extra)
    with server(args.model, args.threads, *busy) as (url, pid):
        for i in range(max(CLIENTS)):  # warm: every client's constraint compiled (and cached) once
            generate(url, {"grammar": _client_grammar(i), "max_new_tokens": 1, "details": True}, "warm up")
        rss_before = idle_rss_mb(url, pid)
        figures["batch_weights_mb"] = HTTP.get(f"{url}/info", timeout=30).json()["batch"]["batch_weights_mb"]
        # the counts of clients take turns, run by run: a host whose speed drifts moves them together
        rounds: dict[int, list[tuple[float, float, float]]] = {clients: [] for clients in CLIENTS}
        for _ in range(args.runs):
            for clients in CLIENTS:
                rounds[clients].append(concurrent(url, clients, args.tokens))
        for clients, runs in rounds.items():
            figures[f"c{clients}_tok_s"] = round(med(r[0] for r in runs), 2)
            figures[f"c{clients}_p50_s"] = round(med(r[1] for r in runs), 2)
            figures[f"c{clients}_p90_s"] = round(med(r[2] for r in runs), 2)
        rss_after = idle_rss_mb(url, pid)
        held_mb = HTTP.get(f"{url}/info", timeout=30).json()["prefix_cache"]["bytes"] / 2**20
        figures["rss_mb_before"] = round(rss_before, 1)
        figures["rss_mb_after_16"] = round(rss_after, 1)
        figures["prefix_cache_mb_held"] = round(held_mb, 1)
        figures["rss_growth_pct"] = round(100 * (rss_after / rss_before - 1), 1)
        # what the prefix cache keeps on purpose (bounded by --prefix-cache-tokens) is not a leak
        figures["rss_growth_beyond_prefix_cache_pct"] = round(100 * ((rss_after - held_mb) / rss_before - 1), 1)
        fast_forward(url, True)
        ff = [(fast_forward(url, True), fast_forward(url, False)) for _ in range(args.runs)]
        figures["fast_forward_tok_s"] = round(med(r[0] for r in ff), 2)
        figures["plain_tok_s"] = round(med(r[1] for r in ff), 2)
        cached = [fifth_turn_ttft(url, 100 + i, 16) for i in range(args.runs)]
    with server(args.model, args.threads, "--prefix-cache-tokens", "0", *extra) as (url, _):
        uncached = [fifth_turn_ttft(url, 100 + i, 16) for i in range(args.runs)]
    figures["chat_tokens_5th_turn"] = cached[0][1]
    figures["ttft_5th_turn_cached_s"] = round(med(c[0] for c in cached), 3)
    figures["ttft_5th_turn_uncached_s"] = round(med(u[0] for u in uncached), 3)
    figures["prefix_cache_ttft_speedup"] = round(
        figures["ttft_5th_turn_uncached_s"] / figures["ttft_5th_turn_cached_s"], 2
    )
    figures["fast_forward_vs_plain"] = round(figures["fast_forward_tok_s"] / figures["plain_tok_s"], 3)
    figures["concurrent8_vs_single"] = round(figures["c8_tok_s"] / figures["c1_tok_s"], 3)
    figures["p50_8_vs_single"] = round(figures["c8_p50_s"] / figures["c1_p50_s"], 2)
    for key, value in figures.items():
        print(f"{key:>28}  {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
