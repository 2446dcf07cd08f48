"""Compile worker processes: a compile can be stopped, and its memory is bounded.

An engine compile runs native code that holds no lock we can break: in a thread it can be neither
stopped nor limited. Here each compile runs in a spawned worker process that keeps the tokenizer
(pickled to it once) and one warm backend per engine. The server waits for a free worker (that wait
is not part of the time limit), then watches the job: past the time limit, or past the memory limit
(RSS growth during the job, polled), the worker is killed and a fresh one started in the background.
The worker also limits itself (CPU seconds and address space per job), so it dies even if the server
is gone. What comes back depends on the engine (see playground.constraints.backends).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.util  # registers its exit hook (which ends the workers) before ours, so ours runs first
import os
import pickle
import queue
import resource
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil

from playground import client_scope
from playground.constraints import backends, sandbox
from playground.errors import CompileMemoryError, CompileTimeoutError
from playground.fair_queue import FairQueue
from playground.options import LOCAL

log = logging.getLogger(__name__)
_exiting = threading.Event()  # set at interpreter exit: workers still starting then are abandoned quietly
_spawning = threading.Lock()  # held while a worker process is spawned


def _stop_spawning() -> None:
    """At exit, before multiprocessing ends the live workers: no new one may start after that sweep."""
    with _spawning:
        _exiting.set()


atexit.register(_stop_spawning)


def _after_fork_in_child() -> None:
    """A forked child starts workers of its own: the lock may have been held by a parent thread at the fork."""
    global _spawning
    _spawning = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
POLL_S = 0.02
START_TIMEOUT_S = 300.0
MB = 1 << 20


@dataclass(frozen=True)
class CompileLimits:
    """What one compile may take: seconds of wall time, MB of memory beyond a warm worker, workers in all."""

    timeout_s: float = LOCAL.compile_timeout
    memory_mb: int = LOCAL.compile_memory
    workers: int = LOCAL.compile_workers

    def as_dict(self) -> dict[str, float | int]:
        """For /info."""
        return {"timeout_s": self.timeout_s, "memory_mb": self.memory_mb, "workers": self.workers}


# --- inside the worker ---------------------------------------------------------------------------


def _serve(conn: Any, engines: tuple[str, ...]) -> None:
    """A worker's life: warm `engines`, then answer jobs until the server closes the pipe. Ctrl-C (or a notebook's
    interrupt, sent to the whole process group) is for the server, which ends its workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sandbox.enter()
    try:
        tokenizer = pickle.loads(conn.recv_bytes())
        warm = {}
        for index, name in enumerate(engines):
            try:
                warm[name] = backends.worker_backend(name, tokenizer)
            except Exception:
                if index == 0:  # the engine auto tries first must read the tokenizer; the others refuse per job
                    raise
        conn.send(("ready", os.getpid()))
        while True:
            job = conn.recv()
            for message in _run(job, warm, tokenizer):
                conn.send(message)
    except (EOFError, OSError):  # the server closed the pipe, or exited: no one is left to answer
        return


def _run(job: tuple, warm: dict[str, Any], tokenizer: Any) -> Iterator[tuple]:
    """("started", warmed) once the engine is warm (warming is no part of the limits), then the reply.

    The job carries the engine's Backend (pickled by reference), so one registered after the worker
    started, in a module the worker never imported, compiles here as it would in the server.
    """
    backend, kind, text, timeout_s, memory_mb = job
    engine = backend.name
    warmed = engine not in warm
    try:
        if warmed:
            warm[engine] = backend.warmed(tokenizer)
    except Exception as exc:  # a tokenizer an engine cannot read: a refusal, not a dead worker
        yield ("started", True)
        yield ("refused", "unsupported", f"{engine} cannot read this model's tokenizer: {exc}")
        return
    yield ("started", warmed)
    _limit_self(timeout_s, memory_mb)
    try:
        # on the sandbox's small stack: what compiles here has room to spare when the server rebuilds it
        payload, warnings = sandbox.on_probe_stack(backend.compile_payload, warm[engine], kind, text)
    except backends.EngineRefusal as exc:
        reply: tuple = ("refused", exc.kind, exc.message)
    except MemoryError:
        reply = ("memory",)
    else:
        reply = ("ok", payload, warnings)
    _unlimit_self()  # warming the next job's engine may need more than this job was allowed
    yield reply


