"""Reasoning segments: a thinking model reasons freely, and the constraint engages when its reasoning ends.

A model's reasoning delimiters come from a small table of known families, found in its chat template (or as
added tokens of its tokenizer), or from the operator (`--reasoning`, a providers-file entry's `reasoning`).
Per request, a ReasoningPlan says how the turn starts: inside the reasoning (the template's generation prompt
opened it, or `think_first` did), with the start delimiter still to write (a Qwen3-style template expects the
model to open it: it is forced), or in the answer (the template closed it: `enable_thinking` false). Per row, a
ReasoningGate holds the row's own processors (the constraint) back while the row reasons, forces the end
delimiter once `max_reasoning_tokens` are spent, and marks each token's segment. Nothing here knows the
constraint engine: a held-back processor simply is not called, so its first call is the answer's first token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.decoding.reasoning_formats import BY_FAMILY, FAMILIES, PLAIN_THINK, ReasoningFormat
from playground.decoding.runner import RowText, text_joins
from playground.errors import ModelError, ParameterError
from playground.types import GeneratedToken, GenerateParameters, ReasoningSpan, segment_figures

THINK_FIRST_BUDGET = 128  # think_first without max_reasoning_tokens: this many tokens of thought at most


def model_format(tokenizer: Any, setting: str = "auto") -> ReasoningFormat | None:
    """The model's reasoning delimiters: `auto` (known families in its chat template, or as added tokens),
    `none`, a family name, or `START,END` for any other pair."""
    setting = (setting or "auto").strip()
    if setting == "none":
        return None
    if setting in BY_FAMILY:
        return BY_FAMILY[setting]
    if setting != "auto":
        start, _, end = setting.partition(",")
        if not start.strip() or not end.strip():
            known = ", ".join(BY_FAMILY)
            raise ModelError(f"reasoning: {setting!r} is not auto, none, a family ({known}) or START,END")
        return ReasoningFormat("custom", start.strip(), end.strip())
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates: the default one speaks for the model
        template = template.get("default") or next(iter(template.values()), None)
    for fmt in (f for f in FAMILIES if f.auto):
        if isinstance(template, str) and (fmt.start.strip() in template or fmt.end in template):
            return fmt
    added = set(tokenizer.get_added_vocab()) if hasattr(tokenizer, "get_added_vocab") else set()
    return next((f for f in FAMILIES if f.start in added and f.end in added), None)


def _opened(fmt: ReasoningFormat, text: str) -> bool | None:
    """True when `text` leaves a reasoning block open, False when it closes one, None when it has neither."""
    start, end = text.rfind(fmt.start.strip()), text.rfind(fmt.end)
    if start < 0 and end < 0:
        return None
    return start > end


@dataclass
class ReasoningPlan:
    """How one request's rows reason: the delimiters, how the turn starts, the budget, what is held back."""

    fmt: ReasoningFormat
    tokenizer: Any
    opening: list[int]  # tokens forced first (the start delimiter the model is expected to write); [] if open
    closing: list[int]  # tokens a spent budget forces
    budget: int | None
    closed_by_prompt: bool  # the prompt closed the reasoning: the answer (and the constraint) starts at once
    hold_eos: bool  # a constraint awaits the answer: no end of text while reasoning
    keep: dict[int, str] = field(default_factory=dict)  # special tokens of the delimiters, kept in the text

    def gate(self) -> ReasoningGate:
        """A fresh per-row gate."""
        return ReasoningGate(self)

    def decode(self, ids: list[int], text: Callable[[list[int]], str] | None = None) -> str:
        """The row's text, its delimiters kept even where they are special tokens (left out of other text);
        `text` decodes the runs between them (by default, without special tokens)."""
        text = text or (lambda run: self.tokenizer.decode(run, skip_special_tokens=True))
        if not self.keep:
            return text(ids)
        parts, run = [], []
        for token_id in ids:
            if token_id in self.keep:
                parts.append(text(run))
                parts.append(self.keep[token_id])
                run = []
            else:
                run.append(token_id)
        parts.append(text(run))
        return "".join(parts)


def plan(
    fmt: ReasoningFormat | None,
    tokenizer: Any,
    params: GenerateParameters,
    prompt: str,
    generation_prompt: str | None,
) -> tuple[ReasoningPlan | None, str]:
    """The request's plan and its prompt (think_first may open a block at its end).

    `generation_prompt` is what the chat template's assistant header added (None for a plain prompt: the
    prompt alone says whether reasoning is open). A continued answer (continue_from) is past any reasoning.
    """
    budget, think_first = params.max_reasoning_tokens, params.think_first
    constrained = params.grammar is not None or bool(params.logits_processors)
    continued = bool(params.continue_from)
    if think_first and fmt is None:
        fmt, budget = PLAIN_THINK, THINK_FIRST_BUDGET if budget is None else budget
    if fmt is None:
        if budget:  # (0: no reasoning, which a model without any already does: reasoning_effort "none")
            raise ParameterError(
                "max_reasoning_tokens (or reasoning_effort): this model writes no reasoning (no known delimiters in "
                "its chat template: the operator names them with --reasoning, or a chat request asks for think_first)",
                field="max_reasoning_tokens",
            )
        return None, prompt
    tail = prompt if generation_prompt is None else generation_prompt
    opened = _opened(fmt, tail)
    if think_first and opened is False:
        raise ParameterError(
            "think_first: the chat template closed the reasoning (enable_thinking false?)", field="think_first"
        )
    if think_first and opened is None:
        prompt, opened = prompt + fmt.start, True
    closed = continued or opened is False or (opened is None and generation_prompt is None)
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    keep = {}
    special = set(getattr(tokenizer, "all_special_ids", ()))
    for text in {fmt.start, fmt.end, fmt.forced_close}:
        for token_id in encode(text):
            if token_id in special:
                keep[token_id] = tokenizer.convert_ids_to_tokens(token_id)
    result = ReasoningPlan(
        fmt=fmt,
        tokenizer=tokenizer,
        opening=[] if opened or closed else encode(fmt.start),
        closing=encode(fmt.forced_close),
        budget=budget,
        closed_by_prompt=closed,
        hold_eos=constrained,
        keep=keep,
    )
    return result, prompt


