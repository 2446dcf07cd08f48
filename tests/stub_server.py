"""A tiny local HTTP server for what our own server never does: ignore a constraint, answer garbage.

It records every request (path, headers, JSON body), so tests also check the exact payload a provider
sends. Routes map "METHOD /path" to a Reply, or to a callable that builds one from the request body.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 422: "Unprocessable Entity", 500: "Internal Server Error"}


@dataclass
class StubReply:
    """A canned answer: JSON (dict/list), raw text, or a list of server-sent events."""

    status: int = 200
    json: Any = None
    text: str | None = None
    events: list[Any] | None = None
    content_type: str = "application/json"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


Route = StubReply | Callable[[Any], StubReply]


@dataclass
class StubServer:
    """Serve `routes` on 127.0.0.1 in a daemon thread; `requests` lists what arrived."""

    routes: dict[str, Route]
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def last(self, path: str) -> Recorded:
        """The most recent request to `path`."""
        return next(r for r in reversed(self.requests) if r.path == path)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler_for(stub: StubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output clean
            return

        def do_GET(self) -> None:
            self._answer("GET", None)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode() if length else ""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw
            self._answer("POST", body)

        def _answer(self, method: str, body: Any) -> None:
            try:
                self._reply(method, body)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client gave up first (a timeout test); nothing to answer

        def _reply(self, method: str, body: Any) -> None:
            stub.requests.append(Recorded(method, self.path, dict(self.headers), body))
            route = stub.routes.get(f"{method} {self.path}")
            reply = StubReply(404, {"error": f"no stub route for {method} {self.path}"}) if route is None else route
            if callable(reply):
                reply = reply(body)
            if reply.events is not None:
                self._stream(reply)
                return
            payload = reply.text if reply.text is not None else json.dumps(reply.json)
            data = payload.encode()
            self.send_response(reply.status, _REASONS.get(reply.status, "Status"))
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, reply: StubReply) -> None:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in _sse(reply.events or []):
                self.wfile.write(event)
                self.wfile.flush()
            self.close_connection = True

    return Handler


def _sse(events: list[Any]) -> Iterator[bytes]:
    for event in events:
        data = event if isinstance(event, str) else json.dumps(event)
        yield f"data: {data}\n\n".encode()


# --- canned answers of an OpenAI-style server and of TGI that ignore any constraint ----------------


def chat_completion(
    text: str, *, finish_reason: str = "stop", logprobs: list[tuple[str, float]] | None = None, n: int = 1
) -> dict[str, Any]:
    """An OpenAI chat completion with `n` identical choices and optional per-token logprobs."""
    content = None
    if logprobs is not None:
        content = [
            {
                "token": t,
                "logprob": lp,
                "bytes": list(t.encode()),
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())}],
            }
            for t, lp in logprobs
        ]
    choice = {
        "message": {"role": "assistant", "content": text},
        "finish_reason": finish_reason,
        "logprobs": {"content": content} if content is not None else None,
    }
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub-model",
        "choices": [{"index": i, **copy.deepcopy(choice)} for i in range(n)],
        "usage": {"prompt_tokens": 7, "completion_tokens": len(logprobs or []) or 3, "total_tokens": 10},
    }


def completion(text: str, *, finish_reason: str = "stop", logprobs: list[tuple[str, float]] | None = None) -> dict:
    """An OpenAI (vLLM) text completion, with the completions API's parallel logprob lists."""
    lists = None
    if logprobs is not None:
        lists = {
            "tokens": [t for t, _ in logprobs],
            "token_logprobs": [lp for _, lp in logprobs],
            "top_logprobs": [{t: lp, "zz": lp - 2.0} for t, lp in logprobs],
            "text_offset": [sum(len(t) for t, _ in logprobs[:i]) for i in range(len(logprobs))],
        }
    return {
        "id": "cmpl-stub",
        "object": "text_completion",
        "created": 0,
        "model": "stub-model",
        "choices": [{"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": lists}],
        "usage": {"prompt_tokens": 4, "completion_tokens": len(logprobs or []) or 3, "total_tokens": 7},
    }


def chat_chunks(pieces: list[str]) -> list[Any]:
    """An OpenAI chat stream of `pieces`, a usage chunk and [DONE]."""
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub-model"}
    chunks: list[Any] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    ]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        chunks.append(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": piece},
                        "finish_reason": "stop" if last else None,
                        "logprobs": {"content": [{"token": piece, "logprob": -0.5, "top_logprobs": []}]},
                    }
                ],
            }
        )
    chunks.append(
        {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": len(pieces), "total_tokens": 5 + len(pieces)},
        }
    )
    chunks.append("[DONE]")
    return chunks


def tgi_generation(text: str, *, finish_reason: str = "eos_token") -> dict[str, Any]:
    """TGI's /generate answer with details, one token per character."""
    tokens = [{"id": 100 + i, "text": ch, "logprob": -0.25, "special": False} for i, ch in enumerate(text)]
    return {
        "generated_text": text,
        "details": {
            "finish_reason": finish_reason,
            "generated_tokens": len(tokens),
            "seed": None,
            "prefill": [],
            "tokens": tokens,
        },
    }


def models_list(*ids: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": i, "object": "model", "owned_by": "stub"} for i in ids]}


def tgi_info(model_id: str = "stub/tgi-model") -> dict[str, Any]:
    return {
        "model_id": model_id,
        "max_input_tokens": 1000,
        "max_total_tokens": 2048,
        "max_best_of": 2,
        "max_stop_sequences": 4,
        "max_concurrent_requests": 8,
        "validation_workers": 1,
        "max_client_batch_size": 4,
        "router": "text-generation-router",
        "version": "stub",
    }


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, Route]], StubServer]]:
    """Start stub servers for one test (import this fixture into the test module); stopped after it."""
    servers: list[StubServer] = []

    def start(routes: dict[str, Route]) -> StubServer:
        servers.append(StubServer(routes))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
