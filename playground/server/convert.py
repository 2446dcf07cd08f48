"""Result types -> TGI wire shapes, and the TGI request rules checked against a model's /info limits."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from playground.errors import ParameterError
from playground.types import (
    BestOfSequence,
    ChatMessage,
    Details,
    GeneratedToken,
    GenerateParameters,
    GenerateResponse,
    GenerationResult,
    InputText,
    ModelInfo,
    Name,
    Sequence,
    StreamDetails,
    StreamResponse,
    Strict,
    Token,
    TokenEvent,
    check_messages_size,
)
from playground.types.sizes import MAX_MESSAGES, MAX_PREFIX_CHARS

VERSION = "0.1.0"
ROUTER = "structured-playground"


class NextTokenRequest(Strict):
    """Body of POST /next_token: a prompt or messages, optional constraint/processors, a prefix, top_k."""

    inputs: InputText | None = None
    messages: list[ChatMessage] | None = Field(default=None, min_length=1, max_length=MAX_MESSAGES)
    parameters: GenerateParameters = Field(default_factory=GenerateParameters)
    prefix: str = Field(default="", max_length=MAX_PREFIX_CHARS)
    top_k: int = Field(default=20, ge=1, le=200)
    model: Name | None = None

    @field_validator("messages")
    @classmethod
    def _messages_size(cls, messages: list[ChatMessage] | None) -> list[ChatMessage] | None:
        return messages and check_messages_size(messages)

    def prompt(self) -> str | list[ChatMessage]:
        """Exactly one of inputs or messages."""
        if (self.inputs is None) == (self.messages is None):
            raise ParameterError("give exactly one of `inputs` (a prompt) or `messages` (a chat)", field="inputs")
        return self.inputs if self.inputs is not None else list(self.messages or [])


# --- responses ---------------------------------------------------------------------------------------


def tgi_info(
    info: ModelInfo, *, processors: list[dict[str, Any]], models: list[dict[str, str]], max_concurrent_requests: int
) -> dict[str, Any]:
    """TGI's Info, plus our limits and registries as extra keys."""
    return {
        "model_id": info.model_id,
        "model_sha": info.model_sha,
        "model_pipeline_tag": "text-generation",
        "max_concurrent_requests": max_concurrent_requests,  # in flight (working + queued); more get 429
        "max_best_of": info.max_best_of,
        "max_stop_sequences": info.max_stop_sequences,
        "max_input_tokens": info.max_input_tokens,
        "max_total_tokens": info.max_total_tokens,
        "validation_workers": 1,
        "max_client_batch_size": 1,
        "router": ROUTER,
        "version": VERSION,
        "sha": None,
        "docker_label": None,
        "max_top_n_tokens": info.max_top_n_tokens,
        "provider_id": info.provider_id,
        "provider_type": info.provider_type,
        "device": info.device,
        "compile_limits": info.compile_limits,
        "prefix_cache": info.prefix_cache,
        "batch": info.batch,
        "reasoning": info.reasoning,
        "tool_format": info.tool_format,  # the envelope its chat template writes tool calls in, if known
        "processors": processors,
        "models": models,
    }


def token_json(token: GeneratedToken, params: GenerateParameters) -> dict[str, Any]:
    """TGI's Token plus what the model wanted (raw logprob, its top-n when asked) and the mass the constraint kept."""
    body = {
        "id": token.id,
        "text": token.text,
        "logprob": token.logprob,
        "special": token.special,
        "raw_logprob": token.raw_logprob,
        "mass_kept": token.mass_kept,
        "forced": token.forced,
    }
    if token.segment is not None:
        body["segment"] = token.segment
    if params.top_n_tokens:
        body["raw_top_tokens"] = [plain_token(t) for t in token.raw_top_tokens[: params.top_n_tokens]]
    return body


def plain_token(token: Token) -> dict[str, Any]:
    return {"id": token.id, "text": token.text, "logprob": token.logprob, "special": token.special}


def _top_tokens(tokens: list[GeneratedToken]) -> list[list[dict[str, Any]]]:
    return [[plain_token(t) for t in token.top_tokens] for token in tokens]


def _full_text(result: GenerationResult, seq: Sequence, params: GenerateParameters) -> str:
    """TGI's generated_text; return_full_text: after the prompt, and the answer it continued (continue_from)."""
    if not params.return_full_text:
        return seq.generated_text
    return result.prompt + (seq.continued_from or "") + seq.generated_text


