"""ban_strings: sizes are capped with clear errors, and the automaton bans exactly the completing tokens."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from playground.processors.banned_automaton import BannedAutomaton
from playground.processors.builtin import BAN_MAX_BYTES, BAN_MAX_STRINGS, ban_strings_factory

VOCAB = [bytes(p) for n in (1, 2, 3) for p in itertools.product(b"abc", repeat=n)]


def _starting_with(prefix: bytes) -> torch.Tensor:
    return torch.tensor([i for i, p in enumerate(VOCAB) if p.startswith(prefix)], dtype=torch.long)


def _expected(text: bytes, banned: list[bytes]) -> set[int]:
    """Brute force: tokens that make a banned string appear that was not there before."""
    return {i for i, p in enumerate(VOCAB) if any(b in text + p and b not in text for b in banned)}


@pytest.mark.parametrize(
    "banned",
    [[b"abc"], [b"aab", b"ab", b"bca"], [b"ab" * 40 + b"c"], [b"a" * 50], [b"abcab", b"cabca", b"bb"]],
)
def test_the_automaton_bans_exactly_the_tokens_that_complete_a_banned_string(banned):
    automaton = BannedAutomaton(banned, longest_token=3, starting_with=_starting_with)
    rng = random.Random(7)
    for _ in range(40):
        text = bytes(rng.choice(b"abc") for _ in range(rng.randrange(0, 120)))
        if any(b in text for b in banned):
            continue
        state = 0
        for start in range(0, len(text), 3):  # fed in token-sized pieces, as decoding does
            state = automaton.step(state, text[start : start + 3])
        got = set(automaton.bans(state).tolist()) | set(automaton.containing(VOCAB).tolist())
        assert got == _expected(text, banned), text


def test_repeated_strings_keep_their_partial_matches():
    automaton = BannedAutomaton([b"a" * 50], longest_token=3, starting_with=_starting_with)
    state = automaton.step(0, b"a" * 49)
    assert VOCAB.index(b"a") in set(automaton.bans(state).tolist())
    assert automaton.bans(automaton.step(0, b"a" * 46)).numel() == 0


@pytest.mark.parametrize(
    ("params", "words"),
    [
        (["x"] * 1 + [f"w{i}" for i in range(BAN_MAX_STRINGS)], f"at most {BAN_MAX_STRINGS} strings"),
        (["a" * (BAN_MAX_BYTES + 1)], f"at most {BAN_MAX_BYTES} bytes"),
        (["é" * (BAN_MAX_BYTES // 2 + 1)], f"at most {BAN_MAX_BYTES} bytes"),
    ],
)
def test_sizes_past_the_limits_are_refused_by_name(params, words):
    with pytest.raises(ValueError, match=words):
        ban_strings_factory(params, tokenizer=None)
