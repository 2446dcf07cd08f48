"""Continuous batching: every request on a model decodes in one batch, joining between steps and leaving when done.

Modelled on TGI's router and transformers' continuous batching, at the scale of one process: a request
thread submits a Job and reads its events; one scheduler thread per model loops over
  admit (prefill the newcomers, together where they can share a batch, then splice their KV caches into the batch's)
  -> one forward for every row (playground/decoding/batch.py) -> each request's rows choose their tokens
  -> finished or abandoned requests leave.
Each row keeps its own constraint, processors, seed, stops and parameters (playground/decoding/rows.py), so a
request's tokens are those it would get alone, up to the rounding of batched kernels.

A request that must have the model to itself (a PEFT adapter switches the shared weights; a model whose
cache cannot be padded) joins only an empty batch, and nothing joins while it runs. The thread ends
when there is no work, so an unloaded model is not kept alive by it.

`decode_here` runs the same loop for one request on the calling thread, batched with nobody: on ZeroGPU
the GPU exists only inside the caller's `spaces.GPU` call (playground/providers/local.py says why).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import functools
import logging
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from playground import context
from playground.constraints.backends import bitmask
from playground.decoding import row_budget
from playground.decoding.batch import BatchCache, can_batch
from playground.decoding.rows import Decode
from playground.decoding.runner import ModelRunner
from playground.types import PrefillToken, TokenEvent

log = logging.getLogger(__name__)
# A prompt longer than this prefills a chunk at a time while the batch decodes (a 8k-token prompt's prefill
# is tens of seconds on a CPU: nobody else's tokens may wait for all of it); after each chunk the others
# decode for as long as it took, so both go on at about half speed.
PREFILL_CHUNK = 256

# A Job's outbox entries: ("prefill", list[PrefillToken]), ("token", TokenEvent), ("done", None), ("error", exc)
Entry = tuple[str, Any]


_LOOK_S = 0.25  # how often a job's wait looks whether its reader has gone


class ReaderGone(GeneratorExit):
    """The job's reader went away while it waited (a client that hung up during a long prefill): the stream stops as
    a closed one does."""


@dataclass
class Job:
    """One request in the scheduler: its decode, whether it needs the model alone, and its outbox."""

    decode: Decode
    exclusive: bool = False
    use_model: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
    outbox: queue.Queue[Entry] = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    deadline: float = field(default_factory=row_budget.deadline)  # its wall-clock bound (monotonic)
    reader_gone: threading.Event | None = field(default_factory=context.reader_gone.get)

    def events(self) -> Iterator[list[PrefillToken] | TokenEvent]:
        """The prompt details first, then token events as they come; raises what the decode raised.

        Past the job's deadline the reader stops waiting, even if a step never returns. A reader that has gone
        (`reader_gone`) is noticed while it waits, and the job leaves: ReaderGone."""
        while True:
            left = max(0.0, self.deadline - time.monotonic())
            try:
                kind, value = self.outbox.get(timeout=left if self.reader_gone is None else min(left, _LOOK_S))
            except queue.Empty:
                if self.reader_gone is not None and self.reader_gone.is_set():
                    self.cancelled.set()
                    raise ReaderGone from None
                if time.monotonic() < self.deadline:
                    continue
                self.cancelled.set()
                raise row_budget.past_deadline() from None
            if kind == "done":
                return
            if kind == "error":
                raise value
            yield value

    def ready(self) -> Generator[list[PrefillToken] | TokenEvent, None, bool]:
        """The events already in the outbox, without waiting; returns True once the job is done."""
        while True:
            try:
                kind, value = self.outbox.get_nowait()
            except queue.Empty:
                return False
            if kind == "done":
                return True
            if kind == "error":
                raise value
            yield value


class Scheduler:
    """The decode loop of one model, shared by every request on it."""

    def __init__(self, runner: ModelRunner, model_lock: threading.Lock, max_rows: int) -> None:
        self.runner = runner
        self.model_lock = model_lock  # also taken by the next-token view: one forward at a time on the model
        self.max_rows = max(1, max_rows)
        self.batchable: bool | None = None  # known after the first prefill: can its cache be padded?
        self.peak_rows = 0
        self._joining: deque[Job] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._active: list[Job] = []  # the scheduler thread's own
        self._prefilling: deque[Job] = deque()  # long prompts running a chunk per step before they join
        self._prefill_after = 0.0  # no chunk before then while others decode: they get as much time as chunks
        self._batch = BatchCache(runner)
        self._slots: list[tuple[Job, int]] = []  # the (job, row index) of each batch row
        self._stopping = False
        _SCHEDULERS.add(self)

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("the server is shutting down")
            self._joining.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="decode-scheduler", daemon=True)
                self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the loop after its current step (at exit: a thread inside the model when the process ends aborts it)."""
        with self._cond:
            self._stopping = True
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def usage(self) -> dict[str, int]:
        """What /info shows: the limit, requests and rows decoding now, requests waiting to join, the most rows seen."""
        return {
            "max_batch_size": self.max_rows,
            "requests": len(self._active),
            "rows": len(self._slots),
            "joining": len(self._joining) + len(self._prefilling),
            "peak_rows": self.peak_rows,
        }

    # --- the scheduler thread ------------------------------------------------------------

    def decode_here(self, job: Job) -> Iterator[list[PrefillToken] | TokenEvent]:
        """`job` decoded on this thread in a loop of its own, as if the batch were empty; its events as they come.

        Every forward runs inside this generator's own steps, so inside whatever call iterates it."""
        alone = Scheduler(self.runner, self.model_lock, self.max_rows)
        alone.batchable = self.batchable
        alone._joining.append(job)
        try:
            while alone._work():
                with torch.inference_mode():  # per step: the reader may resume this generator on another thread
                    alone._cycle()
                if (yield from job.ready()):
                    return
        finally:
            job.cancelled.set()

    def _run(self) -> None:
        try:
            with torch.inference_mode():
                while self._work():
                    self._cycle()
        except Exception as exc:  # noqa: BLE001 - a fault in the loop itself must fail its requests, not hang them
            log.exception("the decode scheduler failed; its requests fail and the next request starts afresh")
            self._reset(exc)
        release_free_memory()

    def _cycle(self) -> None:
        """Admit newcomers, run one step for every row, let finished requests leave.

        A batch that starts takes the requests that arrived during its prefill before its first step, as often as
        they come (at most max_rows more prefills): clients that arrive together but not at once (a burst: each
        request's tokenizing and the HTTP around it come between them) would otherwise leave the first ones a
        step ahead, to be stepped again with fewer rows after the others' last. Requests done at their prefill
        leave meanwhile."""
        starting = not self._slots
        newcomers = self._admit()
        with self.model_lock:
            self._join(newcomers)
        for _ in range(self.max_rows if starting else 0):
            if self._stopping or not self._joining:
                break
            self._leave()
            newcomers = self._admit()
            if not newcomers:
                break
            with self.model_lock:
                self._join(newcomers)
        with self.model_lock:
            self._prefill_chunk()
            self._step()
        self._leave()

    def _reset(self, exc: Exception) -> None:
        """Every request in or waiting for the batch gets the error; the next submit starts a new loop."""
        with self._cond:
            for job in [*self._active, *self._joining, *self._prefilling]:
                job.outbox.put(("error", exc))
            self._active, self._slots = [], []
            self._joining.clear()
            self._prefilling.clear()
            self._batch = BatchCache(self.runner)
            self._thread = None

    def _work(self) -> bool:
        """Anything to do; otherwise the thread ends (a later submit starts a new one)."""
        with self._cond:
            if (self._active or self._joining or self._prefilling) and not self._stopping:
                return True
            for job in [*self._active, *self._joining, *self._prefilling]:
                job.outbox.put(("error", RuntimeError("the server is shutting down")))
            self._thread = None
            return False

    def _admit(self) -> list[Job]:
        """Newcomers in arrival order while rows are free; one that needs the model alone waits for an empty batch."""
        out = []
        with self._cond:
            rows = self._batch.rows + sum(len(job.decode.rows) for job in self._prefilling)
            while self._joining:
                job = self._joining[0]
                if job.cancelled.is_set() or time.monotonic() > job.deadline:  # it never prefills
                    self._joining.popleft()
                    job.outbox.put(("done", None) if job.cancelled.is_set() else ("error", row_budget.past_deadline()))
                    continue
                alone = job.exclusive or self.batchable is not True
                busy = bool(self._active or out or self._prefilling)
                if busy and (alone or any(j.exclusive for j in self._active)):
                    break
                need = len(job.decode.rows)
                if busy and rows + need > self.max_rows:
                    break
                out.append(self._joining.popleft())
                rows += need
                if alone:
                    break
        return out

    def _join(self, jobs: list[Job]) -> None:
        """Prefill the newcomers (together when they may share a batch), choose their first tokens, splice them in."""
        long = [job for job in jobs if self.batchable and not job.exclusive and job.decode.chunked(PREFILL_CHUNK)]
        self._prefilling.extend(long)  # a chunk per step (_prefill_chunk): the batch never waits for a whole one
        jobs = [job for job in jobs if job not in long]
        together = [job for job in jobs if self.batchable and not job.exclusive and not job.decode.prefill_details]
        if len(together) < 2:
            together = []
        for job in jobs:
            if job not in together:
                self._join_alone(job)
        if together:
            self._join_together(together)

    def _prefill_chunk(self) -> None:
        """One chunk of the oldest long prompt (unless the others' turn); after its last, the request joins."""
        while self._prefilling and self._prefilling[0].cancelled.is_set():
            self._prefilling.popleft().outbox.put(("done", None))
        if not self._prefilling or (self._active and time.monotonic() < self._prefill_after):
            return
        job = self._prefilling[0]
        fresh = BatchCache(self.runner)
        try:
            started = time.monotonic()
            done = job.decode.prefill_chunk(PREFILL_CHUNK)
            self._prefill_after = time.monotonic() + (time.monotonic() - started)
            if done is None:
                return
            self._prefilling.popleft()
            kv, logits = done
            fresh.adopt(kv)
            fresh.keep([0] * len(job.decode.rows))
            self._started(job, logits, [])
        except Exception as exc:  # noqa: BLE001 - the request's own failure, not the batch's
            if self._prefilling and self._prefilling[0] is job:
                self._prefilling.popleft()
            job.outbox.put(("error", exc))
            return
        self._enter([job], fresh)

    def _join_alone(self, job: Job) -> None:
        """One prompt in its own forward: exactly the path of a request with the model to itself."""
        fresh = BatchCache(self.runner)
        try:
            with job.use_model():
                kv, logits, details = job.decode.prefill()
                fresh.adopt(kv)
                fresh.keep([0] * len(job.decode.rows))
                self._started(job, logits, details)
        except Exception as exc:  # noqa: BLE001 - the request's own failure (a dead-end constraint), not the batch's
            job.outbox.put(("error", exc))
            return
        self.batchable = can_batch(kv) and self.batchable is not False
        self._enter([job], fresh)

    def _join_together(self, jobs: list[Job]) -> None:
        """Several prompts in one padded forward (each after what the prefix cache holds of it)."""
        start = time.perf_counter()
        fresh = BatchCache(self.runner)
        plans = [job.decode.cached_prefix() for job in jobs]
        try:
            logits = fresh.prefill([(kv, job.decode.prompt_ids[reused:]) for job, (reused, kv) in zip(jobs, plans)])
        except Exception as exc:  # noqa: BLE001 - the model failed: these requests fail, the batch goes on
            for job in jobs:
                job.outbox.put(("error", exc))
            return
        took = time.perf_counter() - start
        joined, rows = [], []
        for i, job in enumerate(jobs):
            job.decode.prefill_s = took
            if job.decode.prefix_cache is not None:
                job.decode.remember_prompt(fresh.row_cache(i))
            try:
                self._started(job, logits[i], [])
            except Exception as exc:  # noqa: BLE001 - this request's constraint failed at once; the others go on
                job.outbox.put(("error", exc))
                continue
            joined.append(job)
            rows.extend([i] * len(job.decode.rows))
        fresh.keep(rows)
        self._enter(joined, fresh)

    def _started(self, job: Job, logits: torch.Tensor, details: list[PrefillToken]) -> None:
        job.outbox.put(("prefill", details))
        for event in job.decode.start(logits):
            job.outbox.put(("token", event))

    def _enter(self, jobs: list[Job], fresh: BatchCache) -> None:
        """Prefilled requests (their rows in `fresh`, in order, best_of rows repeated) join the batch."""
        self._active.extend(jobs)
        self._batch.merge(fresh)
        self._slots.extend((job, i) for job in jobs for i in range(len(job.decode.rows)))
        self.peak_rows = max(self.peak_rows, len(self._slots))

    def _step(self) -> None:
        """One forward for every row that has tokens to run; each request's rows take their logits."""
        now = time.monotonic()
        for job in self._active:
            if now > job.deadline and not job.cancelled.is_set():
                job.outbox.put(("error", row_budget.past_deadline()))
                job.cancelled.set()
        feeds = [self._feed(job, i) for job, i in self._slots]
        if not any(feeds):
            return
        # a row with nothing to run (finished, waiting to leave) runs a pad token whose logits are ignored
        tokens = [feed or [self.runner.pad_id] for feed in feeds]
        masks = [w for (job, i), feed in zip(self._slots, feeds) if feed for w in job.decode.mask_work(i)]
        try:
            with self._exclusive_use(), _alongside(masks):
                logits = self._batch.forward(tokens)
        except Exception as exc:  # noqa: BLE001 - the model failed (out of memory): every request in it fails
            for job in self._active:
                job.outbox.put(("error", exc))
                job.cancelled.set()
            return
        for slot, ((job, i), feed, row_logits) in enumerate(zip(self._slots, feeds, logits)):
            if not feed or job.cancelled.is_set():
                continue
            row = job.decode.rows[i]
            try:
                kept = row.fed + len(feed)
                for event in job.decode.take(i, row_logits[: len(feed)], alone=len(self._slots) == 1):
                    job.outbox.put(("token", event))
                if row.fed < kept:  # a draft the row did not choose: it and what followed it leave the cache
                    self._batch.drop_last(slot, kept - row.fed)
            except Exception as exc:  # noqa: BLE001 - this request's constraint failed; the others go on
                job.outbox.put(("error", exc))
                job.cancelled.set()

    def _feed(self, job: Job, index: int) -> list[int]:
        if job.cancelled.is_set() or job.decode.rows[index].done:
            return []
        return job.decode.feed(index, alone=len(self._slots) == 1)

    def _exclusive_use(self) -> contextlib.AbstractContextManager[None]:
        """The adapter of a request that has the model alone, around its forwards."""
        if len(self._active) == 1:
            return self._active[0].use_model()
        return contextlib.nullcontext()

    def _leave(self) -> None:
        """Finished and abandoned requests leave the batch; a finished lone row's cache goes to the prefix cache."""
        leaving = [job for job in self._active if job.cancelled.is_set() or all(r.done for r in job.decode.rows)]
        if not leaving:
            return
        for job in leaving:
            if job.decode.keeps_cache and not job.cancelled.is_set():
                row = next(i for i, (j, _) in enumerate(self._slots) if j is job)
                job.decode.remember(self._batch.row_cache(row))
            job.outbox.put(("done", None))  # after an error, harmless: its reader has stopped
        keep = [n for n, (job, _) in enumerate(self._slots) if job not in leaving]
        self._slots = [self._slots[n] for n in keep]
        self._active = [job for job in self._active if job not in leaving]
        self._batch.keep(keep)


