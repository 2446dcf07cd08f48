"""The built-in processors: ban_strings and max_whitespace, on per-tokenizer tables computed once."""

from __future__ import annotations

import bisect
import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from playground.processors.banned_automaton import BannedAutomaton

# --- per-tokenizer tables ------------------------------------------------------------------------


class TokenTable:
    """What each token adds to the output, as bytes, built once per tokenizer; special tokens add nothing."""

    def __init__(self, tokenizer: Any) -> None:
        import xgrammar

        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer)
        special = _skipped_ids(tokenizer)
        self.pieces: list[bytes] = [b"" if i in special else bytes(p) for i, p in enumerate(info.decoded_vocab)]
        self.longest = max(map(len, self.pieces), default=1)
        order = sorted(range(len(self.pieces)), key=self.pieces.__getitem__)
        self._sorted = [self.pieces[i] for i in order]
        self._sorted_ids = torch.tensor(order, dtype=torch.long)
        self._lock = threading.Lock()
        self._ids: OrderedDict[tuple[str, bytes], torch.Tensor] = OrderedDict()
        self._whitespace: tuple[torch.Tensor, ...] | None = None

    def starting_with(self, prefix: bytes) -> torch.Tensor:
        """Ids of tokens whose bytes start with `prefix`: one range of the sorted vocabulary."""
        return self._cached(("prefix", prefix), lambda: self._prefix_range(prefix))

    def _prefix_range(self, prefix: bytes) -> torch.Tensor:
        lo = bisect.bisect_left(self._sorted, prefix)
        hi = bisect.bisect_right(self._sorted, prefix, lo, key=lambda p: p[: len(prefix)])
        return self._sorted_ids[lo:hi]

    def _cached(self, key: tuple[str, bytes], make: Callable[[], torch.Tensor]) -> torch.Tensor:
        with self._lock:
            if key in self._ids:
                self._ids.move_to_end(key)
                return self._ids[key]
        ids = make()
        with self._lock:
            self._ids[key] = ids
            while len(self._ids) > 4096:
                self._ids.popitem(last=False)
        return ids

    def whitespace(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per token, alone: its leading whitespace chars and its longest whitespace run."""
        with self._lock:
            if self._whitespace is None:
                rows = [_whitespace_counts(p.decode("utf-8", errors="replace")) for p in self.pieces]
                lead, run = zip(*rows)
                self._whitespace = torch.tensor(lead, dtype=torch.long), torch.tensor(run, dtype=torch.long)
            return self._whitespace

    def completing_whitespace(self, pending: bytes) -> torch.Tensor:
        """After `pending`, the first bytes of a multi-byte whitespace char: the tokens that complete it, as
        a [2, n] tensor of ids and of the leading whitespace chars that `pending` + the token makes."""
        return self._cached(("ws-after", pending), lambda: self._completions(pending))

    def _completions(self, pending: bytes) -> torch.Tensor:
        ids = [
            int(i)
            for char in _MULTIBYTE_WHITESPACE
            if len(char) > len(pending) and char.startswith(pending)
            for i in self.starting_with(char[len(pending) :]).tolist()
        ]
        leads = [_whitespace_counts(_complete_text(pending + self.pieces[i])[0])[0] for i in ids]
        return torch.tensor([ids, leads], dtype=torch.long).reshape(2, -1)


# Whitespace chars (str.isspace, as the run is counted) of more than one UTF-8 byte: a token can end inside one.
_MULTIBYTE_WHITESPACE = tuple(c.encode() for c in map(chr, range(0x80, 0x10000)) if c.isspace())
_WHITESPACE_STARTS = frozenset(char[:k] for char in _MULTIBYTE_WHITESPACE for k in range(1, len(char)))


def _complete_text(data: bytes) -> tuple[str, bytes]:
    """`data` decoded as the output text shows it, and the first bytes of a char it ends inside (kept back)."""
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last char's first byte: how long that char is
            size = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            if size > back:
                return data[:-back].decode("utf-8", errors="replace"), data[-back:]
            break
    return data.decode("utf-8", errors="replace"), b""


def _skipped_ids(tokenizer: Any) -> set[int]:
    """Tokens that decode(skip_special_tokens=True), and so the engine's output text, leaves out."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return set(getattr(tokenizer, "all_special_ids", [])) | {
        i for i, t in added.items() if getattr(t, "special", False)
    }


