"""One row's per-step pipeline (TGI's NextTokenChooser): shared processors, the row's own processors and
constraint, the JSON EOS gate, warpers, the choice, and the token record.

Decoding and the next-token view both score through a TokenChooser, so the chart shows exactly what
decoding would allow. A step is `scores = chooser.step(ids, logits, text)`, then `chooser.choose(scores)`
and `chooser.record(token_id, piece, scores)`; the chooser keeps the row's processor state between steps.

Fast-forward: after a chosen token, `chooser.forced(ids, limit)` returns the tokens the constraint forces
next (llguidance's forced tokens, or a mask that allows one token), each with its position's mask; the
decoder appends them without sampling, runs them through the model in one forward, and scores each with
`chooser.step(..., allowed=mask)` to record its raw logprob and alternatives.

Drafts: where the constraint leaves a choice, a lone row (rows.py) may draft the token it chose the last time its
constraint allowed exactly the same tokens (`draft`: after a key `":`, after a value `,`), and run it with what the
constraint forces after it in the same forward. The row's choice there is made as ever, from the logits at its
position; a draft it does not choose is undone (`rewind`), with everything after it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from playground.constraints import Constraint
from playground.constraints.backends.bitmask import BitmaskProcessor
from playground.decoding import sampling
from playground.decoding.key_gate import KeyGate
from playground.decoding.reasoning import ReasoningGate
from playground.decoding.row_budget import RowBudget, walked
from playground.decoding.runner import ModelRunner, RowIds, RowText
from playground.errors import ParameterError, UnenforcedKeywordError
from playground.types import GeneratedToken, GenerateParameters

# The most drafts a row has appended and not yet verified (one forward's).
MAX_DRAFTS = 8
# A sampling row drafts a choice again where it drew it with at least this probability (its final distribution).
DRAFT_MIN_P = 0.5
DRAFT_MIN_LOGPROB = math.log(DRAFT_MIN_P)

# The EOS gate's verdict runs inside the batch's step: it may spend this long, then the gate stops for the row.
GATE_BUDGET_S = 0.05


class TokenChooser:
    """Scores, picks and records one row's next token; stateful (the constraint walks with the row)."""

    def __init__(
        self,
        runner: ModelRunner,
        params: GenerateParameters,
        processors: list[Any],
        constraint: Constraint,
        prompt_length: int,
        generator: torch.Generator | None = None,
        *,
        fast_forward: bool = False,
        gate: ReasoningGate | None = None,
    ) -> None:
        self.runner = runner
        self.gate = gate  # a thinking model's reasoning: the row's processors wait for the answer
        self.processors = processors
        self.constraint = constraint
        self.sampling = params.sampling
        self.generator = generator
        self.top_n = max(params.top_n_tokens or 0, 1)
        self.shared = sampling.shared_processors(
            params, runner.vocab_size, runner.device, prompt_length, runner.eos_ids, lambda t: runner.encode_words(t)
        )
        # the tokens that end the row: never forced or drafted, so that min_tokens holds them off as it holds EOS
        self.end_ids = frozenset(runner.eos_ids) | frozenset(params.stop_token_ids or ())
        self.warpers = sampling.warpers(params)
        # Only a lone constraint processor can be probed ahead: custom processors may change any logit.
        self.fast_forward = fast_forward
        self.pending: torch.Tensor | None = None  # the next position's allowed tokens, already probed
        self.pending_key: bytes | None = None  # that mask's digest, where the row drafts
        # a mask's digest -> the token chosen there last, None once a draft there was refused (start_drafts)
        self.drafts: dict[bytes, int | None] | None = None
        self.key_gate = KeyGate(runner) if constraint.kind == "json_schema" else None  # no key twice in an object
        self.budget = RowBudget()  # the constraint work this row may do in the batch's steps
        self.gate_stopped = False  # the EOS gate gave up on this row (a verdict past its step budget)
        self.warnings: list[str] = []  # this row's, for the result's warnings
        self.compile_notes: list[str] = []  # what compiling said (an engine fell back, keywords it ignores)
        self.masks_only = all(isinstance(p, BitmaskProcessor) for p in processors)  # they only put tokens at -inf
        self._length = prompt_length  # the row's length at its last step
        self.row_ids = RowIds(runner.device)  # the row's ids as a tensor, for its steps and probes
        self._text = RowText(self._whole_text, runner.text_joins)  # the row's text, decoded as its tokens arrive

    def step(
        self,
        ids: torch.Tensor,
        logits: torch.Tensor,
        text: str,
        *,
        warp: bool = True,
        allowed: torch.Tensor | None = None,
        forced: bool = False,
    ) -> sampling.StepScores:
        """The row's distributions for the next token: `ids` is the row so far (1 x L), `text` its text.

        `allowed` is a mask probed ahead (a forced token's position, a draft's): it stands in for the row's
        processors. `forced`: the token is the constraint's, only scored (the key gate leaves it be).
        """
        self._length = ids.shape[-1]  # (min_tokens' reading, should nothing be left to choose)
        scores = self.shared(ids, logits.unsqueeze(0).clone())[0] if len(self.shared) else logits
        if self.gate is not None and self.gate.reasoning and allowed is None:
            return self._reasoning_step(ids, logits, scores, warp)
        if self.gate is not None:  # the verdict, and so the EOS gate, judge the answer alone
            text = text[self.gate.answer_char or 0 :]
        if allowed is None and self.pending is not None:
            allowed, self.pending, self.pending_key = self.pending, None, None
        with self.budget.step(earlier_s=self._prepared_s()):
            masked = sampling.only(scores, allowed) if allowed is not None else self.mask(ids, scores)
            gated = self.gate_eos(masked, text)
            if self.key_gate is not None and not forced:
                keyed = self.key_gate.apply(gated, text)
                if keyed is not gated and not bool(torch.isfinite(keyed).any()):
                    raise UnenforcedKeywordError(
                        "the constraint engine allows nothing here but a key this object already has: JSON Schema "
                        "judges one value per key, so the answer could not be valid"
                    )
                gated = keyed
        if gated is not masked and not bool(torch.isfinite(gated).any()):
            notes = f" ({'; '.join(self.compile_notes)})" if self.compile_notes else ""
            raise UnenforcedKeywordError(
                f"the output breaks the schema ({self.constraint.validate(text, GATE_BUDGET_S).message}) and the constraint "
                f"engine allows nothing but its end: the engine does not enforce every keyword of this schema{notes}"
            )
        chain = self.warpers if warp else sampling.LogitsProcessorList()
        # nothing touched the logits (each stage returns its input unchanged): one softmax serves both
        untouched = gated is logits and not len(chain)
        # a mask and the EOS gate only put tokens at -inf; penalties and custom processors may change any logit
        filled = scores is logits and (allowed is not None or self.masks_only)
        return sampling.score_row(logits, gated, chain, ids, untouched=untouched, filled=filled)

    def _reasoning_step(
        self, ids: torch.Tensor, logits: torch.Tensor, scores: torch.Tensor, warp: bool
    ) -> sampling.StepScores:
        """A reasoning token: no constraint, only the delimiter the gate forces, and no end while an answer is owed."""
        masked = scores
        forced = self.gate.allowed(scores.shape[0], scores.device)
        if forced is not None:
            masked = scores.masked_fill(~forced, sampling.NEG_INF)
        elif self.gate.plan.hold_eos:
            eos = [t for t in self.runner.eos_ids if t < scores.shape[0]]
            masked = scores.clone()
            masked[eos] = sampling.NEG_INF
        chain = self.warpers if warp else sampling.LogitsProcessorList()
        untouched = masked is logits and not len(chain)
        return sampling.score_row(logits, masked, chain, ids, untouched=untouched, filled=scores is logits)

    def decode(self, ids: list[int]) -> str:
        """The row's text (a tool-call envelope's markup kept); a thinking model's keeps its reasoning delimiters even
        when they are special tokens. Called with the row's ids as they grow, it decodes only the new ones where
        the tokenizer allows (runner.RowText)."""
        return self._text(ids)

    def _whole_text(self, ids: list[int]) -> str:
        if self.gate is not None:
            return self.gate.plan.decode(ids, self.runner.text)
        return self.runner.text(ids)

    def mark(self, token: GeneratedToken, index: int) -> GeneratedToken:
        """The token's segment (reasoning or answer) and whether the gate forced it; `index`: its place in the row."""
        if self.gate is not None and index < len(self.gate.segments):
            token.segment = self.gate.segments[index]  # type: ignore[assignment]
            token.forced = token.forced or self.gate.forced[index]
        return token

    def mask(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """The row's own processors (custom ones, then the constraint); advances their state by one token."""
        if not self.processors:
            return scores
        return sampling.apply_row_processors(self.processors, ids, scores.unsqueeze(0))[0]

    def bitmask_processors(self) -> list[BitmaskProcessor]:
        """The row's processors whose masks a batch step may compute ahead, all rows together (none while a thinking
        model reasons: its processors wait for the answer)."""
        if self.gate is not None and self.gate.reasoning:
            return []
        return [p for p in self.processors if isinstance(p, BitmaskProcessor)]

    def _prepared_s(self) -> float:
        """The time masks computed ahead for this row took (billed once, to the step that uses them)."""
        spent = 0.0
        for processor in self.bitmask_processors():
            spent, processor.prepared_s = spent + processor.prepared_s, 0.0
        return spent

    def allowed(self, ids: torch.Tensor) -> torch.Tensor:
        """The tokens the row's processors allow after `ids` (bools over the vocabulary), without any scores."""
        if len(self.processors) == 1 and isinstance(self.processors[0], BitmaskProcessor):
            return self.processors[0].allowed(ids, self.runner.vocab_size).to(self.runner.device)
        return sampling.finite(self.mask(ids, torch.zeros(self.runner.vocab_size, device=self.runner.device)))

    def gate_eos(self, masked: torch.Tensor, text: str) -> torch.Tensor:
        """Allow EOS only when the text so far passes the final check.

        Only JSON schemas need it: engines may skip schema keywords they can't enforce, while their
        regex, choice and grammar masks are exact. When EOS was all the mask allowed, nothing is left:
        `step` then fails the request rather than end it with text that breaks the schema.
        """
        if self.constraint.kind != "json_schema":
            return masked
        eos_allowed = [t for t in self.runner.eos_ids if t < masked.shape[0] and torch.isfinite(masked[t])]
        if not self.eos_refused(eos_allowed, text):
            return masked
        masked = masked.clone()
        masked[eos_allowed] = sampling.NEG_INF
        return masked

    def eos_refused(self, eos_allowed: list[int], text: str) -> bool:
        """Whether the gate takes away the EOS tokens the mask allows (`eos_allowed`): the text fails the check."""
        if not eos_allowed or self.constraint.kind != "json_schema" or self.gate_stopped:
            return False
        verdict = self.constraint.validate(text, budget_s=GATE_BUDGET_S)
        if verdict.valid is None:  # too costly to decide at every step: the final verdict (off the batch) decides
            self.gate_stopped = True
            self.warnings.append(f"the JSON end-of-text gate stopped ({verdict.message}); the final verdict decides")
        return verdict.valid is False

    def choose(self, step: sampling.StepScores) -> int:
        """Greedy argmax or a draw from the row's seeded generator."""
        try:
            return sampling.choose(step, self.sampling, self.generator)
        except ParameterError:
            # the constraint allows only the end here, and min_tokens holds the end off: name the field at fault
            held = [p for p in self.shared if isinstance(p, sampling.MinTokens) and p.holds(self._length)]
            if not held:
                raise
            raise ParameterError(
                f"min_tokens: the constraint allows nothing but the end of the answer after "
                f"{self._length - held[0].prompt_length} tokens, and min_tokens ({held[0].min_tokens}; ignore_eos sets it "
                "to max_tokens) holds the end off: lower it, or loosen the constraint",
                field="min_tokens",
            ) from None

    def record(self, token_id: int, text: str, step: sampling.StepScores, *, forced: bool = False) -> GeneratedToken:
        """What the panels show for the chosen (or, with `forced`, fast-forwarded) token."""
        r = self.runner
        token = sampling.token_record(token_id, text, step, self.top_n, r.token_piece, r.special_ids)
        token.forced = forced
        return token

    def forced(self, ids: list[int], limit: int, text: str = "") -> list[tuple[int, torch.Tensor]]:
        """The tokens the constraint forces after `ids` (at most `limit`, never EOS), each with its mask; `text` is
        the row's text so far, for the key gate: a forced token that would write a key twice is left to the next
        step, where the gate refuses it.

        Probing advances the row's processors past them; the mask after the last one waits in `pending`.
        While the row reasons the constraint waits, and forces nothing.
        """
        if self.gate is not None and self.gate.reasoning:
            return []
        if self.gate is not None:
            text = text[self.gate.answer_char or 0 :]
        out: list[tuple[int, torch.Tensor]] = []
        ids = list(ids)
        while True:
            with self.budget.step("probing the tokens the constraint forces"):
                allowed = self.allowed(self.row_ids(ids))
                token = self._forced_token(allowed) if len(out) < limit else None
                if token is not None and self.key_gate is not None:
                    if token in self.key_gate.refused(text, allowed.shape[0]):
                        token = None
                    else:
                        text += self.runner.token_text(token)  # (its marks are what the gate reads)
            if token is None:
                self.pending, self.pending_key = allowed, self._key()
                return out
            out.append((token, allowed))
            ids.append(token)

    def start_drafts(self) -> None:
        """Draft from now on (a lone row's decode, rows.py), where the row can undo a draft: fast-forward on, one
        constraint engine's bitmask and no reasoning gate."""
        single = len(self.processors) == 1 and isinstance(self.processors[0], BitmaskProcessor)
        single = single and self.processors[0].rewinds
        if self.fast_forward and single and self.gate is None:
            self.drafts = {}

    def _key(self) -> bytes | None:
        return self.processors[0].key() if self.drafts is not None else None

    def draft(self) -> tuple[int, torch.Tensor, bytes] | None:
        """The token this row chose the last time its constraint allowed exactly what the pending mask allows, with
        that mask and its digest; the position is then the draft's (nothing pending). None without one."""
        if self.drafts is None or self.pending is None or self.pending_key is None:
            return None
        token = self.drafts.get(self.pending_key)
        if token is None or token in self.end_ids or not self.processors[0].allows(token):
            return None
        drafted = (token, self.pending, self.pending_key)
        self.pending, self.pending_key = None, None
        self.processors[0].save(keep=MAX_DRAFTS)
        return drafted

    def learn(self, key: bytes | None, token: GeneratedToken, *, refused: bool = False) -> None:
        """The row chose `token` where the mask's digest was `key`: its next draft for that mask. A draft costs the
        forward every token appended after it when the row does not choose it: a sampling row drafts only what it
        drew with a probability of at least DRAFT_MIN_P, and a mask whose draft was `refused` is not drafted at
        again (the string's characters, a number's digits: they seldom repeat)."""
        if self.drafts is None or key is None or (key in self.drafts and self.drafts[key] is None):
            return
        if refused:
            self.drafts[key] = None
        elif not self.sampling or (token.logprob is not None and token.logprob >= DRAFT_MIN_LOGPROB):
            self.drafts[key] = token.id
        else:
            self.drafts.pop(key, None)

    def rewind(self, length: int) -> None:
        """The constraint back to the row's first `length` tokens (a draft the row did not choose, and what was
        appended after it, undone); nothing is pending."""
        self.processors[0].rewind(length)
        self.pending, self.pending_key = None, None

    def _forced_token(self, allowed: torch.Tensor) -> int | None:
        """llguidance's next forced token (whole forced strings), else the mask's only allowed token."""
        matchers = getattr(self.processors[-1], "ll_matchers", None)
        if matchers:
            forced = matchers[0].compute_ff_tokens()
            token = forced[0] if forced else None
        elif int(allowed.sum()) == 1:
            token = int(allowed.nonzero()[0, 0])
        else:
            return None
        if token is None or token in self.end_ids or not bool(allowed[token]):
            return None
        return token

    def consume(self, start_ids: list[int], token_ids: list[int]) -> int | None:
        """Advance the row's own processors through tokens decided elsewhere (a prefix) after `start_ids`, as decoding
        would have fed them; the index of the first they refuse (none after it is fed)."""
        ids = list(start_ids)
        for k, token_id in enumerate(token_ids):
            walked()
            scores = torch.zeros(self.runner.vocab_size, device=self.runner.device)
            row = self.row_ids(ids)
            if not torch.isfinite(self.mask(row, scores)[token_id]) and not self.accepts(row, token_id):
                return k
            ids.append(token_id)
        return None

    def accepts(self, ids: torch.Tensor, token_id: int) -> bool:
        """Whether the row's processors take `token_id` after `ids` (1 x L) as text written elsewhere, which their
        masks may not offer (BitmaskProcessor.accepts: an engine's mask may keep to one spelling of forced text).
        Only engines' processors can say; a row with others keeps to the masks."""
        processors = self.processors
        bitmasks = [p for p in processors if isinstance(p, BitmaskProcessor)]
        return (
            bool(processors) and len(bitmasks) == len(processors) and all(p.accepts(ids[0], token_id) for p in bitmasks)
        )