def _limit_self(timeout_s: float, memory_mb: int) -> None:
    """Kernel-enforced backstops for this job: CPU seconds (SIGXCPU) and address space (allocation fails)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(used.ru_utime + used.ru_stime + 2 * timeout_s + 5)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, resource.RLIM_INFINITY))
    # generous: the server's RSS watch is the real limit; this one also holds if the server is gone
    address_space = psutil.Process().memory_info().vms + (2 * memory_mb + 256) * MB
    resource.setrlimit(resource.RLIMIT_AS, (address_space, resource.RLIM_INFINITY))


def _unlimit_self() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


# --- in the server -------------------------------------------------------------------------------


class _Worker:
    """One worker process and the server's end of its pipe."""

    def __init__(self, tokenizer_bytes: bytes, engines: tuple[str, ...]) -> None:
        context = multiprocessing.get_context("spawn")  # fork would copy torch's and tokenizers' threads
        self.conn, child = context.Pipe()
        # The tokenizer (MBs) goes through the pipe, not the spawn arguments: a server exiting while a
        # worker starts would cut those short, and the child would print "pickle data was truncated".
        self.process = context.Process(target=_serve, args=(child, engines), daemon=True, name="playground-compile")
        with _spawning, sandbox.main_left_out():
            if _exiting.is_set():
                raise RuntimeError("the server is exiting")
            self.process.start()
        child.close()
        self.ps = psutil.Process(self.process.pid)
        self.warm_rss = 0
        self.conn.send_bytes(tokenizer_bytes)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.conn.poll(1.0):
            if not self.process.is_alive():
                raise RuntimeError(f"a compile worker exited while starting ({_exit_reason(self)})")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"a compile worker did not start within {START_TIMEOUT_S:g} s")
        self.conn.recv()
        self.warm_rss = self.rss()

    def rss(self) -> int:
        try:
            return self.ps.memory_info().rss
        except psutil.Error:
            return 0

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