def _sequence_details(result: GenerationResult, seq: Sequence, params: GenerateParameters) -> dict[str, Any]:
    """The fields TGI's Details and BestOfSequence share, plus our per-sequence extras."""
    body: dict[str, Any] = {
        "finish_reason": seq.finish_reason,
        "generated_tokens": seq.generated_tokens,
        "seed": seq.seed,
        "prefill": [p.model_dump() for p in result.prefill] if params.decoder_input_details else [],
        "tokens": [token_json(t, params) for t in seq.tokens],
        "stop_sequence": seq.stop_sequence,
        "stop_token": seq.stop_token,  # the stop_token_ids token that ended it (finish_reason eos_token)
        "total_logprob": seq.total_logprob,
        "validation": seq.validation.model_dump(),
        **reasoning_extras(seq),
    }
    if params.top_n_tokens:
        body["top_tokens"] = _top_tokens(seq.tokens)
    return body


def reasoning_extras(seq: Sequence) -> dict[str, Any]:
    """A thinking model's reasoning span (where the constraint engaged, what ended the reasoning), when there is one."""
    return {"reasoning": seq.reasoning.model_dump()} if seq.reasoning is not None else {}


def wants_details(params: GenerateParameters) -> bool:
    """TGI answers with details only when the request asked (its `details` field defaults to false on the wire)."""
    return ("details" in params.model_fields_set and params.details) or params.decoder_input_details


def result_extras(result: GenerationResult) -> dict[str, Any]:
    """Our extras at the top level of a response: the verdict, the engine and where the time went."""
    return {
        "validation": result.best.validation.model_dump(),
        "constraint_kind": result.constraint_kind,
        "constraint_engine": result.constraint_engine,
        "warnings": list(result.warnings),
        "model_id": result.model_id,
        "provider_id": result.provider_id,
        "timings": result.timings.model_dump(),
        **debugger_extras(result.best),
    }


def debugger_extras(seq: Sequence) -> dict[str, Any]:
    """Confidence per JSON field and the prefix a continuation started from, when there are any."""
    extras: dict[str, Any] = {}
    if seq.fields is not None:
        extras["fields"] = [f.model_dump() for f in seq.fields]
    if seq.continued_from is not None:
        extras["continued_from"] = seq.continued_from
    return extras


def generate_response(result: GenerationResult, params: GenerateParameters) -> dict[str, Any]:
    """TGI's GenerateResponse for /generate."""
    details = None
    if wants_details(params):
        details = Details(**_sequence_details(result, result.best, params))
        if params.best_of and params.best_of > 1:
            details.best_of_sequences = [
                BestOfSequence(
                    generated_text=_full_text(result, seq, params),
                    **_sequence_details(result, seq, params),
                )
                for seq in result.best_of_sequences
            ]
    response = GenerateResponse(
        generated_text=_full_text(result, result.best, params), details=details, **result_extras(result)
    )
    return response.model_dump(exclude_unset=True)


def _stream_response(index: int, event: TokenEvent, params: GenerateParameters, **final: Any) -> StreamResponse:
    return StreamResponse(
        index=index,
        token=token_json(event.token, params),
        top_tokens=[plain_token(t) for t in event.token.top_tokens] if params.top_n_tokens else [],
        generated_text=None,
        details=None,
        **final,
    )


def stream_token_event(index: int, event: TokenEvent, params: GenerateParameters) -> dict[str, Any]:
    """One TGI StreamResponse for a token that is not the last."""
    return _stream_response(index, event, params).model_dump(exclude_unset=True)


def stream_final_event(
    index: int, last: TokenEvent | None, result: GenerationResult, params: GenerateParameters
) -> dict[str, Any]:
    """The last StreamResponse: the last token, plus generated_text and (when asked) StreamDetails."""
    if last is None:  # a provider that produced no token events: the final event still carries the text
        last = TokenEvent(index=0, token=GeneratedToken(id=0, text="", logprob=None, special=True))
    details = None
    if wants_details(params):
        details = StreamDetails(
            finish_reason=result.best.finish_reason,
            generated_tokens=result.best.generated_tokens,
            input_length=result.input_length,
            seed=result.best.seed,
            stop_sequence=result.best.stop_sequence,
            **reasoning_extras(result.best),
        )
    event = _stream_response(index, last, params, **result_extras(result))
    event.generated_text = _full_text(result, result.best, params)
    event.details = details
    return event.model_dump(exclude_unset=True)
