"""One decoding step's scoring: penalties, custom processors, the constraint mask, warpers, logprobs.

transformers' own processors and warpers are used wherever they exist; only OpenAI's frequency and
presence penalties and logit bias, and vLLM's min_tokens, allowed_token_ids and bad_words (which transformers lacks in
these forms), are written here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch._dynamo
from transformers.generation import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
    WatermarkLogitsProcessor,
)

from playground.constraints.backends.bitmask import BitmaskProcessor
from playground.errors import ParameterError, PlaygroundError, ProcessorError
from playground.types import GeneratedToken, GenerateParameters, Token
from playground.types.pieces import is_byte_piece

Processor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
NEG_INF = float("-inf")
_NEG_INF_BITS = np.float32(NEG_INF).view(np.int32)
MIN_TEMPERATURE = 1e-4
# A repetition penalty divides positive logits: below this a float32 logit would reach inf (and its softmax NaN).
MIN_REPETITION_PENALTY = 1e-6


class FrequencyPenalty:
    """OpenAI's frequency penalty over the generated tokens: logit -= penalty * count."""

    def __init__(self, penalty: float, prompt_length: int) -> None:
        self.penalty = penalty
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids[:, self.prompt_length :]
        if generated.shape[1] == 0:
            return scores
        counts = torch.zeros_like(scores)
        counts.scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
        return scores - self.penalty * counts


class PresencePenalty(FrequencyPenalty):
    """OpenAI's presence penalty: logit -= penalty once for every token the answer already holds."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids[:, self.prompt_length :]
        if generated.shape[1] == 0:
            return scores
        present = torch.zeros_like(scores, dtype=torch.bool)
        present.scatter_(1, generated, True)
        return scores - self.penalty * present.to(scores.dtype)


class LogitBias:
    """OpenAI's logit_bias: a fixed amount added to chosen tokens' logits (-100 bans, 100 all but forces)."""

    def __init__(self, bias: dict[str, float], vocab_size: int) -> None:
        ids = [int(key) for key in bias]
        too_big = [i for i in ids if i >= vocab_size]
        if too_big:
            raise ParameterError(
                f"logit_bias: token id {too_big[0]} is not in the vocabulary (size {vocab_size})", field="logit_bias"
            )
        self.ids = torch.tensor(ids, dtype=torch.long)
        self.values = torch.tensor(list(bias.values()))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        ids, values = self.ids.to(scores.device), self.values.to(scores.device, scores.dtype)
        return scores.index_add(1, ids, values.expand(scores.shape[0], -1))


class MinTokens:
    """vLLM's min_tokens: the end-of-sequence tokens (and stop_token_ids') are out until the answer has this many."""

    def __init__(self, min_tokens: int, prompt_length: int, eos_ids: Iterable[int]) -> None:
        self.min_tokens = min_tokens
        self.prompt_length = prompt_length
        self.eos_ids = sorted(eos_ids)

    def holds(self, length: int) -> bool:
        """Whether the end is held off for a row of `length` ids (prompt and answer)."""
        return length - self.prompt_length < self.min_tokens

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not self.holds(input_ids.shape[1]):
            return scores
        eos = [i for i in self.eos_ids if i < scores.shape[1]]
        return scores.index_fill(1, torch.tensor(eos, dtype=torch.long, device=scores.device), NEG_INF)


class AllowedTokens:
    """vLLM's allowed_token_ids: every other token is out, the end-of-text token too unless listed."""

    def __init__(self, ids: list[int], vocab_size: int) -> None:
        outside = [i for i in ids if i >= vocab_size]
        if outside:
            raise ParameterError(
                f"allowed_token_ids: token id {outside[0]} is not in the vocabulary (size {vocab_size})",
                field="allowed_token_ids",
            )
        self.bias = torch.full((vocab_size,), NEG_INF)
        self.bias[ids] = 0.0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores + self.bias[: scores.shape[-1]].to(scores.device, scores.dtype)


