"""What every surface renders: sequences, tokens with raw and constrained logprobs, verdicts, next-token views."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_serializer

from playground.types.base import ConstraintKind, FinishReason
from playground.types.tgi import PrefillToken, Token


class GeneratedToken(Token):
    """A generated token with what the model wanted against what the constraint allowed."""

    raw_logprob: float | None = None
    mass_kept: float | None = Field(default=None, description="Raw probability mass the constraint allowed.")
    top_tokens: list[Token] = Field(default_factory=list, description="Top-n after processors and mask (at least 1).")
    raw_top_tokens: list[Token] = Field(default_factory=list, description="Top-n of the model's own distribution.")
    forced: bool = Field(
        default=False, description="Not sampled: the constraint (fast-forward) or the reasoning budget forced it."
    )
    segment: Literal["reasoning", "answer"] | None = Field(
        default=None, description="A thinking model's turn: reasoning (unconstrained) or answer; None otherwise."
    )
    piece: str | None = Field(
        default=None,
        description="The token's own text where its share of the answer (`text`) is not: bytes that are part of a "
        "character (`bytes:\\xe4\\xbd`, as OpenAI writes it; `text` is then '' or the whole character), or whole "
        "characters after bytes that never made one (`text` then starts with U+FFFD); None otherwise.",
    )

    @property
    def overridden(self) -> bool:
        """True when the model's own first choice was not allowed by the constraint."""
        if not self.raw_top_tokens or not self.top_tokens:
            return False
        return self.raw_top_tokens[0].id not in {t.id for t in self.top_tokens if t.logprob is not None}


class FieldConfidence(BaseModel):
    """One leaf value of a JSON answer and how sure the model was of it."""

    path: str = Field(description="JSON path: `address.city`, `tags[0]`; `(root)` for a scalar answer.")
    value: Any
    tokens: int
    prob_min: float = Field(description="Lowest model (raw) probability among the value's tokens.")
    prob_product: float = Field(description="Model (raw) probability of the whole value: product over its tokens.")
    mass_kept_min: float | None = Field(description="Least share of the model's mass the constraint kept.")
    overridden: bool = Field(description="The constraint overrode the model's first choice inside this value.")
    forced: int = Field(description="Tokens the constraint forced (fast-forwarded).")


class SegmentVerdict(BaseModel):
    """The verdict on one constrained segment of an answer (a structural tag's segment, one tool call)."""

    begin: str = Field(description="The marker that opened the segment.")
    start: int = Field(description="Character offset of the segment's content in the answer.")
    end: int = Field(description="Character offset just past the content.")
    content: str
    valid: bool | None
    message: str = ""


class Validation(BaseModel):
    """The verdict on a finished output against its constraint."""

    valid: bool | None = Field(default=None, description="None when there was nothing to check.")
    message: str = ""
    enforced: bool = Field(default=True, description="False when a provider did not enforce the constraint.")
    segments: list[SegmentVerdict] | None = Field(
        default=None, description="Segment constraints: the verdict on each constrained segment, in order."
    )

    @model_serializer(mode="wrap")
    def _segments_when_judged(self, handler: Any) -> dict[str, Any]:
        """`segments` only for a segment constraint: every other verdict keeps its three keys."""
        data = handler(self)
        if data.get("segments") is None:
            data.pop("segments", None)
        return data


class SegmentFigures(BaseModel):
    """What the constraint cost in one segment of a thinking model's turn."""

    tokens: int
    mass_kept_mean: float | None
    mass_kept_min: float | None
    overridden: int = Field(description="Tokens where the model's first choice was not allowed.")
    forced: int = Field(description="Tokens not sampled (the constraint's, or the reasoning's delimiters).")


def segment_figures(tokens: list[GeneratedToken]) -> dict[str, SegmentFigures]:
    """Mass kept, overrides and forced tokens for the answer and the reasoning apart."""
    out = {}
    for segment in ("answer", "reasoning"):
        part = [t for t in tokens if t.segment == segment]
        kept = [t.mass_kept for t in part if t.mass_kept is not None]
        out[segment] = SegmentFigures(
            tokens=len(part),
            mass_kept_mean=sum(kept) / len(kept) if kept else None,
            mass_kept_min=min(kept) if kept else None,
            overridden=sum(1 for t in part if t.overridden),
            forced=sum(1 for t in part if t.forced),
        )
    return out


class ReasoningSpan(BaseModel):
    """Where a thinking model's reasoning ran and how it ended: the constraint engaged at `answer_token`."""

    text: str = Field(description="The reasoning, without its delimiters (vLLM's reasoning_content).")
    tokens: int = Field(description="Tokens of the reasoning segment, its delimiters included.")
    answer_token: int | None = Field(description="Index of the first answer token; None when the answer never began.")
    answer_char: int = Field(description="Where the answer begins in generated_text.")
    ended_by: Literal["model", "budget", "prompt", "length"] = Field(
        description="model: it wrote the end delimiter; budget: max_reasoning_tokens forced it; prompt: the chat "
        "template closed the reasoning (enable_thinking false); length: the turn ended inside the reasoning."
    )
    delimiters: tuple[str, str] = Field(description="The start and end delimiters of this model's reasoning.")
    figures: dict[str, SegmentFigures] = Field(
        default_factory=dict, description="answer and reasoning: mass kept, overrides and forced tokens, apart."
    )