def _whitespace_counts(text: str) -> tuple[int, int]:
    """(leading whitespace chars, longest whitespace run) of a text."""
    runs = [len(list(group)) for is_ws, group in itertools.groupby(text, str.isspace) if is_ws]
    return len(text) - len(text.lstrip()), max(runs, default=0)


_tables: weakref.WeakKeyDictionary[Any, TokenTable] = weakref.WeakKeyDictionary()
_tables_lock = threading.Lock()


def token_table(tokenizer: Any) -> TokenTable:
    """The tokenizer's table, built on first use and kept while the tokenizer lives."""
    with _tables_lock:
        table = _tables.get(tokenizer)
        if table is None:
            table = _tables[tokenizer] = TokenTable(tokenizer)
        return table


def _pad(values: torch.Tensor, size: int, fill: Any) -> torch.Tensor:
    """Fit a per-token table to the model's vocabulary width (often padded past the tokenizer's)."""
    if values.shape[0] >= size:
        return values[:size]
    return torch.cat([values, torch.full((size - values.shape[0],), fill, dtype=values.dtype)])


# --- built-in processors -------------------------------------------------------------------------


# Sizes ban_strings accepts: the automaton holds one state per banned byte.
BAN_MAX_STRINGS = 256
BAN_MAX_BYTES = 1024


class BanStrings:
    """Masks every token that would complete a banned string in the generated text, even across tokens.

    The prompt length is taken from the first call (its input_ids are the prompt), so only generated text
    is checked. Matching is on the exact bytes each token adds, so it is case-sensitive. Each row's
    automaton state advances by the new tokens only, so a step costs the same whatever the strings' length.
    """

    def __init__(self, banned: list[bytes], table: TokenTable) -> None:
        self.table = table
        self.automaton = BannedAutomaton(banned, table.longest, table.starting_with)
        self.inside = self.automaton.containing(table.pieces)
        self.prompt_len: int | None = None
        self.states: list[int] = []
        self.seen = 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prompt_len is None:
            self.prompt_len = input_ids.shape[1]
        self._advance(input_ids)
        mask = torch.zeros(scores.shape, dtype=torch.bool)
        for row, state in enumerate(self.states):
            ids = torch.cat([self.inside, self.automaton.bans(state)])
            mask[row, ids[ids < scores.shape[1]]] = True
        return scores.masked_fill(mask.to(scores.device), float("-inf"))

    def _advance(self, input_ids: torch.Tensor) -> None:
        """Move each row's state over the tokens generated since the last call (from scratch if rows changed)."""
        generated = input_ids.shape[1] - self.prompt_len
        if len(self.states) != input_ids.shape[0] or generated < self.seen:
            self.states, self.seen = [0] * input_ids.shape[0], 0
        pieces = self.table.pieces
        new = input_ids[:, self.prompt_len + self.seen :].tolist()
        for row, ids in enumerate(new):
            data = b"".join(pieces[i] if 0 <= i < len(pieces) else b"" for i in ids)
            self.states[row] = self.automaton.step(self.states[row], data)
        self.seen = generated


def ban_strings_factory(params: list[str], tokenizer: Any) -> BanStrings:
    """params: the strings the output must never contain."""
    if not params:
        raise ValueError("ban_strings needs at least one string to ban")
    if any(not isinstance(p, str) or p == "" for p in params):
        raise ValueError("ban_strings cannot ban an empty string")
    if len(params) > BAN_MAX_STRINGS:
        raise ValueError(f"ban_strings takes at most {BAN_MAX_STRINGS} strings, got {len(params)}")
    banned = [p.encode("utf-8") for p in dict.fromkeys(params)]
    longest = max(len(b) for b in banned)
    if longest > BAN_MAX_BYTES:
        raise ValueError(f"ban_strings takes strings of at most {BAN_MAX_BYTES} bytes (UTF-8), got one of {longest}")
    return BanStrings(banned, token_table(tokenizer))


