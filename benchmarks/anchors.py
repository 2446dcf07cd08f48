"""Our server against llama.cpp's on the same GGUF and the same JSON schema, one thread each.

python -m benchmarks.anchors --llama-server PATH [--runs 3] [--tokens 48] [--clients 8]
(`make anchors` builds llama.cpp's server from the llama-cpp-python source package and runs this.)
Both servers get the same OpenAI chat request (`response_format` json_schema, greedy) over real HTTP on
127.0.0.1: llama.cpp turns the schema into its GBNF grammar, we into our constraint engine. The rounds
alternate between the servers (the idle one takes no CPU), one client alone and then `--clients` at once
(llama.cpp's continuous batching with as many parallel slots). Figures are aggregate completion tokens/s
on the wall clock, medians over runs; `engine_vs_llamacpp` is ours over theirs, measured in the same run.
Prints a table, then one JSON line of figures last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from benchmarks.serve import HTTP, free_port, healthy, server
from playground.models import embedded_gguf_path

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "city": {"type": "string"},
        "age": {"type": "integer"},
        "hobbies": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "summary": {"type": "string"},
    },
    "required": ["name", "city", "age", "hobbies", "summary"],
}
PROMPTS = [
    "Invent a person who lives by the sea and describe them as JSON.",
    "Describe a retired teacher from a mountain village as JSON.",
    "Make up a young chef in a big city and give their record as JSON.",
    "Describe a bicycle mechanic as JSON.",
]


@contextmanager
def llama_server(binary: Path, gguf: Path, threads: int, slots: int) -> Iterator[str]:
    """llama.cpp's server on a free port, `slots` parallel sequences; yields its base URL."""
    port = free_port()
    args = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--jinja"]
    args += ["--threads", str(threads), "--threads-batch", str(threads), "--parallel", str(slots)]
    # --no-repack: llama.cpp's AMX kernels, picked where the CPU lists AMX, crash on this GGUF where the kernel
    # does not grant AMX to the process (seen on the development VM); Q4_1 is not repacked for AVX2/AVX-512
    args += ["--ctx-size", str(1024 * slots), "--no-webui", "--no-repack"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with healthy(args, port, env, "llama-server", limit_s=120) as (url, _):
        yield url


def ask(url: str, prompt: str, tokens: int) -> int:
    """One schema-constrained chat completion; the completion tokens it made."""
    body = {
        "model": "embedded",  # ours serves it by that name; llama.cpp serves its one model whatever the name
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": tokens,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}},
    }
    reply = HTTP.post(f"{url}/v1/chat/completions", json=body)
    reply.raise_for_status()
    return int(reply.json()["usage"]["completion_tokens"])


def throughput(url: str, clients: int, tokens: int) -> float:
    """Aggregate completion tokens/s of `clients` requests at once (one: a lone stream)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        made = list(pool.map(lambda i: ask(url, PROMPTS[i % len(PROMPTS)], tokens), range(clients)))
    return sum(made) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", type=Path, required=True, help="llama.cpp's llama-server binary")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if not args.llama_server.is_file():
        raise SystemExit(f"{args.llama_server} is not a file: `make anchors` builds llama.cpp's server first")
    gguf = embedded_gguf_path()
    med = statistics.median
    figures: dict[str, object] = {"gguf": gguf.name, "threads": args.threads, "runs": args.runs, "tokens": args.tokens}
    busy = ("--max-concurrent", str(args.clients), "--max-queue", str(4 * args.clients))
    with (
        server("embedded", args.threads, *busy) as (ours, _),
        llama_server(args.llama_server, gguf, args.threads, args.clients) as theirs,
    ):
        for url in (ours, theirs):  # warm: the schema compiled, the first forwards paid
            throughput(url, 1, 4)
        rounds: dict[str, list[float]] = {}
        for _ in range(args.runs):
            for clients in (1, args.clients):
                for name, url in (("engine", ours), ("llamacpp", theirs)):
                    rounds.setdefault(f"{name}_c{clients}_tok_s", []).append(throughput(url, clients, args.tokens))
    speed = {key: med(values) for key, values in rounds.items()}
    figures.update({key: round(value, 2) for key, value in speed.items()})
    for clients, label in ((1, "single"), (args.clients, str(args.clients))):
        ratio = speed[f"engine_c{clients}_tok_s"] / speed[f"llamacpp_c{clients}_tok_s"]
        figures[f"engine_vs_llamacpp_{label}"] = round(ratio, 3)
    for key, value in figures.items():
        print(f"{key:>28}  {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