def bad_word_ids(words: list[str], encode: Callable[[str], list[int]]) -> list[list[int]]:
    """vLLM's reading of bad_words: each word's tokens alone, and after a space where that spells it with another first
    token in as many tokens (a word's form inside a sentence)."""
    out: list[list[int]] = []
    for index, word in enumerate(words):
        if not word.strip():
            raise ParameterError(f"bad_words[{index}]: whitespace alone is no word", field="bad_words")
        alone = encode(word.lstrip())
        if alone:
            out.append(alone)
        spaced = encode(" " + word.lstrip())
        if spaced and (not alone or (spaced[0] != alone[0] and len(spaced) == len(alone))):
            out.append(spaced)
    return out


class BadWords:
    """vLLM's bad_words: a word's last token is out where the answer's last tokens are the rest of it (a one-token
    word: always). Only the answer's tokens count, not the prompt's."""

    def __init__(self, words: list[list[int]], prompt_length: int, vocab_size: int) -> None:
        self.always = sorted({w[0] for w in words if len(w) == 1 and w[0] < vocab_size})
        self.after = [(w[:-1], w[-1]) for w in words if len(w) > 1 and w[-1] < vocab_size]
        self.longest = max((len(before) for before, _ in self.after), default=0)
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        banned = list(self.always)
        if self.after:
            answer = input_ids.shape[1] - self.prompt_length
            tail = input_ids[0, input_ids.shape[1] - min(self.longest, answer) :].tolist() if answer > 0 else []
            banned += [
                last for before, last in self.after if len(before) <= len(tail) and tail[-len(before) :] == before
            ]
        if not banned:
            return scores
        return scores.index_fill(1, torch.tensor(banned, dtype=torch.long, device=scores.device), NEG_INF)


def shared_processors(
    params: GenerateParameters,
    vocab_size: int,
    device: Any,
    prompt_length: int,
    eos_ids: Iterable[int] = (),
    encode: Callable[[str], list[int]] | None = None,
) -> LogitsProcessorList:
    """Stateless processors applied to the whole batch before the per-row masks (TGI's order); `encode` (text -> token
    ids, no special tokens) spells bad_words."""
    processors = LogitsProcessorList()
    if params.watermark:
        processors.append(WatermarkLogitsProcessor(vocab_size=vocab_size, device=device))
    if params.repetition_penalty is not None and params.repetition_penalty != 1.0:
        processors.append(
            RepetitionPenaltyLogitsProcessor(penalty=max(params.repetition_penalty, MIN_REPETITION_PENALTY))
        )
    if params.frequency_penalty:
        processors.append(FrequencyPenalty(params.frequency_penalty, prompt_length))
    if params.presence_penalty:
        processors.append(PresencePenalty(params.presence_penalty, prompt_length))
    if params.logit_bias:
        processors.append(LogitBias(params.logit_bias, vocab_size))
    if params.min_tokens:
        processors.append(MinTokens(params.min_tokens, prompt_length, {*eos_ids, *(params.stop_token_ids or ())}))
    if params.allowed_token_ids:
        processors.append(AllowedTokens(params.allowed_token_ids, vocab_size))
    if params.bad_words:
        if encode is None:
            raise ParameterError("bad_words: this route cannot spell words as tokens", field="bad_words")
        processors.append(BadWords(bad_word_ids(params.bad_words, encode), prompt_length, vocab_size))
    return processors


def warpers(params: GenerateParameters) -> LogitsProcessorList:
    """Sampling warpers, applied after the masks; empty for greedy decoding."""
    chain = LogitsProcessorList()
    if not params.sampling:
        return chain
    if params.temperature is not None and params.temperature != 1.0:
        # Below 1e-4 sampling is greedy in all but name, and logits / 1e-40 overflow to inf.
        chain.append(TemperatureLogitsWarper(max(params.temperature, MIN_TEMPERATURE)))
    if params.top_k is not None:
        chain.append(TopKLogitsWarper(top_k=params.top_k))
    if params.top_p is not None and params.top_p < 1.0:
        chain.append(TopPLogitsWarper(top_p=params.top_p))
    if params.min_p:
        chain.append(MinPLogitsWarper(min_p=params.min_p))
    if params.typical_p is not None and params.typical_p < 1.0:
        chain.append(TypicalLogitsWarper(mass=params.typical_p))
    return chain


