"""Row processors whose engine writes the allowed tokens as a bitmask: a mask costs one unpack, not a kernel.

Outlines' processors rebuild the mask with a chain of tensor ops per call (bits expanded, masked_fill,
a torch.compile'd kernel they disable here): ~0.5 ms a token on a 49k vocabulary, ten times the engine's
own work. A BitmaskProcessor keeps its engine's int32 bitmask (bit i of word w: token 32w+i allowed) and
turns it into the scores' bias or the allowed tokens with a 256-entry table. Rows of a batch step compute
their masks together (`prepare`): one engine call for all of them, which may run while the forward does.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from playground.errors import UnsupportedConstraintError

_BITS = (np.arange(256)[:, None] >> np.arange(8)) & 1  # byte value -> its 8 bits, lowest first
_ALLOWED = _BITS.astype(bool)
_BIAS = np.where(_BITS == 1, 0.0, -np.inf).astype(np.float32)  # 0 where allowed, -inf elsewhere


class BitmaskProcessor:
    """A constraint's row processor `(input_ids, scores) -> scores` over an engine matcher's bitmask.

    It follows the row by length: each call consumes the tokens the row gained since the last one (the
    first call only starts the matcher, as Outlines' processors do), and a second call at the same length
    reuses the mask. `allowed` gives the mask alone, for walks that need no scores.
    """

    rewinds = False  # whether the engine can go back to a state `save` remembered (`_restore`)
    engine = "the constraint engine"  # its name, in messages

    def __init__(self, vocab_size: int) -> None:
        self.words = (vocab_size + 31) // 32
        self.reset()

    def reset(self) -> None:
        """Forget the row: the next call starts the matcher afresh (a template's copy per request)."""
        self._seen: int | None = None
        self._first: int | None = None  # the row's length when the matcher started
        self._bits: np.ndarray | None = None
        self._error: Exception | None = None  # what the engine raised catching up (raised to the row's call)
        self.prepared_s = 0.0  # CPU time of a mask `prepare` computed for this row (another thread's), unbilled
        self._saved: list[tuple[int | None, Any]] = []  # (length, engine state) where drafts began

    # --- what an engine provides -------------------------------------------------------------

    def _start(self) -> None:
        raise NotImplementedError

    def _consume(self, tokens: list[int]) -> None:
        raise NotImplementedError

    def _fill(self, out: np.ndarray) -> None:
        """Write the allowed tokens into `out` (int32, `words` long)."""
        raise NotImplementedError

    def _snapshot(self) -> Any:
        """The engine's state now, for `_restore` (by default nothing: `_restore` rolls back)."""
        return None

    def _restore(self, snapshot: Any, count: int) -> None:
        """Back to `snapshot`, taken `count` tokens ago."""
        raise NotImplementedError

    pooled: ClassVar[bool] = False  # whether `_fill_many` of several rows runs on the engine's own threads

    @classmethod
    def _fill_many(cls, processors: Sequence[BitmaskProcessor], out: np.ndarray) -> None:
        """Row k of `out` for processors[k]; engines with a batch call override this."""
        for k, processor in enumerate(processors):
            processor._fill(out[k])

    def stopped(self) -> str | None:
        """Why the engine stopped enforcing the constraint (a limit it hit, a dead end), in one line; None while it
        enforces it."""
        return None

    # --- the row's side -----------------------------------------------------------------------

    def advance(self, ids: Sequence[int] | torch.Tensor) -> None:
        """Catch up with the row `ids` (its tokens so far); the mask is computed when next asked for.

        An engine's refusal is kept for the next `bits` (which may run on another thread than this)."""
        seen = self._seen
        if seen is not None and len(ids) <= seen:
            return
        self._seen, self._bits = len(ids), None
        try:
            if seen is None:
                self._first = len(ids)
                self._start()
            else:
                new = ids[seen:]
                self._consume(new.tolist() if isinstance(new, torch.Tensor) else list(new))
        except Exception as exc:  # noqa: BLE001 - the engine's own types; the row's call raises it
            self._error = exc

    def save(self, keep: int) -> None:
        """Remember the engine's state at the row's length now (before a draft), for `rewind`; the last `keep`."""
        self._saved.append((self._seen, self._snapshot()))
        del self._saved[:-keep]

    def rewind(self, length: int) -> None:
        """Back to the row's first `length` tokens, a length `save` remembered (a draft the row did not choose)."""
        saved = next((k for k, (seen, _) in enumerate(self._saved) if seen == length), None)
        if saved is None or self._seen is None:
            raise RuntimeError(f"no state saved at {length} tokens to rewind to")
        self._restore(self._saved[saved][1], self._seen - length)
        del self._saved[saved:]
        self._seen, self._bits, self._error = length, None, None

    def allows(self, token: int) -> bool:
        """Whether the last mask computed allows `token` (read off the bitmask: no device tensor touched)."""
        return self._bits is not None and bool((int(self._bits[token >> 5]) >> (token & 31)) & 1)

    def accepts(self, ids: Sequence[int] | torch.Tensor, token: int) -> bool:
        """Whether the engine takes `token` after `ids` as text written elsewhere (a prefix, an instance): its mask,
        unless the engine knows better (LLGuidanceProcessor)."""
        self.bits(ids)
        return self.allows(token)

    def key(self) -> bytes | None:
        """A digest of the last mask computed (None before one): rows that meet the same mask again look it up."""
        return None if self._bits is None else hashlib.blake2b(self._bits.data, digest_size=16).digest()

    def bits(self, ids: Sequence[int] | torch.Tensor) -> np.ndarray:
        """The bitmask after `ids`."""
        self.advance(ids)
        if self._error is not None:
            raise self._error
        if self._bits is None:
            self._bits = np.empty(self.words, dtype=np.int32)
            self._fill(self._bits)
        if stopped := self.stopped():  # it allows only the end now: the answer would end there, breaking the constraint
            count = (self._seen or 0) - (self._first or 0)
            where = "before the first token" if count == 0 else f"after {count} token{'s' if count > 1 else ''}"
            raise UnsupportedConstraintError(f"{self.engine} stopped the constraint {where}: {stopped}")
        return self._bits

    def allowed(self, input_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """The tokens allowed after the row `input_ids` (1 x L), as bools over `vocab_size` ids."""
        table = np.take(_ALLOWED, self.bits(input_ids[0]).view(np.uint8), axis=0).reshape(-1)
        return torch.from_numpy(_fit(table, vocab_size, False))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """`scores` (rows x vocab, one row) with every refused token at -inf; a new tensor."""
        bias = np.take(_BIAS, self.bits(input_ids[0]).view(np.uint8), axis=0).reshape(-1)
        return scores + torch.from_numpy(_fit(bias, scores.shape[-1], -np.inf)).to(scores.device, scores.dtype)


def prepare(rows: Sequence[tuple[BitmaskProcessor, Sequence[int]]], wall_limit_s: float = math.inf) -> None:
    """Compute the masks of several rows at once (one engine call per kind of processor), ready for their call.

    Each processor's share of the time goes to `prepared_s`, for its row's budget. A pooled call's share is its
    wall time, which a loaded machine stretches: past `wall_limit_s` the masks are dropped, and each row computes
    its own when asked, on its own thread, where its CPU time is billed (two rows of a one-key schema were refused
    on a busy machine, their 0.56 s being the machine's, not theirs).
    """
    pending: dict[type, list[BitmaskProcessor]] = {}
    for processor, ids in rows:
        start = time.thread_time()
        processor.advance(ids)
        processor.prepared_s += time.thread_time() - start
        if processor._bits is None and processor._error is None:
            pending.setdefault(type(processor), []).append(processor)
    for kind, processors in pending.items():
        out = np.empty((len(processors), processors[0].words), dtype=np.int32)
        cpu, wall = time.thread_time(), time.perf_counter()
        kind._fill_many(processors, out)
        # On this thread: its CPU time, as a row's own step is billed (wall time here counted the forward and other
        # processes running beside it: a lone request was refused on a busy machine). On an engine's pool (a batch's
        # llguidance call), whose CPU time is out of reach: wall time.
        pooled = kind.pooled and len(processors) > 1
        share = (time.perf_counter() - wall if pooled else time.thread_time() - cpu) / len(processors)
        if pooled and share > wall_limit_s:
            continue
        for processor, row in zip(processors, out):
            processor._bits = row
            processor.prepared_s += share


def _fit(values: np.ndarray, size: int, pad: Any) -> np.ndarray:
    """`values` cut or padded to `size` (a model's vocabulary may be larger or smaller than the tokenizer's)."""
    if len(values) >= size:
        return values[:size]
    return np.concatenate([values, np.full(size - len(values), pad, dtype=values.dtype)])
