"""Example plugin: registers `no_digits` on import; load it with `--custom-modules sp_example_plugin`."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from playground.processors import register_factory

_digit_ids: weakref.WeakKeyDictionary[Any, torch.Tensor] = weakref.WeakKeyDictionary()


def digit_token_ids(tokenizer: Any) -> torch.Tensor:
    """Ids of every token whose text holds a digit; decoding the vocabulary once per tokenizer is enough."""
    if tokenizer not in _digit_ids:
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        _digit_ids[tokenizer] = torch.tensor([i for i, t in enumerate(texts) if any(c.isdigit() for c in t)])
    return _digit_ids[tokenizer]


class NoDigits:
    """A transformers-style logits processor: digits get probability zero."""

    def __init__(self, banned: torch.Tensor) -> None:
        self.banned = banned

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        banned = self.banned[self.banned < scores.shape[-1]].to(scores.device)
        scores = scores.clone()
        scores[:, banned] = float("-inf")
        return scores


def no_digits(params: list[str], tokenizer: Any) -> NoDigits:
    """The factory: called once per request with the request's params and the model's tokenizer."""
    if params:
        raise ValueError(f"no_digits takes no parameters, got {params!r}")
    return NoDigits(digit_token_ids(tokenizer))


register_factory("no_digits", no_digits, description="Example plugin: never generate a digit. No params.")
