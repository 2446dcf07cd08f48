"""When a row ends (TGI's StoppingCriteria): end of text, a stop sequence, or the token budget."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from playground.errors import ParameterError


@dataclass(frozen=True)
class Stop:
    """Why a row ended: a TGI finish reason, the stop sequence that matched and the stop_token_ids token, if any."""

    reason: str
    sequence: str | None = None
    token: int | None = None


class StopCriteria:
    """One request's stop rules, checked after every token of every row."""

    def __init__(
        self,
        stops: list[str],
        max_new_tokens: int,
        eos_ids: set[int],
        stop_ids: Iterable[int] = (),
        keep: bool = False,
    ) -> None:
        self.stops = [s for s in stops if s]
        self.max_new_tokens = max_new_tokens
        self.eos_ids = eos_ids
        self.stop_ids = frozenset(stop_ids) - eos_ids  # (an end-of-text token named there is one already)
        self.keep = keep  # vLLM's include_stop_str_in_output: a stop_token_ids token's text stays in the answer

    def check(self, token_id: int, text: str, before: int, generated: int, start: int = 0) -> Stop | None:
        """The stop after a token: `text` is the row's text now, `before` its length before the token, `start` where
        the new text begins in it (after the answer a row continues: a stop sequence matches the new text alone, as
        vLLM's does with continue_final_message)."""
        if token_id in self.eos_ids:
            return Stop("eos_token")
        if token_id in self.stop_ids:  # vLLM's stop_token_ids: an end of text the request named
            return Stop("eos_token", token=token_id)
        for stop in self.stops:
            # the stop sequence ends in the text added (it may start earlier, not before the new text)
            if stop in text[max(start, before - len(stop) + 1) :]:
                return Stop("stop_sequence", stop)
        if generated >= self.max_new_tokens:
            return Stop("length")
        return None


def stop_cut(text: str, stop: str, keep: bool) -> int | None:
    """Where the OpenAI routes end a text that the stop sequence `stop` ended: before its first match (OpenAI's), or
    after it (`keep`, vLLM's include_stop_str_in_output); None where the text does not hold it."""
    found = text.find(stop)
    if found < 0:
        return None
    return found + len(stop) if keep else found


def checked_stop_ids(ids: list[int] | None, vocab_size: int) -> list[int]:
    """vLLM's stop_token_ids, each a token of the model's vocabulary."""
    outside = [i for i in ids or () if i >= vocab_size]
    if outside:
        raise ParameterError(
            f"stop_token_ids: token id {outside[0]} is not in the vocabulary (size {vocab_size})",
            field="stop_token_ids",
        )
    return list(ids or ())
