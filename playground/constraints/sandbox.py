"""Native code reads user input here first, in a spawned process: a crash costs a 422, never the server.

llguidance (Rust) and xgrammar (C++) build grammars recursively: a chain of 3,000 rules overflows the
stack (SIGSEGV) and takes the process with it, and no Python `try` can catch that. So nothing native
reads a constraint in the server before a sandbox process has read the same input with the same code
(playground.constraints.matching proves every matcher it builds here; compile workers prove what the server
rebuilds). The proof runs in a thread with a quarter of the stack the server's threads get, so what
passes here has room to spare there. A sandbox that dies, overruns its time or its memory is replaced;
the caller gets a SandboxError to report.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import multiprocessing.spawn
import os
import queue
import resource
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from playground import client_scope
from playground.fair_queue import FairQueue

log = logging.getLogger(__name__)
T = TypeVar("T")
MB = 1 << 20
TIMEOUT_S = 10.0  # one probe; a 128 KiB grammar reads in ~1 s
MEMORY_MB = 1024  # address space one sandbox may take beyond its start
WORKERS = 2
START_TIMEOUT_S = 120.0
# A sandbox that dies costs a new one (a second of CPU): a client whose inputs killed this many within a
# minute waits a minute before its next input is read.
MAX_STRIKES = 5
STRIKE_WINDOW_S = 60.0


def _server_stack() -> int:
    """The stack a thread of this process gets (glibc: RLIMIT_STACK; unlimited reads as its 2 MB floor)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    return 2 * MB if soft in (resource.RLIM_INFINITY, -1) or soft <= 0 else min(soft, 64 * MB)


