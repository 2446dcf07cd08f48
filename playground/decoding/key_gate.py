"""No key twice in one JSON object: the tokens that would close a key already written there are refused.

The engines enforce a schema's listed properties once each, but a key that `patternProperties` or
`additionalProperties` lets in may be written again (llguidance's mask wrote `"x-json": 200` over and over, and a
listed key again as an additional one): JSON Schema judges only one value per key, so the verdict refuses such an
answer at its end. Like the EOS gate (chooser.py), this gate takes tokens the mask allows away: at a step inside a
key, those whose text closes it as a key the object already has; where a key starts, those that write one whole.

The row's text is scanned as it grows (playground/constraints/jsonstate.py), from the start again only when it
changed behind (a refused draft); the tokens are found by their text's prefix in the vocabulary, sorted once per
model.
"""

from __future__ import annotations

import bisect
import json
import threading
from typing import Any

import torch

from playground.constraints.jsonstate import JsonState, Scanner
from playground.decoding import sampling

# What may stand before a key a token writes whole: nothing, or a space (`, "a"` splits as `,` then ` "a"`).
_LEADS = ("", " ")


class KeyGate:
    """One row's gate: the JSON state of its answer so far, kept as the answer grows."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.vocabulary = vocabulary(runner)  # (built here, on the request's thread: never in the batch's step)
        self._scanner: Scanner | None = None
        self._fed = ""

    def apply(self, masked: torch.Tensor, text: str) -> torch.Tensor:
        """`masked` without the tokens that would write a key twice in the object being written."""
        ids = self.refused(text, masked.shape[0])
        if not ids:
            return masked
        index = torch.tensor(ids, device=masked.device)
        if not bool(torch.isfinite(masked[index]).any()):  # the mask refused them already
            return masked
        masked = masked.clone()
        masked[index] = sampling.NEG_INF
        return masked

    def refused(self, text: str, size: int) -> list[int]:
        """The token ids (below `size`) that would write a key twice after `text`."""
        state = self._state(text)
        if state is None:
            return []
        return [i for prefix, _ in _closing(state) for i in self.vocabulary.starting_with(prefix) if i < size]

    def _state(self, text: str) -> JsonState | None:
        text = text.rstrip("\ufffd")  # a character still cut: read once whole (else every step read it all again)
        if self._scanner is None or not text.startswith(self._fed):
            self._scanner, self._fed = Scanner(), ""
        if self._scanner.failed:
            return None
        self._scanner.feed(text[len(self._fed) :])
        self._fed = text
        return None if self._scanner.failed else self._scanner.s


def _closing(state: JsonState) -> list[tuple[str, str]]:
    """(a text no token may start with here, the key it would write again): the rest of each written key this one
    may still become, with its closing quote; where a key starts, each written key whole."""
    top = state.top
    if top is None or top.kind != "object" or not top.keys:
        return []
    written = dict.fromkeys(top.keys)
    if state.in_string:
        if not state.string_is_key or state.escaping:  # (a `"` there is the key's own)
            return []
        typed = state.string
        return [(_raw(key[len(typed) :]) + '"', key) for key in written if key.startswith(typed)]
    if top.expect in ("key_or_end", "key") and not state.scalar:
        return [(f'{lead}"{_raw(key)}"', key) for key in written for lead in _LEADS]
    return []


def _raw(text: str) -> str:
    """Text as JSON writes it inside a string (`"`, `\\` and control characters escaped): the way the model would
    write a key again most likely (another spelling, `\\u0041` for `A`, is left to the verdict)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def written_again(text: str, token: str) -> str | None:
    """The key `token` would write a second time in the object being written after `text` (the debugger's reason)."""
    scanner = Scanner()
    if not scanner.feed(text):
        return None
    return next((key for prefix, key in _closing(scanner.s) if token.startswith(prefix)), None)


class Vocabulary:
    """Every token's text, sorted, for the tokens that start with a text."""

    def __init__(self, runner: Any) -> None:
        special = runner.special_ids
        pairs = sorted((runner.token_text(i), i) for i in range(runner.vocab_size) if i not in special)
        self._texts = [text for text, _ in pairs]
        self._ids = [i for _, i in pairs]

    def starting_with(self, prefix: str) -> list[int]:
        start = bisect.bisect_left(self._texts, prefix)
        end = start
        while end < len(self._texts) and self._texts[end].startswith(prefix):
            end += 1
        return self._ids[start:end]


_vocabularies_lock = threading.Lock()


def vocabulary(runner: Any) -> Vocabulary:
    """The runner's sorted vocabulary, built on first need (~0.3 s for 49k tokens) and kept with it."""
    found = getattr(runner, "_key_gate_vocabulary", None)
    if found is None:
        with _vocabularies_lock:
            found = getattr(runner, "_key_gate_vocabulary", None)
            if found is None:
                found = runner._key_gate_vocabulary = Vocabulary(runner)
    return found
