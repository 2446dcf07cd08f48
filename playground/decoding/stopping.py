"""When a row ends (TGI's StoppingCriteria): end of text, a stop sequence, or the token budget."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stop:
    """Why a row ended: a TGI finish reason and the stop sequence that matched, if any."""

    reason: str
    sequence: str | None = None


class StopCriteria:
    """One request's stop rules, checked after every token of every row."""

    def __init__(self, stops: list[str], max_new_tokens: int, eos_ids: set[int]) -> None:
        self.stops = [s for s in stops if s]
        self.max_new_tokens = max_new_tokens
        self.eos_ids = eos_ids

    def check(self, token_id: int, text: str, before: int, generated: int) -> Stop | None:
        """The stop after a token: `text` is the row's text now, `before` its length before the token."""
        if token_id in self.eos_ids:
            return Stop("eos_token")
        for stop in self.stops:
            # the stop sequence ends in the text added (it may start earlier)
            if stop in text[max(0, before - len(stop) + 1) :]:
                return Stop("stop_sequence", stop)
        if generated >= self.max_new_tokens:
            return Stop("length")
        return None