class ReasoningGate:
    """One row's reasoning state: which segment the next token is in, and what must be forced next."""

    def __init__(self, plan: ReasoningPlan) -> None:
        self.plan = plan
        self.reasoning = not plan.closed_by_prompt
        self.queue: list[int] = list(plan.opening) if self.reasoning else []
        self.closing = False  # the budget is forcing the end delimiter
        self.count = 0  # reasoning tokens so far
        self.segments: list[str] = []  # per token of the row, in order
        self.forced: list[bool] = []  # per token: forced by this gate (the opening or the budget's closing)
        self.answer_token: int | None = None if self.reasoning else 0
        self.answer_char: int | None = None if self.reasoning else 0
        self.ended_by = "prompt" if not self.reasoning else "length"
        self.shown = 0  # reasoning characters already streamed
        if self.reasoning and not self.queue and plan.budget is not None and plan.budget <= 0:
            self.closing, self.queue = True, list(plan.closing)  # a block the prompt opened, with no budget: shut

    def allowed(self, vocab_size: int, device: Any) -> torch.Tensor | None:
        """The one token the gate forces next (a delimiter's), as a mask; None when the row chooses freely."""
        if not self.queue:
            return None
        mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        mask[self.queue[0]] = True
        return mask

    def advance(self, token_id: int, text: str) -> None:
        """After a token is appended: its segment, and whether the reasoning ended (`text`: the row's text now)."""
        forced = bool(self.queue) and self.queue[0] == token_id
        if forced:
            self.queue.pop(0)
        self.segments.append("reasoning" if self.reasoning else "answer")
        self.forced.append(forced)
        if not self.reasoning:
            return
        self.count += 1
        if (self.plan.fmt.end in text and not self.queue) or (self.closing and not self.queue):
            self.reasoning = False
            self.answer_token, self.answer_char = len(self.segments), len(text)
            self.ended_by = "budget" if self.closing else "model"
        elif self.plan.budget is not None and self.count >= self.plan.budget and not self.closing and not self.queue:
            self.closing = True
            self.queue = list(self.plan.closing)

    def replay(self, ids: list[int]) -> int:
        """Walk a prefix of the row as decoding would have (the next-token view); where its answer starts."""
        text = RowText(self.plan.decode, text_joins(self.plan.tokenizer))  # each token's text, not the whole prefix's
        for k, token_id in enumerate(ids):
            self.advance(token_id, text(ids[: k + 1]))
        return self.answer_token if self.answer_token is not None else len(ids)

    def text(self, full: str) -> str:
        """The reasoning in the row's text, without its delimiters."""
        fmt = self.plan.fmt
        body = full[: self.answer_char] if self.answer_char is not None else full
        start = body.find(fmt.start.strip())
        if start >= 0:
            body = body[start + len(fmt.start.strip()) :]
        for marker in (fmt.forced_close, fmt.end):
            cut = body.find(marker)
            if cut >= 0:
                body = body[:cut]
        return body

    def delta(self, full: str) -> str:
        """Reasoning text not streamed yet, holding back a tail that may still become the end delimiter."""
        body = self.text(full)
        if self.reasoning:
            for marker in (self.plan.fmt.end, self.plan.fmt.forced_close):
                for size in range(min(len(marker) - 1, len(body)), 0, -1):
                    if marker.startswith(body[-size:]):
                        body = body[:-size]
                        break
        out = body[self.shown :] if len(body) > self.shown else ""
        self.shown = max(self.shown, len(body))
        return out

    def split(
        self, text: str, tokens: list[GeneratedToken], prefix: int
    ) -> tuple[str, list[GeneratedToken], ReasoningSpan]:
        """The row's answer (what the verdict judges), its tokens, and the reasoning span (`prefix`: continued chars)."""
        start = self.answer_char if self.answer_char is not None else len(text)
        span = ReasoningSpan(
            text=self.text(text),
            tokens=self.segments.count("reasoning"),
            answer_token=self.answer_token,
            answer_char=max(0, start - prefix),
            ended_by=self.ended_by,  # type: ignore[arg-type]
            delimiters=(self.plan.fmt.start.strip(), self.plan.fmt.end),
            figures=segment_figures(tokens),
        )
        answer_tokens = tokens[self.answer_token :] if self.answer_token is not None else []
        return text[start:], answer_tokens, span