@contextlib.contextmanager
def _alongside(masks: list[tuple[bitmask.BitmaskProcessor, list[int]]]) -> Iterator[None]:
    """The rows' next masks, all in one engine call on another thread while the block (the forward) runs.

    The engines release the GIL while they compute, so on a CPU the masks cost the step nothing when a
    core is free. A failure here is left for the row's own call to meet, where it fails that request alone.
    A pooled call is billed its wall time, so past half a step's budget (the other half is the row's own work)
    its masks are dropped for the rows to compute on their own thread, billed in CPU time.
    """
    if not masks:
        yield
        return
    done = _mask_pool().submit(bitmask.prepare, masks, row_budget.STEP_CPU_S / 2)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            done.result()


@functools.cache
def _mask_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="masks")


_SCHEDULERS: weakref.WeakSet[Scheduler] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for scheduler in list(_SCHEDULERS):
        scheduler.stop()


def release_free_memory() -> None:
    """Hand the heap's free pages back to the system once the batch is empty (glibc's malloc_trim).

    A batch's KV cache grows by a concatenation per step and its activations scale with the rows, so
    glibc keeps a high-water mark of freed blocks (its mmap threshold rises with every large free);
    without this the server would hold the peak of its busiest moment for a long while. (No
    gc.collect here: finalizing native objects on this daemon thread can race interpreter exit.)
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's malloc_trim, looked up once (find_library runs a subprocess); None elsewhere (macOS, musl)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
