"""One decode loop over best_of rows sharing a prompt: prefill, then one forward per step for all rows.

Each row has its own seeded generator, constraint processor and custom processors, so rows are
independent and reproducible; finished rows are padded so the batch stays rectangular.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from playground import sampling
from playground.constraints import Constraint
from playground.types import GeneratedToken, GenerateParameters, PrefillToken, TokenEvent

if TYPE_CHECKING:
    from playground.engine import Engine


@dataclass
class Row:
    """One best_of candidate being decoded."""

    seed: int | None
    generator: torch.Generator | None
    processors: list[Any]
    ids: list[int] = field(default_factory=list)
    tokens: list[GeneratedToken] = field(default_factory=list)
    text: str = ""
    emitted: str = ""
    finish_reason: str | None = None
    stop_sequence: str | None = None


class Decode:
    """The state of one decode loop over best_of rows sharing a prompt."""

    def __init__(
        self,
        engine: Engine,
        params: GenerateParameters,
        rows: list[Row],
        prompt_ids: list[int],
        constraint: Constraint,
        max_new: int,
    ) -> None:
        self.e = engine
        self.params = params
        self.rows = rows
        self.prompt_ids = prompt_ids
        self.constraint = constraint
        self.max_new = max_new
        self.top_n = max(params.top_n_tokens or 0, 1)
        self.sampling = params.sampling
        self.shared = sampling.shared_processors(params, engine.vocab_size, engine.device, len(prompt_ids))
        self.chain = sampling.warpers(params)
        self.cache = None
        self.logits: torch.Tensor | None = None
        self.prefill_s = 0.0

    def prefill(self) -> list[PrefillToken]:
        start = time.perf_counter()
        e = self.e
        input_ids = torch.tensor([self.prompt_ids], device=e.device)
        keep = 0 if self.params.decoder_input_details else 1
        all_logits, self.cache = e.forward(input_ids, keep=keep)
        self.logits = all_logits[:, -1].float()
        if len(self.rows) > 1:
            self.cache.batch_repeat_interleave(len(self.rows))
            self.logits = self.logits.expand(len(self.rows), -1)
        self.prefill_s = time.perf_counter() - start
        if not self.params.decoder_input_details:
            return []
        logprobs = torch.log_softmax(all_logits[0, :-1].float(), dim=-1)
        picked = logprobs.gather(1, input_ids[0, 1:].unsqueeze(1)).squeeze(1).tolist()
        texts = [e.token_text(i) for i in self.prompt_ids]
        return [PrefillToken(id=self.prompt_ids[0], text=texts[0], logprob=None)] + [
            PrefillToken(id=i, text=t, logprob=lp) for i, t, lp in zip(self.prompt_ids[1:], texts[1:], picked)
        ]

    def steps(self) -> Iterator[TokenEvent]:
        e = self.e
        pad = e.tokenizer.pad_token_id if e.tokenizer.pad_token_id is not None else next(iter(e.eos_ids))
        # Every row's full sequence; finished rows are padded so the batch stays rectangular.
        all_ids = torch.tensor([self.prompt_ids] * len(self.rows), device=e.device)
        for step_index in range(self.max_new):
            scores = self.shared(all_ids, self.logits.clone()) if len(self.shared) else self.logits
            next_ids = []
            for i, row in enumerate(self.rows):
                if row.finish_reason is not None:
                    next_ids.append(pad)
                    continue
                event = self._advance(i, row, all_ids[i : i + 1], self.logits[i], scores[i], step_index)
                next_ids.append(row.ids[-1])
                yield event
            if all(row.finish_reason is not None for row in self.rows):
                return
            step_ids = torch.tensor([[t] for t in next_ids], device=e.device)
            all_ids = torch.cat([all_ids, step_ids], dim=1)
            logits, self.cache = e.forward(step_ids, self.cache)
            self.logits = logits[:, -1].float()

    def _advance(
        self, index: int, row: Row, row_ids: torch.Tensor, raw: torch.Tensor, scores: torch.Tensor, step_index: int
    ) -> TokenEvent:
        e = self.e
        if row.processors:
            masked = sampling.apply_row_processors(row.processors, row_ids, scores.unsqueeze(0).clone())[0]
        else:
            masked = scores
        if self.constraint.kind == "json_schema":
            masked = self._gate_eos(row, masked)
        untouched = not row.processors and not len(self.shared) and not len(self.chain)
        step = sampling.score_row(raw, masked, self.chain, row_ids, untouched=untouched)
        token_id = sampling.choose(step, self.sampling, row.generator)
        row.ids.append(token_id)
        if token_id in e.eos_ids:
            text_piece = ""
            row.finish_reason = "eos_token"
        else:
            before = len(row.text)
            row.text = e.tokenizer.decode(row.ids, skip_special_tokens=True)
            # A character split across tokens decodes as U+FFFD until its last byte arrives: hold it back,
            # so the pieces streamed add up to the text.
            stable = row.text.rstrip("\ufffd") if row.text.endswith("\ufffd") else row.text
            text_piece = stable[len(row.emitted) :]
            row.emitted = stable
            self._check_stop(row, before)
        token = sampling.token_record(
            token_id,
            text_piece if token_id not in e.eos_ids else e.token_text(token_id),
            step,
            self.top_n,
            e.token_text,
            e.special_ids,
        )
        row.tokens.append(token)
        if row.finish_reason is None and step_index + 1 >= self.max_new:
            row.finish_reason = "length"
        return TokenEvent(index=index, token=token)

    def _gate_eos(self, row: Row, masked: torch.Tensor) -> torch.Tensor:
        """Allow EOS only when the text so far passes the final check, unless EOS is all that's left.

        Only JSON schemas need it: engines may skip schema keywords they can't enforce, while their
        regex, choice and grammar masks are exact.
        """
        eos_allowed = [t for t in self.e.eos_ids if t < masked.shape[0] and torch.isfinite(masked[t])]
        if not eos_allowed:
            return masked
        if self.constraint.validate(row.text).valid is not False:
            return masked
        others = torch.isfinite(masked).sum() - len(eos_allowed)
        if others <= 0:
            return masked
        masked = masked.clone()
        masked[eos_allowed] = sampling.NEG_INF
        return masked

    def _check_stop(self, row: Row, before: int) -> None:
        """A stop sequence that ends in the text added since `before` (it may start earlier)."""
        for stop in self.params.stop:
            if stop and stop in row.text[max(0, before - len(stop) + 1) :]:
                row.finish_reason = "stop_sequence"
                row.stop_sequence = stop
                return
