"""One decode loop over best_of rows sharing a prompt: prefill, then one forward per step for all rows.

Each row has its own TokenChooser (seeded generator, constraint, custom processors), so rows are
independent and reproducible; finished rows are padded so the batch stays rectangular.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field

import torch

from playground.chooser import TokenChooser
from playground.prefix_cache import PrefixCache
from playground.runner import ModelRunner
from playground.stopping import StopCriteria
from playground.types import GeneratedToken, PrefillToken, TokenEvent


@dataclass
class Row:
    """One best_of candidate being decoded."""

    seed: int | None
    chooser: TokenChooser
    ids: list[int] = field(default_factory=list)
    tokens: list[GeneratedToken] = field(default_factory=list)
    text: str = ""
    emitted: str = ""
    finish_reason: str | None = None
    stop_sequence: str | None = None
    prefix: str = ""  # the answer this row continues (continue_from), forced through the constraint


class Decode:
    """The state of one decode loop over best_of rows sharing a prompt."""

    def __init__(
        self,
        runner: ModelRunner,
        rows: list[Row],
        prompt_ids: list[int],
        stopping: StopCriteria,
        *,
        prefill_details: bool = False,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self.runner = runner
        self.rows = rows
        self.prompt_ids = prompt_ids
        self.stopping = stopping
        self.prefill_details = prefill_details
        # per-position prompt logprobs need the whole prompt run, so they bypass the prefix cache
        self.prefix_cache = None if prefill_details else prefix_cache
        self.cache = None
        self.logits: torch.Tensor | None = None
        self.prefill_s = 0.0

    def prefill(self) -> list[PrefillToken]:
        start = time.perf_counter()
        r = self.runner
        input_ids = r.ids(self.prompt_ids)
        if self.prefix_cache is not None:
            reused, kv = self.prefix_cache.lookup(self.prompt_ids)
            all_logits, self.cache = r.forward(input_ids[:, reused:], kv)
            self.prefix_cache.store(self.prompt_ids, self.cache)
        else:
            all_logits, self.cache = r.forward(input_ids, keep=0 if self.prefill_details else 1)
        self.logits = all_logits[:, -1].float()
        if len(self.rows) > 1:
            self.cache.batch_repeat_interleave(len(self.rows))
            self.logits = self.logits.expand(len(self.rows), -1)
        self.prefill_s = time.perf_counter() - start
        if not self.prefill_details:
            return []
        logprobs = torch.log_softmax(all_logits[0, :-1].float(), dim=-1)
        picked = logprobs.gather(1, input_ids[0, 1:].unsqueeze(1)).squeeze(1).tolist()
        texts = [r.token_text(i) for i in self.prompt_ids]
        return [PrefillToken(id=self.prompt_ids[0], text=texts[0], logprob=None)] + [
            PrefillToken(id=i, text=t, logprob=lp) for i, t, lp in zip(self.prompt_ids[1:], texts[1:], picked)
        ]

    def steps(self) -> Iterator[TokenEvent]:
        yield from self._loop()
        self._remember()

    def _remember(self) -> None:
        """Keep the finished row's KV cache (prompt and answer), for the next turn or a retry."""
        if self.prefix_cache is None or len(self.rows) != 1 or self.cache is None:
            return
        row = self.rows[0]
        generated = row.ids[len(row.ids) - len(row.tokens) :]
        held = self.cache.get_seq_length()
        self.prefix_cache.store((self.prompt_ids + generated)[:held], self.cache)

    def _loop(self) -> Iterator[TokenEvent]:
        r = self.runner
        # Every row's full sequence; finished rows are padded so the batch stays rectangular.
        all_ids = torch.tensor([self.prompt_ids] * len(self.rows), device=r.device)
        if self.stopping.max_new_tokens <= 0:
            return
        # One row whose constraint can be probed ahead appends forced tokens without sampling.
        fast = len(self.rows) == 1 and self.rows[0].chooser.fast_forward
        while True:
            next_ids = []
            for i, row in enumerate(self.rows):
                if row.finish_reason is not None:
                    next_ids.append(r.pad_id)
                    continue
                yield self._advance(i, row, all_ids[i : i + 1], self.logits[i])
                next_ids.append(row.ids[-1])
            if fast and self.rows[0].finish_reason is None:
                all_ids = yield from self._fast_forward(self.rows[0], all_ids)
                if self.rows[0].finish_reason is not None:
                    return
                continue
            if all(row.finish_reason is not None for row in self.rows):
                return
            step_ids = torch.tensor([[t] for t in next_ids], device=r.device)
            all_ids = torch.cat([all_ids, step_ids], dim=1)
            logits, self.cache = r.forward(step_ids, self.cache)
            self.logits = logits[:, -1].float()

    def _advance(self, index: int, row: Row, row_ids: torch.Tensor, raw: torch.Tensor) -> TokenEvent:
        step = row.chooser.step(row_ids, raw, row.text)
        token_id = row.chooser.choose(step)
        token = row.chooser.record(token_id, self._append(row, token_id), step)
        row.tokens.append(token)
        return TokenEvent(index=index, token=token)

    def _fast_forward(self, row: Row, all_ids: torch.Tensor) -> Generator[TokenEvent, None, torch.Tensor]:
        """Append the tokens the constraint forces after the one just chosen; one forward for all of them.

        The forward's logits at every position give each forced token its raw logprob and alternatives.
        """
        r = self.runner
        chosen = len(row.ids) - 1
        limit = self.stopping.max_new_tokens - len(row.tokens)
        appended = []
        for token_id, allowed in row.chooser.forced([*all_ids[0].tolist(), row.ids[-1]], limit):
            text_before = row.text
            piece = self._append(row, token_id, generated=len(row.tokens) + len(appended) + 1)
            appended.append((token_id, allowed, text_before, piece))
            if row.finish_reason is not None:
                break
        new_ids = r.ids(row.ids[chosen:])
        all_ids = torch.cat([all_ids, new_ids], dim=1)
        logits, self.cache = r.forward(new_ids, self.cache, keep=new_ids.shape[1])
        logits = logits[0].float()
        for k, (token_id, allowed, text_before, piece) in enumerate(appended):
            before = all_ids[:, : all_ids.shape[1] - len(appended) + k]
            step = row.chooser.step(before, logits[k], text_before, allowed=allowed)
            token = row.chooser.record(token_id, piece, step, forced=True)
            row.tokens.append(token)
            yield TokenEvent(index=0, token=token)
        self.logits = logits[-1:]
        return all_ids

    def _append(self, row: Row, token_id: int, generated: int | None = None) -> str:
        """Add a token to the row, check the stop rules; the piece of text it streams.

        `generated` counts the row's new tokens with this one (by default, those recorded plus one).
        """
        r = self.runner
        row.ids.append(token_id)
        before = len(row.text)
        piece = r.token_text(token_id)
        if token_id not in r.eos_ids:
            row.text = r.tokenizer.decode(row.ids, skip_special_tokens=True)
            # A character split across tokens decodes as U+FFFD until its last byte arrives: hold it back,
            # so the pieces streamed add up to the text.
            stable = row.text.rstrip("\ufffd") if row.text.endswith("\ufffd") else row.text
            piece = stable[len(row.emitted) :]
            row.emitted = stable
        generated = len(row.tokens) + 1 if generated is None else generated
        stop = self.stopping.check(token_id, row.text, before, generated)
        if stop is not None:
            row.finish_reason, row.stop_sequence = stop.reason, stop.sequence
        return piece