class Sequence(BaseModel):
    """One generated sequence; TGI's BestOfSequence plus our extras."""

    generated_text: str
    finish_reason: FinishReason
    generated_tokens: int
    tokens: list[GeneratedToken] = Field(default_factory=list)
    seed: int | None = None
    stop_sequence: str | None = None
    stop_token: int | None = Field(
        default=None,
        description="The stop_token_ids token that ended it (finish_reason eos_token; vLLM's stop_reason).",
    )
    total_logprob: float = 0.0
    validation: Validation = Field(default_factory=Validation)
    trimmed_validation: Validation | None = Field(
        default=None,
        description="OpenAI's routes leave a matched stop sequence and what follows it out of the text: the verdict "
        "on that shorter text, where a stop sequence cut it ('yes' of the choice 'yes sir').",
    )
    continued_from: str | None = Field(
        default=None, description="The prefix this sequence continues (validated with it)."
    )
    fields: list[FieldConfidence] | None = Field(default=None, description="JSON answers: confidence per field.")
    reasoning: ReasoningSpan | None = Field(default=None, description="A thinking model's reasoning, apart.")

    @property
    def answer(self) -> str:
        """The text the constraint and the verdict judge: after the reasoning, when there is one."""
        return self.generated_text[self.reasoning.answer_char :] if self.reasoning else self.generated_text


class Timings(BaseModel):
    """Where the time went, in seconds."""

    compile_s: float = 0.0
    compile_cached: bool = False  # the compiled constraint came from the cache (compile_s is only the lookup)
    prefill_s: float = 0.0
    time_to_first_token_s: float = 0.0
    total_s: float = 0.0
    tokens_per_s: float = 0.0
    drafted: int = Field(default=0, description="Drafts (fast-forward's) checked against the rows' choices.")
    drafts_kept: int = Field(default=0, description="Drafts the rows chose: their tokens cost no forward of their own.")


class FailedCandidate(BaseModel):
    """A best_of candidate that failed while the others went on."""

    index: int = Field(description="Its place among the candidates, from 0: its seed is the request's seed + index.")
    seed: int | None = None
    generated_tokens: int
    error: str


class GenerationResult(BaseModel):
    """What every surface renders: the chosen sequence, the other candidates and the context."""

    model_id: str
    provider_id: str = "local"
    prompt: str
    input_length: int
    cached_tokens: int | None = Field(
        default=None,
        description="Of the prompt's tokens, those the prefix cache held (not run again); None where not known.",
    )
    prefill: list[PrefillToken] = Field(default_factory=list)
    prompt_ids: list[int] | None = Field(
        default=None,
        description="The token ids the model read before its first new token, when return_token_ids asks (vLLM's "
        "prompt_token_ids).",
    )
    prefill_top_tokens: list[list[Token]] = Field(
        default_factory=list,
        description="The likeliest tokens at each prompt position (top_n_tokens of them; none before the first), "
        "when decoder_input_details asks: what the completions API's echo lists beside each prompt token.",
    )
    best: Sequence
    best_of_sequences: list[Sequence] = Field(default_factory=list)
    failed_candidates: list[FailedCandidate] = Field(
        default_factory=list,
        description="best_of candidates whose own decoding failed while others went on (a constraint's dead end): "
        "left out of best and best_of_sequences, and named in warnings.",
    )
    constraint_kind: ConstraintKind = "none"
    constraint_engine: str | None = None
    warnings: list[str] = Field(default_factory=list, description="Engine fallbacks and grammar warnings.")
    timings: Timings = Field(default_factory=Timings)

    @property
    def generated_text(self) -> str:
        return self.best.generated_text


class TokenEvent(BaseModel):
    """One streamed token of sequence `index` (0 unless best_of > 1)."""

    index: int
    token: GeneratedToken
    reasoning: str = Field(default="", description="Reasoning text this token made known (delimiters left out).")
    last: bool | None = Field(
        default=None,
        description="True on its sequence's last token (the result follows), False on the others; None where the "
        "source cannot tell (a remote stream that sends the finish reason after its last token).",
    )
    prompt_ids: list[int] | None = Field(
        default=None,
        description="On a local request's first token, when return_token_ids asks: the result's `prompt_ids`.",
    )
    prefill: list[PrefillToken] | None = Field(
        default=None,
        description="On a local request's first token, when decoder_input_details asks: the prompt's tokens with "
        "their logprobs (the result's `prefill`), so a stream can send them before the answer (completions' echo).",
    )
    prefill_top_tokens: list[list[Token]] | None = Field(
        default=None, description="Beside `prefill`: the result's `prefill_top_tokens`."
    )


class NextTokenCandidate(BaseModel):
    """One candidate of the next-token distribution."""

    id: int
    text: str
    raw_logprob: float
    logprob: float | None = Field(description="Log-probability after the constraint; None when masked out.")
    allowed: bool


class NextTokenDistribution(BaseModel):
    """The next token's distribution at a position, raw and constrained, without sampling."""

    prefix: str
    candidates: list[NextTokenCandidate]
    mass_kept: float
    allowed_count: int | None = Field(
        description="Tokens the constraint allows here; None where a remote server does not say."
    )
    vocab_size: int | None = Field(description="The model's vocabulary size; None where a remote server does not say.")
