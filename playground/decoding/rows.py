"""One request's decode: its best_of rows sharing a prompt, their stop rules, and what each feeds the model.

The scheduler (playground/decoding/scheduler.py) owns the forward passes, for every request at once; a Decode
only says which tokens each row runs next (`feed`) and turns the logits that come back into tokens
(`take`). Each row has its own TokenChooser (seeded generator, constraint, custom processors), so rows
are independent and reproducible wherever they sit in the batch.

Fast-forward: after a sampled token, the tokens the constraint forces are appended at once (their text
streams when their scores are known). Alone, a row runs them all in one forward, whose logits at every
position score each forced token; in a batch with other rows it runs them one per step, so no row
pads its neighbours' caches.

Drafts (a lone row, where the model's cache can drop positions): where the constraint then leaves a choice it left
before, the row drafts the token it chose then (chooser.py), appends what the constraint forces after it, and so
on, up to MAX_CHAIN tokens, all in one forward. At a draft's position the row chooses as ever, from the logits
there (its seeded draw included, so the output is the same as without drafts); a draft it does not choose is
dropped with everything after it, and the scheduler drops their positions from the cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.constraints.backends.bitmask import BitmaskProcessor
from playground.decoding import sampling
from playground.decoding.chooser import MAX_DRAFTS, TokenChooser
from playground.decoding.prefix_cache import PrefixCache
from playground.decoding.runner import ModelRunner
from playground.decoding.stopping import StopCriteria
from playground.errors import PlaygroundError
from playground.types import GeneratedToken, PrefillToken, Token, TokenEvent

# The most tokens a lone row appends ahead of its logits (drafts and the tokens forced after them).
MAX_CHAIN = 64


@dataclass
class Forced:
    """A token appended but not scored yet: forced by the constraint, or drafted (`key`: the digest of the mask at
    its position); the mask and text from before it."""

    token_id: int
    allowed: torch.Tensor
    text_before: str
    piece: str
    emitted_before: str = ""
    key: bytes | None = None


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
    stop_token: int | None = None  # the stop_token_ids token that ended it
    prefix: str = ""  # the answer this row continues (continue_from), forced through the constraint
    fed: int = 0  # generated tokens already run through the model
    unscored: list[Forced] = field(default_factory=list)
    probe_owed: bool = False  # fast-forward's probe after the last token waits for the mask computed alongside
    drafted: int = 0  # drafts checked against the row's choice there
    accepted: int = 0  # drafts the row chose
    failure: PlaygroundError | None = None  # why this candidate stopped while others went on (Decode._fail)

    @property
    def generated(self) -> list[int]:
        """The tokens this decode added (after any continue_from prefix)."""
        return self.ids[len(self.ids) - len(self.tokens) - len(self.unscored) :]

    @property
    def done(self) -> bool:
        return self.finish_reason is not None and not self.unscored


class Decode:
    """The rows of one request and their stop rules; the model runs elsewhere."""

    def __init__(
        self,
        runner: ModelRunner,
        rows: list[Row],
        prompt_ids: list[int],
        stopping: StopCriteria,
        *,
        prefill_details: bool = False,
        prefix_cache: PrefixCache | None = None,
        drafts: bool = False,
    ) -> None:
        self.runner = runner
        self.rows = rows
        if drafts and len(rows) == 1:  # best_of rows share the batch: one token a step
            rows[0].chooser.start_drafts()
        self.prompt_ids = prompt_ids
        self.stopping = stopping
        self.prefill_details = prefill_details
        # per-position prompt logprobs need the whole prompt run, so they bypass the prefix cache
        self.prefix_cache = None if prefill_details else prefix_cache
        self.prefill_s = 0.0
        self.prefill_top: list[list[Token]] = []  # with prefill_details and top_n_tokens: each position's likeliest
        self._partial: tuple[int, Any] | None = None  # a chunked prefill so far: (tokens run, KV cache)
        self.cached_tokens = 0  # of the prompt, what the prefix cache held at its prefill

    def cached_prefix(self) -> tuple[int, Any]:
        """How much of the prompt the prefix cache holds, and a KV cache of its own for it (or (0, None))."""
        if self.prefix_cache is None:
            return 0, None
        self.cached_tokens, kv = self.prefix_cache.lookup(self.prompt_ids)
        return self.cached_tokens, kv

    def prefill(self) -> tuple[Any, torch.Tensor, list[PrefillToken]]:
        """Run the prompt (what the prefix cache lacks): its KV cache, the last position's logits, prompt details."""
        start = time.perf_counter()
        r = self.runner
        input_ids = r.ids(self.prompt_ids)
        if self.prefix_cache is not None:
            reused, kv = self.cached_prefix()
            all_logits, cache = r.forward(input_ids[:, reused:], kv)
            self.remember_prompt(cache)
        else:
            all_logits, cache = r.forward(input_ids, keep=0 if self.prefill_details else 1)
        logits = all_logits[0, -1].float()
        self.prefill_s = time.perf_counter() - start
        if not self.prefill_details:
            return cache, logits, []
        logprobs = torch.log_softmax(all_logits[0, :-1].float(), dim=-1)
        picked = logprobs.gather(1, input_ids[0, 1:].unsqueeze(1)).squeeze(1).tolist()
        texts = [r.token_piece(i) for i in self.prompt_ids]
        details = [PrefillToken(id=self.prompt_ids[0], text=texts[0], logprob=None)] + [
            PrefillToken(id=i, text=t, logprob=lp) for i, t, lp in zip(self.prompt_ids[1:], texts[1:], picked)
        ]
        top_n = max(row.chooser.top_n for row in self.rows)
        if top_n:  # (one topk for the whole prompt: one per position costs ~0.1 ms each)
            values, ids = torch.topk(logprobs, min(top_n, logprobs.shape[-1]), dim=-1)
            self.prefill_top = [[]] + [
                [Token(id=i, text=r.token_piece(i), logprob=v, special=i in r.special_ids) for v, i in zip(vs, ids_)]
                for vs, ids_ in zip(values.tolist(), ids.tolist())
            ]
        return cache, logits, details

    def chunked(self, chunk: int) -> bool:
        """Whether the prompt prefills in chunks, the batch stepping between them (long, and no prompt details)."""
        return not self.prefill_details and len(self.prompt_ids) > chunk

    def prefill_chunk(self, chunk: int) -> tuple[Any, torch.Tensor] | None:
        """Run the next `chunk` tokens of the prompt (after what the prefix cache holds); once the whole
        prompt has run, its KV cache and last position's logits, else None."""
        start = time.perf_counter()
        if self._partial is None:
            self._partial = self.cached_prefix()
        done, kv = self._partial
        end = min(len(self.prompt_ids), done + chunk)
        logits, kv = self.runner.forward(self.runner.ids(self.prompt_ids[done:end]), kv)
        self._partial = (end, kv)
        self.prefill_s += time.perf_counter() - start
        if end < len(self.prompt_ids):
            return None
        self._partial = None
        self.remember_prompt(kv)
        return kv, logits[0, -1].float()

    def start(self, logits: torch.Tensor) -> list[TokenEvent]:
        """Every row's first token, from the prompt's last logits; no token at all when the budget is 0."""
        if self.stopping.max_new_tokens <= 0:
            for row in self.rows:
                row.finish_reason = "length"
            return []
        events = []
        for i in range(len(self.rows)):
            try:
                events.extend(self._sample(i, logits))
            except PlaygroundError as exc:
                self._fail(i, exc)
        return events

    def feed(self, index: int, alone: bool) -> list[int]:
        """The tokens row `index` runs next: every token whose logits are still needed, or (batched) the first."""
        row = self.rows[index]
        generated = row.generated
        # the last token's logits are needed only while the row goes on
        upto = len(generated) - (1 if row.finish_reason is not None else 0)
        tokens = generated[row.fed : upto]
        return tokens if alone else tokens[:1]

    def mask_work(self, index: int) -> list[tuple[BitmaskProcessor, list[int]]]:
        """The masks row `index` will ask for in this step's `take`, computable before its logits are known:
        (processor, the row's ids then) for each, when the step ends in a sampled token that needs them or in
        fast-forward's probe owed after the last one."""
        row = self.rows[index]
        if row.finish_reason is not None or row.chooser.pending is not None:
            return []
        ids = self.prompt_ids + row.generated
        return [(processor, ids) for processor in row.chooser.bitmask_processors()]

    def take(self, index: int, logits: torch.Tensor, alone: bool = True) -> list[TokenEvent]:
        """The logits after each token just fed (n x vocab): score forced tokens, then sample when none is left.

        In a batch (not `alone`) fast-forward's probe after a sampled token waits for the next step: each row
        feeds one token a step there anyway, and that step's forward computes the mask alongside (mask_work)."""
        row = self.rows[index]
        events: list[TokenEvent] = []
        try:
            for k in range(logits.shape[0]):
                row.fed += 1
                if row.probe_owed:
                    row.probe_owed = False
                    self._append_forced(row)
                if row.unscored and row.unscored[0].key is not None:
                    chosen, kept = self._verify(index, logits[k], alone)
                    events.extend(chosen)
                    if not kept:  # the logits after the refused draft are of tokens no longer in the row
                        break
                elif row.unscored:
                    events.append(self._score_forced(index, logits[k]))
                else:
                    events.extend(self._sample(index, logits[k], alone))
        except PlaygroundError as exc:
            self._fail(index, exc)
        return events

    def _fail(self, index: int, exc: PlaygroundError) -> None:
        """A best_of candidate whose own decoding failed (its constraint's dead end, its step's budget) stops, and
        the others go on: the request fails only when none is left (TGI and vLLM fail the whole request)."""
        if all(row.failure is not None for i, row in enumerate(self.rows) if i != index):
            raise exc
        row = self.rows[index]
        row.failure = exc
        row.finish_reason = row.finish_reason or "length"  # (done: it feeds nothing more; its result is dropped)
        row.unscored.clear()
        row.probe_owed = False

    def remember_prompt(self, kv: Any) -> None:
        """Keep the prompt's KV cache (a retry, best_of or the next-token view starts from it)."""
        if self.prefix_cache is not None:
            self.prefix_cache.store(self.prompt_ids, kv)

    @property
    def keeps_cache(self) -> bool:
        """A lone row's finished sequence goes to the prefix cache (best_of rows are seldom continued)."""
        return self.prefix_cache is not None and len(self.rows) == 1

    def remember(self, kv: Any) -> None:
        """Keep the finished row's KV cache (prompt and the tokens it ran), for the next turn or a retry."""
        row = self.rows[0]
        self.prefix_cache.store(self.prompt_ids + row.generated[: row.fed], kv)

    def _sample(self, index: int, raw: torch.Tensor, alone: bool = True) -> list[TokenEvent]:
        """Choose the row's next token; with fast-forward, append the tokens the constraint forces after it (in a
        batch, at the next step's take)."""
        row = self.rows[index]
        if row.finish_reason is not None:
            return []
        before = self.prompt_ids + row.generated
        key = row.chooser.pending_key
        step = row.chooser.step(row.chooser.row_ids(before), raw, row.text)
        return self._chosen(index, row.chooser.choose(step), step, alone, key)

    def _chosen(
        self,
        index: int,
        token_id: int,
        step: sampling.StepScores,
        alone: bool,
        key: bytes | None,
        refused: bool = False,
    ) -> list[TokenEvent]:
        """The row's choice appended (`key`: the digest of the mask it was chosen under; `refused`: in place of a
        draft); then fast-forward."""
        row = self.rows[index]
        token = row.chooser.record(token_id, self._append(row, token_id), step)
        row.chooser.learn(key, token, refused=refused)
        row.chooser.mark(token, len(row.tokens))
        row.tokens.append(token)
        if row.chooser.fast_forward and row.finish_reason is None:
            if alone:
                self._append_forced(row, drafting=True)
            else:
                row.probe_owed = True
        return [self._event(index, row, token)]

    def _verify(self, index: int, raw: torch.Tensor, alone: bool) -> tuple[list[TokenEvent], bool]:
        """The row's choice at its next draft's position, from the logits there: the draft kept (True) when it is
        the choice, else the choice in its place and the draft dropped with what followed it (False)."""
        row = self.rows[index]
        draft = row.unscored[0]
        before = self.prompt_ids + row.generated[: len(row.tokens)]
        step = row.chooser.step(row.chooser.row_ids(before), raw, draft.text_before, allowed=draft.allowed)
        token_id = row.chooser.choose(step)
        row.drafted += 1
        if token_id != draft.token_id:
            self._drop_unscored(row)
            return self._chosen(index, token_id, step, alone, draft.key, refused=True), False
        row.unscored.pop(0)
        row.accepted += 1
        token = row.chooser.record(token_id, draft.piece, step)
        row.chooser.learn(draft.key, token)
        row.chooser.mark(token, len(row.tokens))
        row.tokens.append(token)
        return [self._event(index, row, token)], True

    def _drop_unscored(self, row: Row) -> None:
        """Every token appended but not scored goes (a refused draft first among them): the row, its text and its
        constraint as they were before them."""
        first = row.unscored[0]
        del row.ids[len(row.ids) - len(row.unscored) :]
        row.unscored.clear()
        row.text, row.emitted = first.text_before, first.emitted_before
        row.finish_reason, row.stop_sequence, row.stop_token = None, None, None
        row.chooser.rewind(len(self.prompt_ids) + len(row.generated))

    @staticmethod
    def _event(index: int, row: Row, token: GeneratedToken) -> TokenEvent:
        """The token's event, with the reasoning text it made known (a thinking model's); `last` once the row is done."""
        gate = row.chooser.gate
        shown = gate.delta(row.text) if gate is not None and token.segment == "reasoning" else ""
        return TokenEvent(index=index, token=token, reasoning=shown, last=row.done)

    def _append_forced(self, row: Row, drafting: bool = False) -> None:
        """The tokens the constraint forces after the row's last; `drafting` (alone), then a draft where the
        constraint leaves a choice, the tokens it forces after that, and so on, up to MAX_CHAIN tokens and MAX_DRAFTS
        (chooser.py) drafts; never two drafts in a row under the same mask (free text: its choices seldom repeat)."""
        drafts, last_key = 0, None
        while True:
            limit = self.stopping.max_new_tokens - len(row.tokens) - len(row.unscored)
            forced = row.chooser.forced(self.prompt_ids + row.generated, limit, row.text)
            for token_id, allowed in forced:
                self._append_unscored(row, token_id, allowed)
                if row.finish_reason is not None:
                    return
            if not drafting or drafts == MAX_DRAFTS or len(row.unscored) >= MAX_CHAIN:
                return
            if not forced and row.chooser.pending_key == last_key:  # a run of free choices (a string): not twice
                return
            drafted = row.chooser.draft()
            if drafted is None:
                return
            token_id, allowed, last_key = drafted
            drafts += 1
            self._append_unscored(row, token_id, allowed, last_key)
            if row.finish_reason is not None:
                return

    def _append_unscored(self, row: Row, token_id: int, allowed: torch.Tensor, key: bytes | None = None) -> None:
        text_before, emitted_before = row.text, row.emitted
        generated = len(row.tokens) + len(row.unscored) + 1
        piece = self._append(row, token_id, generated=generated)
        row.unscored.append(Forced(token_id, allowed, text_before, piece, emitted_before, key))

    def _score_forced(self, index: int, raw: torch.Tensor) -> TokenEvent:
        """A forced token's raw logprob and alternatives, from the logits at its position."""
        row = self.rows[index]
        forced = row.unscored.pop(0)
        before = self.prompt_ids + row.generated[: len(row.tokens)]
        step = row.chooser.step(
            row.chooser.row_ids(before), raw, forced.text_before, allowed=forced.allowed, forced=True
        )
        token = row.chooser.record(forced.token_id, forced.piece, step, forced=True)
        row.chooser.mark(token, len(row.tokens))
        row.tokens.append(token)
        return self._event(index, row, token)

    def _append(self, row: Row, token_id: int, generated: int | None = None) -> str:
        """Add a token to the row, check the stop rules; the piece of text it streams.

        `generated` counts the row's new tokens with this one (by default, those recorded plus one).
        """
        r = self.runner
        row.ids.append(token_id)
        # a character still cut (U+FFFD at the end) becomes itself now without the text growing: what this token
        # added starts where the whole characters end
        before = len(row.text.rstrip("\ufffd"))
        piece = r.token_text(token_id)
        # the model's end of text, or a stop_token_ids token: the answer ends before its text (vLLM's engine leaves a
        # stop token's text out too, unless include_stop_str_in_output), which stays the token's own (`piece`)
        named = token_id in self.stopping.stop_ids and not self.stopping.keep
        if token_id not in r.eos_ids and not named:
            row.text = row.chooser.decode(row.ids)
        generated = len(row.tokens) + 1 if generated is None else generated
        stop = self.stopping.check(token_id, row.text, before, generated, len(row.prefix))
        if stop is not None:
            row.finish_reason, row.stop_sequence, row.stop_token = stop.reason, stop.sequence, stop.token
        if token_id not in r.eos_ids:
            # A character split across tokens decodes as U+FFFD until its last byte arrives: hold it back while
            # the row goes on, so the pieces streamed add up to the text (the last piece carries what is left).
            stable = row.text.rstrip("\ufffd") if stop is None else row.text
            piece = stable[len(row.emitted) :]
            row.emitted = stable
        if row.chooser.gate is not None:
            row.chooser.gate.advance(token_id, row.text)
        return piece