class CompilePool:
    """Worker processes that compile under CompileLimits; killed and replaced when they overrun.

    Each worker starts with `engines` warm (by default the one auto tries first; the others warm at
    their first job); `workers` of them (default: the limits').
    """

    def __init__(
        self,
        tokenizer: Any,
        limits: CompileLimits,
        *,
        engines: tuple[str, ...] | None = None,
        workers: int | None = None,
    ) -> None:
        self.limits = limits
        self._engines = engines or backends.names()[:1]
        self._workers = max(1, workers or limits.workers)
        self._tokenizer_bytes = pickle.dumps(tokenizer)
        self._idle: FairQueue[_Worker] = FairQueue()  # free workers, handed out fairly between clients
        self._pids: set[int] = set()
        self._lock = threading.Lock()
        self._closed = False
        for _ in range(self._workers):
            self._replace()

    def close(self) -> None:
        """Stop every worker: the idle ones now, busy and starting ones as soon as they are back."""
        with self._lock:  # a worker that finished starting sees the flag under the same lock
            self._closed = True
        while True:
            try:
                self._retire(self._idle.get_nowait())
            except queue.Empty:
                return

    def pids(self) -> list[int]:
        """The worker processes alive now (for /info-style reports and tests)."""
        with self._lock:
            return sorted(self._pids)

    def compile(self, engine: str, kind: str, text: str) -> tuple[Any, list[str]]:
        """(payload, warnings) from a worker; raises EngineRefusal, CompileTimeoutError or CompileMemoryError."""
        what = f"compiling the {kind} with {engine}"
        client = client_scope.current()
        job = (backends.get(engine), kind, text, self.limits.timeout_s, self.limits.memory_mb)
        worker = self._take(what, job, client)
        try:
            reply = self._watch(worker, what)
            if reply[0] == "memory":
                raise self._memory_error(what)
        except BaseException:
            self._retire(worker)
            raise
        finally:
            self._idle.release(client)
        self._release(worker)
        if reply[0] == "refused":
            raise backends.EngineRefusal(reply[1], reply[2])
        return reply[1], reply[2]

    def _take(self, what: str, job: tuple, client: str) -> _Worker:
        """A free worker that took the job; one that died while idle is replaced, not this request's error."""
        for _ in range(self._workers + 2):
            try:  # waiting for a free worker does not count toward the time limit
                worker = self._idle.get(client, timeout=START_TIMEOUT_S)
            except queue.Empty:
                raise CompileTimeoutError(
                    f"{what}: no compile worker became free within {START_TIMEOUT_S:g} s"
                ) from None
            try:
                if not worker.process.is_alive():
                    raise BrokenPipeError
                worker.conn.send(job)
            except (OSError, ValueError):  # the pipe is gone: it died idle (killed, out of memory)
                log.warning("a compile worker died while idle (%s); replacing it", _exit_reason(worker))
                self._idle.release(client)
                self._retire(worker)
                continue
            return worker
        raise CompileTimeoutError(f"{what}: the compile workers keep dying")

    def _died(self, worker: _Worker, what: str) -> CompileMemoryError:
        """A worker that died in a job: killed for memory (its own limits), or crashed by the input (a 422 either way)."""
        reason = _exit_reason(worker)
        if worker.process.exitcode in (-signal.SIGSEGV, -signal.SIGBUS, -signal.SIGABRT, -signal.SIGILL):
            return CompileMemoryError(f"{what} crashed the compile worker ({reason}); the server is unaffected")
        return self._memory_error(what, f" (the worker died: {reason})")

    def _memory_error(self, what: str, detail: str = "") -> CompileMemoryError:
        return CompileMemoryError(
            f"{what} needed more than {self.limits.memory_mb} MB (the compile memory limit) and was stopped{detail}"
        )

    def _release(self, worker: _Worker) -> None:
        """Back to the idle queue, unless the jobs it ran left it holding more than a compile may take."""
        if self._closed or worker.rss() > worker.warm_rss + self.limits.memory_mb * MB:
            self._retire(worker)
        else:
            self._idle.put(worker)

    def _watch(self, worker: _Worker, what: str) -> tuple:
        """The worker's reply; past the time or memory limit (or if it dies) an error, and the caller kills it."""
        try:
            if not worker.conn.poll(START_TIMEOUT_S):
                raise CompileTimeoutError(f"{what}: the compile worker did not start the job")
            _, warmed = worker.conn.recv()
        except (EOFError, OSError):
            raise CompileTimeoutError(f"{what}: the compile worker died ({_exit_reason(worker)})") from None
        start, base = time.monotonic(), worker.rss()
        if warmed:  # a newly warmed engine's tables are the worker's, not this compile's
            worker.warm_rss = base
        limit = base + self.limits.memory_mb * MB
        while not worker.conn.poll(POLL_S):
            if not worker.process.is_alive():
                raise self._died(worker, what)
            if worker.rss() > limit:
                raise self._memory_error(what)
            if time.monotonic() - start > self.limits.timeout_s:
                raise CompileTimeoutError(f"{what} took longer than {self.limits.timeout_s:g} s and was stopped")
        try:
            return worker.conn.recv()
        except (EOFError, OSError):
            raise self._died(worker, what) from None

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            self._pids.discard(worker.process.pid)
        worker.kill()
        if not self._closed:
            self._replace()

    def _replace(self) -> None:
        """Start a worker in the background; it joins the idle queue once warm, so warm-up counts for no one."""
        threading.Thread(target=self._start_one, daemon=True, name="compile-worker-start").start()

    def _start_one(self) -> None:
        while True:
            try:
                worker = _Worker(self._tokenizer_bytes, self._engines)
                worker.wait_ready()
            except Exception:
                if self._closed or _exiting.is_set():
                    return
                log.exception("a compile worker failed to start; retrying")
                time.sleep(5)
                continue
            with self._lock:
                closed = self._closed or _exiting.is_set()
                if not closed:
                    self._pids.add(worker.process.pid)
                    self._idle.put(worker)
            if closed:
                worker.kill()
            return


def _exit_reason(worker: _Worker) -> str:
    worker.process.join(1)
    code = worker.process.exitcode
    if code is None:
        return "no reply"
    return f"signal {-code}" if code < 0 else f"exit code {code}"
