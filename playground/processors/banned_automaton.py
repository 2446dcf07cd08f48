"""An Aho-Corasick automaton over banned byte strings, for ban_strings' per-token work.

The state after the generated text is its longest suffix that begins some banned string. A token
completes a banned string exactly when it contains one, or when it starts with what is missing after
a state on that suffix chain; only what fits in one token (the longest token's bytes) can be missing.
So each step costs the bytes of the new token plus a cached lookup, whatever the banned strings' length.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch


class BannedAutomaton:
    """States are the prefixes of the banned strings; `bans(state)` are the token ids to mask there."""

    def __init__(self, banned: list[bytes], longest_token: int, starting_with: Callable[[bytes], torch.Tensor]):
        self.goto: list[dict[int, int]] = [{}]
        self.ends: list[bool] = [False]
        self.missing: dict[int, list[bytes]] = {}
        for word in banned:
            self._add(word, longest_token)
        self.fail = self._links()
        self._starting_with = starting_with
        self._bans: dict[int, torch.Tensor] = {0: torch.zeros(0, dtype=torch.long)}

    def _add(self, word: bytes, longest_token: int) -> None:
        """Insert `word`; each of its last prefixes remembers the rest, when a token can hold it."""
        state = 0
        for depth, byte in enumerate(word, start=1):
            nxt = self.goto[state].get(byte)
            if nxt is None:
                nxt = len(self.goto)
                self.goto.append({})
                self.ends.append(False)
                self.goto[state][byte] = nxt
            state = nxt
            if depth < len(word) and len(word) - depth <= longest_token:
                self.missing.setdefault(state, []).append(word[depth:])
        self.ends[state] = True

    def _links(self) -> list[int]:
        """Failure links, breadth first: each state's longest proper suffix that is also a state."""
        fail = [0] * len(self.goto)
        queue = deque(self.goto[0].values())
        while queue:
            state = queue.popleft()
            for byte, nxt in self.goto[state].items():
                back = fail[state]
                while back and byte not in self.goto[back]:
                    back = fail[back]
                fail[nxt] = self.goto[back].get(byte, 0)
                self.ends[nxt] = self.ends[nxt] or self.ends[fail[nxt]]
                queue.append(nxt)
        return fail

    def step(self, state: int, data: bytes) -> int:
        """The state after reading `data` (amortized constant work per byte)."""
        for byte in data:
            while state and byte not in self.goto[state]:
                state = self.fail[state]
            state = self.goto[state].get(byte, 0)
        return state

    def containing(self, pieces: list[bytes]) -> torch.Tensor:
        """Ids of tokens that hold a whole banned string: one pass over the vocabulary's bytes."""
        hits = []
        for token_id, piece in enumerate(pieces):
            state = 0
            for byte in piece:
                while state and byte not in self.goto[state]:
                    state = self.fail[state]
                state = self.goto[state].get(byte, 0)
                if self.ends[state]:
                    hits.append(token_id)
                    break
        return torch.tensor(hits, dtype=torch.long)

    def bans(self, state: int) -> torch.Tensor:
        """Ids of tokens that complete a banned string from `state` (containing ones excluded)."""
        chain = []
        while state not in self._bans:
            chain.append(state)
            state = self.fail[state]
        for link in reversed(chain):
            parts = [self._bans[self.fail[link]]] + [self._starting_with(rest) for rest in self.missing.get(link, [])]
            self._bans[link] = torch.unique(torch.cat(parts)) if len(parts) > 1 else parts[0]
        return self._bans[chain[0]] if chain else self._bans[state]