def apply_row_processors(processors: list[Processor], input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Run one row's own processors (constraint, custom) in order on a copy of `scores`; a failure fails this
    request only."""
    if all(isinstance(p, BitmaskProcessor) for p in processors):  # they return new tensors, with no compiled kernel
        return _apply(processors, input_ids, scores)
    # Outlines' processors change the scores in place, and their bitmask kernels are torch.compile'd:
    # compiling costs seconds on the first request of a process, while eager runs them as fast at this size.
    # A processor of a plugin's may write into what it is given: the row's ids are a view of its buffer (RowIds).
    with torch._dynamo.config.patch(disable=True):
        return _apply(processors, input_ids.clone(), scores.clone())


def best(values: torch.Tensor) -> tuple[float, int]:
    """(value, index) of the largest of `values` (one row), the first of equals: max(dim=-1), through numpy on the
    CPU (torch's costs ~15x more there: ~65 us on a 49k vocabulary)."""
    if values.device.type != "cpu" or values.dtype != torch.float32 or values.dim() != 1:
        value, index = values.max(dim=-1)
        pair = torch.stack([value.double().reshape(()), index.double().reshape(())]).tolist()  # one device read
        return pair[0], int(pair[1])
    row = values.detach().contiguous().numpy()
    index = int(row.argmax())
    return float(row[index]), index


def only(values: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """torch.where(allowed, values, -inf), bit for bit; on the CPU through the floats' bits, which costs ~50 us on a
    49k vocabulary whatever the mask (torch.where's loop: up to ~300 us where allowed and refused tokens alternate)."""
    if values.device.type != "cpu" or values.dtype != torch.float32 or allowed.dtype != torch.bool:
        return torch.where(allowed, values, NEG_INF)
    refused = allowed.numpy().astype(np.int32)  # (a bool holding another byte than 1, from a view, is 1 here too)
    refused -= 1  # every bit set where refused, none where allowed
    bits = values.detach().contiguous().numpy().view(np.int32)
    out = bits ^ _NEG_INF_BITS
    out &= refused
    out ^= bits  # where allowed the value's bits, where refused -inf's
    return torch.from_numpy(out.view(np.float32))


def finite(values: torch.Tensor) -> torch.Tensor:
    """torch.isfinite, through numpy on the CPU (torch's costs ~20x more there: 0.3 ms on a 49k vocabulary)."""
    if values.device.type != "cpu":
        return torch.isfinite(values)
    return torch.from_numpy(np.isfinite(values.detach().numpy()))


def _apply(processors: list[Processor], input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    for processor in processors:
        try:
            scores = processor(input_ids, scores)
        except PlaygroundError:  # worded for the user already (a processor's own, a constraint engine's limit)
            raise
        except Exception as exc:  # a third-party processor may raise anything
            name = getattr(processor, "name", type(processor).__name__)
            raise ProcessorError(f"logits processor {name!r} failed: {exc}") from exc
    return scores


@dataclass
class StepScores:
    """The distributions of one step for one row."""

    raw_logprobs: torch.Tensor
    logprobs: torch.Tensor
    final_scores: torch.Tensor
    mass_kept: float
    best: tuple[float, int] | None = None  # (logprob, id) of the highest final score, when score_row found it


def score_row(
    raw_logits: torch.Tensor,
    masked: torch.Tensor,
    chain: LogitsProcessorList,
    input_ids: torch.Tensor,
    *,
    untouched: bool = False,
    filled: bool = False,
) -> StepScores:
    """Raw and final distributions: the final one after penalties, masks and warpers, as TGI reports it.

    `untouched` says nothing changed the logits (no processor, mask or warper): one softmax serves both.
    `filled` says `masked` is `raw_logits` with some tokens at -inf and nothing else changed: with no warper,
    the mass kept is then read off one allowed token (raw logprob minus final logprob is log(mass kept) at
    every allowed token) instead of summed over the vocabulary, and the best token is found once.
    """
    raw_logprobs = torch.log_softmax(raw_logits, dim=-1)
    if untouched:
        return StepScores(raw_logprobs, raw_logprobs, raw_logits, 1.0)
    if filled and not len(chain):
        logprobs = torch.log_softmax(masked, dim=-1)
        if masked.device.type == "cpu":
            top_value, token_id = best(masked)
            value, raw_value = float(logprobs[token_id]), float(raw_logprobs[token_id])
        else:  # one read from the device (a GPU waits once, not four times)
            top, index = masked.max(dim=-1)
            top_value, value, raw_value, token_id = torch.stack(
                [t.double() for t in (top, logprobs[index], raw_logprobs[index], index)]
            ).tolist()
        if top_value == NEG_INF:  # nothing allowed: choose says so
            return StepScores(raw_logprobs, logprobs, masked, 0.0)
        chosen = (value, int(token_id))
        return StepScores(raw_logprobs, logprobs, masked, min(1.0, math.exp(raw_value - value)), chosen)
    allowed = finite(masked)
    mass_kept = min(1.0, float(raw_logprobs.exp().mul_(allowed).sum()))
    final = chain(input_ids, masked.unsqueeze(0)).squeeze(0) if len(chain) else masked
    return StepScores(raw_logprobs, torch.log_softmax(final, dim=-1), final, mass_kept)


def choose(step: StepScores, sampling: bool, generator: torch.Generator | None) -> int:
    """Greedy argmax or a seeded multinomial draw."""
    if step.best is not None and not sampling:
        return step.best[1]
    top, token_id = best(step.final_scores)
    if top == NEG_INF:
        raise ParameterError("every token was masked out: the constraint and processors leave nothing to generate")
    if not sampling:
        return token_id
    return int(torch.multinomial(step.logprobs.exp(), 1, generator=generator))


def top_tokens(logprobs: torch.Tensor, n: int, text_of: Callable[[int], str], special: set[int]) -> list[Token]:
    """The n most likely tokens that are still possible (finite logprob)."""
    if n <= 0:
        return []
    if n == 1:
        pairs = [best(logprobs)]
    else:
        values, ids = torch.topk(logprobs, n)
        pairs = list(zip(values.tolist(), ids.tolist()))
    out = []
    for value, token_id in pairs:
        if value == NEG_INF:
            break
        out.append(Token(id=token_id, text=text_of(token_id), logprob=value, special=token_id in special))
    return out


def token_record(
    token_id: int, text: str, step: StepScores, top_n: int, text_of: Callable[[int], str], special: set[int]
) -> GeneratedToken:
    """What the panels show for one generated token."""
    logprob = float(step.logprobs[token_id])
    if top_n == 1 and step.best is not None:
        value, best_id = step.best
        top = [Token(id=best_id, text=text_of(best_id), logprob=value, special=best_id in special)]
    else:
        top = top_tokens(step.logprobs, top_n, text_of, special)
    raw_top = top if step.logprobs is step.raw_logprobs else top_tokens(step.raw_logprobs, top_n, text_of, special)
    own = text_of(token_id)
    # its own text where its share is not: part of a character, whole characters after bytes that never made one
    # (their U+FFFD lands in this token's share), or a stop_token_ids token (no share: the answer ended before it)
    apart = is_byte_piece(own) or ("\ufffd" in text and "\ufffd" not in own) or (bool(own) and not text)
    return GeneratedToken(
        id=token_id,
        text=text,
        **({"piece": own} if apart else {}),  # (unset otherwise: no `piece: null` on TGI's routes)
        special=token_id in special,
        logprob=logprob if logprob != NEG_INF else None,
        raw_logprob=logprob if step.logprobs is step.raw_logprobs else float(step.raw_logprobs[token_id]),
        mass_kept=step.mass_kept,
        top_tokens=top,
        raw_top_tokens=raw_top,
    )