class MaxWhitespace:
    """Masks tokens that would make a run of whitespace longer than `limit` characters.

    The run is counted across token boundaries in the generated text (not the prompt, whose length is
    taken from the first call), as that text decodes: a whitespace char split across byte tokens counts
    once it is whole, and the tokens that would complete one past the limit are masked.
    """

    def __init__(self, limit: int, table: TokenTable) -> None:
        self.limit = limit
        self.table = table
        # each token's whitespace, built here (once per tokenizer): inside the first step it took that step's budget
        # (0.72 s of CPU on a slow host, past the 0.25 s a row may take)
        table.whitespace()
        self.prompt_len: int | None = None
        self.seen = 0
        self.runs: list[int] = []  # per row: whitespace chars ending its text
        self.pending: list[bytes] = []  # per row: the first bytes of a char its text ends inside
        self._fitted: tuple[int, torch.device] | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prompt_len is None:
            self.prompt_len = input_ids.shape[1]
        self._fit(scores.shape[1], scores.device)
        self._advance(input_ids)
        runs = torch.tensor(self.runs, dtype=torch.long, device=scores.device)
        over = (runs[:, None] + self.lead[None, :] > self.limit) | self.always_over[None, :]
        for row, pending in enumerate(self.pending):
            if pending:  # the run goes on only through a token that completes a whitespace char
                over[row] = self.always_over
                if pending in _WHITESPACE_STARTS:
                    ids, leads = self.table.completing_whitespace(pending).to(scores.device)
                    keep = ids < over.shape[1]
                    over[row, ids[keep]] |= self.runs[row] + leads[keep] > self.limit
        return scores.masked_fill(over, float("-inf"))

    def _fit(self, width: int, device: torch.device) -> None:
        """Pad the tables to the scores' width and move them to their device, once."""
        if self._fitted != (width, device):
            self._fitted = (width, device)
            lead, longest = self.table.whitespace()
            self.lead = _pad(lead, width, 0).to(device)
            self.always_over = (_pad(longest, width, 0) > self.limit).to(device)

    def _advance(self, input_ids: torch.Tensor) -> None:
        """Update each row's trailing run with the tokens generated since the last call."""
        generated = input_ids.shape[1] - self.prompt_len
        if len(self.runs) != input_ids.shape[0] or generated < self.seen:
            self.runs = [0] * input_ids.shape[0]
            self.pending = [b""] * input_ids.shape[0]
            self.seen = 0
        pieces = self.table.pieces
        for row, tokens in enumerate(input_ids[:, self.prompt_len + self.seen :].tolist()):
            for token in tokens:
                text, self.pending[row] = _complete_text(
                    self.pending[row] + (pieces[token] if token < len(pieces) else b"")
                )
                if text:
                    trail = len(text) - len(text.rstrip())
                    self.runs[row] = self.runs[row] + trail if trail == len(text) else trail
        self.seen = generated


MAX_WHITESPACE_RUN = 1_000_000  # longer runs than any answer holds (the limit becomes an int64 tensor)


def max_whitespace_factory(params: list[str], tokenizer: Any) -> MaxWhitespace:
    """params: [N], the longest run of consecutive whitespace characters allowed."""
    if len(params) != 1:
        raise ValueError(f"max_whitespace takes one parameter, the longest whitespace run allowed; got {len(params)}")
    try:
        limit = int(params[0].strip())
    except ValueError:
        raise ValueError(f"max_whitespace needs a whole number, got {params[0]!r}") from None
    if not 0 <= limit <= MAX_WHITESPACE_RUN:
        raise ValueError(f"max_whitespace needs a number from 0 to {MAX_WHITESPACE_RUN}, got {params[0].strip()}")
    return MaxWhitespace(limit, token_table(tokenizer))
