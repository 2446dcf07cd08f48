"""TGI's request and response shapes (/generate, /generate_stream), with our extras as extra keys."""

from __future__ import annotations

from pydantic import BaseModel, Field

from playground.types.base import FinishReason, InputText, ResponseBody, Strict
from playground.types.params import GenerateParameters
from playground.types.sizes import MAX_BEST_OF, MAX_STOP_SEQUENCES, MAX_TOP_N_TOKENS


class PrefillToken(BaseModel):
    """TGI's PrefillToken: a prompt token and its logprob given the tokens before it."""

    id: int
    text: str
    logprob: float | None = None


class Token(PrefillToken):
    """TGI's Token: a PrefillToken's fields, and whether it is special."""

    special: bool = False


class ResponseToken(Token, ResponseBody):
    """A Token on the wire, keeping our extras (raw_logprob, mass_kept, raw_top_tokens)."""


class _SequenceDetails(ResponseBody):
    """The fields TGI's Details and BestOfSequence share."""

    finish_reason: FinishReason
    generated_tokens: int
    seed: int | None = None
    prefill: list[PrefillToken] = Field(default_factory=list)
    tokens: list[ResponseToken] = Field(default_factory=list)
    top_tokens: list[list[Token]] | None = None


class BestOfSequence(_SequenceDetails):
    """TGI's BestOfSequence, as /generate returns it."""

    generated_text: str


class Details(_SequenceDetails):
    """TGI's Details of a /generate response."""

    best_of_sequences: list[BestOfSequence] | None = None


class GenerateResponse(ResponseBody):
    """TGI's GenerateResponse."""

    generated_text: str
    details: Details | None = None


class StreamDetails(ResponseBody):
    """TGI's StreamDetails, on the last event of /generate_stream."""

    finish_reason: FinishReason
    generated_tokens: int
    input_length: int
    seed: int | None = None


class StreamResponse(ResponseBody):
    """TGI's StreamResponse: one server-sent event of /generate_stream."""

    index: int
    token: ResponseToken
    top_tokens: list[Token] = Field(default_factory=list)
    generated_text: str | None = None
    details: StreamDetails | None = None


class GenerateRequest(Strict):
    """TGI's GenerateRequest."""

    inputs: InputText
    parameters: GenerateParameters = Field(default_factory=GenerateParameters)
    stream: bool = False


class ModelInfo(BaseModel):
    """What /info reports about one served model."""

    model_id: str
    provider_id: str
    provider_type: str
    max_input_tokens: int
    max_total_tokens: int
    max_best_of: int = MAX_BEST_OF
    max_stop_sequences: int = MAX_STOP_SEQUENCES
    max_top_n_tokens: int = MAX_TOP_N_TOKENS
    model_sha: str | None = None
    device: str | None = None
    compile_limits: dict[str, float | int] | None = None  # local engines: timeout_s, memory_mb, workers
    prefix_cache: dict[str, int | str] | None = None  # local engines: budget, bytes held (coarse), scope "client"
    batch: dict[str, int] | None = None  # local engines: scheduler.usage() and batch_weights_mb
    reasoning: dict[str, str] | None = None  # a thinking model's delimiters: family, start, end
    tool_format: str | None = None  # the tool-call envelope the chat template writes (playground.wire.tool_formats)