# At most 2 MB (~700 chained grammar rules for llguidance), and a quarter of what the server's threads get.
PROBE_STACK = max(256 * 1024, min(2 * MB, _server_stack() // 4))
_inside = False  # True in a sandbox process: there the input is read directly


class SandboxError(Exception):
    """The input crashed a sandbox or overran its limits; the message says which.

    `transient`: no sandbox could be had (not the input's doing), so the answer is not remembered."""

    def __init__(self, message: str, *, transient: bool = False, killed: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
        self.killed = killed  # the input cost a sandbox (crash, time, memory): it counts against its client


def inside() -> bool:
    """True in a sandbox (or compile worker) process, where reading input directly is the point."""
    return _inside


def on_probe_stack(fn: Callable[..., T], *args: Any) -> T:
    """Run `fn(*args)` in a thread with the probe's small stack (in a sandbox or a compile worker)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    previous = threading.stack_size(PROBE_STACK)
    try:
        thread = threading.Thread(target=run, name="probe")
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


# --- inside a sandbox ---------------------------------------------------------------------------


def enter() -> None:
    """Mark this process as one where input is read directly (a sandbox or a compile worker)."""
    global _inside
    _inside = True


def _serve(conn: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C (a notebook's interrupt: the process group) is the server's
    enter()
    try:
        import psutil

        limit = psutil.Process().memory_info().vms + MEMORY_MB * MB
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
        conn.send(("ready", os.getpid()))
        while True:
            target, args = conn.recv()
            try:
                module, _, name = target.partition(":")
                value = on_probe_stack(getattr(importlib.import_module(module), name), *args)
                reply: tuple = ("ok", value)
            except MemoryError:
                reply = ("error", f"it needed more than {MEMORY_MB} MB")
            except Exception as exc:
                reply = ("error", f"{type(exc).__name__}: {str(exc)[:500]}")
            conn.send(reply)
    except (EOFError, OSError, KeyboardInterrupt):
        return


# --- in the server -------------------------------------------------------------------------------

_preparing = threading.Lock()


@contextlib.contextmanager
def main_left_out() -> Iterator[None]:
    """While a sandbox or compile worker starts: it does not run the program's main module again, since its target
    and arguments are this package's. (Spawn prepares a child by importing the parent's `__main__`: a script
    without `if __name__ == "__main__":` would run whole in each of them, and start processes of its own before it
    had finished starting.)"""
    with _preparing:
        prepare = multiprocessing.spawn.get_preparation_data

        def without_main(name: str) -> dict[str, Any]:
            data = prepare(name)
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
            return data

        multiprocessing.spawn.get_preparation_data = without_main
        try:
            yield
        finally:
            multiprocessing.spawn.get_preparation_data = prepare


class _Sandbox:
    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), daemon=True, name="playground-sandbox")
        with main_left_out():
            self.process.start()
        child.close()
        try:
            if not self.conn.poll(START_TIMEOUT_S):
                raise EOFError
            self.conn.recv()
        except (EOFError, OSError):
            self.kill()
            raise SandboxError(
                f"a sandbox process did not start within {START_TIMEOUT_S:g} s", transient=True
            ) from None

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()

    def reason(self) -> str:
        self.process.join(1)
        code = self.process.exitcode
        if code is None:
            return "no reply"
        return f"signal {-code}" if code < 0 else f"exit code {code}"


class SandboxPool:
    """Up to WORKERS sandboxes, started on first use; a dead, slow or bloated one is dropped."""

    def __init__(self, workers: int = WORKERS) -> None:
        self._idle: queue.Queue[_Sandbox] = queue.Queue()
        self._slots: FairQueue[int] = FairQueue()  # turns between clients: one's slow inputs cannot queue out another's
        for slot in range(workers):
            self._slots.put(slot)
        self._strikes: OrderedDict[str, list[float]] = OrderedDict()  # when each client's inputs killed a sandbox
        self._strikes_lock = threading.Lock()

    def call(self, target: str, *args: Any, timeout_s: float = TIMEOUT_S) -> Any:
        """`module:function(*args)` in a sandbox; its value, or SandboxError."""
        client = client_scope.current()
        self._check_strikes(client)
        try:
            slot = self._slots.get(client, timeout=START_TIMEOUT_S)
        except queue.Empty:
            raise SandboxError(f"no sandbox became free within {START_TIMEOUT_S:g} s", transient=True) from None
        try:
            return self._call(target, args, timeout_s)
        except SandboxError as exc:
            if exc.killed:
                self._strike(client)
            raise
        finally:
            self._slots.release(client)
            self._slots.put(slot)

    def _recent_strikes(self, client: str) -> list[float]:
        now = time.monotonic()
        return [t for t in self._strikes.get(client, []) if now - t < STRIKE_WINDOW_S]

    def _check_strikes(self, client: str) -> None:
        with self._strikes_lock:
            recent = self._recent_strikes(client)
        if len(recent) >= MAX_STRIKES:
            wait = STRIKE_WINDOW_S - (time.monotonic() - recent[0])
            raise SandboxError(
                f"this client's inputs crashed or overran the checker {len(recent)} times within "
                f"{STRIKE_WINDOW_S:g} s; its next one is read in {wait:.0f} s",
                transient=True,
            )

    def _strike(self, client: str) -> None:
        with self._strikes_lock:
            self._strikes[client] = [*self._recent_strikes(client), time.monotonic()]
            self._strikes.move_to_end(client)
            while len(self._strikes) > 10_000:
                self._strikes.popitem(last=False)

    def _call(self, target: str, args: tuple, timeout_s: float) -> Any:
        for attempt in range(2):
            box = self._take()
            try:
                box.conn.send((target, args))
            except (OSError, EOFError):  # it died while idle: not this input's doing, try a fresh one
                box.kill()
                if attempt:
                    raise SandboxError("the sandbox could not be reached", transient=True) from None
                continue
            return self._answer(box, timeout_s)
        raise AssertionError("unreachable")

    def _take(self) -> _Sandbox:
        try:
            box = self._idle.get_nowait()
        except queue.Empty:
            return _Sandbox()
        if not box.process.is_alive():
            box.kill()
            return _Sandbox()
        return box

    def _answer(self, box: _Sandbox, timeout_s: float) -> Any:
        try:
            ready = box.conn.poll(timeout_s)
            reply = box.conn.recv() if ready else None
        except (EOFError, OSError):
            reason = box.reason()
            box.kill()
            raise SandboxError(f"reading it crashed the checker ({reason})", killed=True) from None
        if reply is None:
            box.kill()
            raise SandboxError(f"reading it took longer than {timeout_s:g} s", killed=True)
        if reply[0] == "error" and "needed more than" in reply[1]:
            box.kill()
            raise SandboxError(f"reading it {reply[1]}", killed=True)
        self._idle.put(box)
        if reply[0] == "error":
            raise SandboxError(reply[1])
        return reply[1]


_pool: SandboxPool | None = None
_pool_lock = threading.Lock()


def call(target: str, *args: Any, timeout_s: float = TIMEOUT_S) -> Any:
    """Run `module:function(*args)` in the process-wide sandbox pool (see SandboxPool.call)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = SandboxPool()
        pool = _pool
    return pool.call(target, *args, timeout_s=timeout_s)
