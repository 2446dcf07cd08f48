"""The checks every surface applies before any work starts, worded once.

TGI's validation with the limits /info reports: best_of needs sampling and may not stream, top-n and
stop sequences within the model's limits, max_new_tokens leaving room in the context.
"""

from __future__ import annotations

from playground.errors import ParameterError, PromptTooLongError, context_phrase
from playground.types import GenerateParameters, ModelInfo
from playground.wire.controls import SAMPLING

_WARPERS = ", ".join(c.name for c in SAMPLING if c.warper)


def check_best_of(
    params: GenerateParameters, max_best_of: int | None = None, *, field: str = "parameters.best_of"
) -> None:
    """best_of > 1 samples several candidates: identical greedy ones would be pointless (TGI refuses them).

    `max_best_of` None: the limit is a remote server's to check.
    """
    best_of = params.best_of or 1
    if best_of <= 1:
        return
    if not params.sampling:
        # TGI's body names do_sample and its warpers; an OpenAI body samples unless its temperature is 0
        how = (
            f"do_sample or a sampling parameter ({_WARPERS})" if field.startswith("parameters.") else "temperature > 0"
        )
        raise ParameterError(f"{field}: best_of > 1 needs sampling: set {how}", field=field)
    if max_best_of is not None and best_of > max_best_of:
        raise ParameterError(f"{field}: must be <= {max_best_of} (max_best_of), got {best_of}", field=field)


def check_top_n(params: GenerateParameters, limit: int, *, field: str = "parameters.top_n_tokens") -> None:
    """More alternatives per token than the model reports is an error, not a silent cut."""
    if params.top_n_tokens is not None and params.top_n_tokens > limit:
        raise ParameterError(f"{field}: must be <= {limit}, got {params.top_n_tokens}", field=field)


def check_lengths(params: GenerateParameters, info: ModelInfo, field: str = "parameters.max_new_tokens") -> None:
    """max_new_tokens must leave room for at least one prompt token, and min_tokens fit under it (vLLM refuses more);
    `field` is the name the caller sent max_new_tokens by."""
    if params.max_new_tokens is None:
        return
    if params.max_new_tokens < 1:
        raise ParameterError(f"{field}: must be at least 1", field=field)
    if params.max_new_tokens >= info.max_total_tokens and not field.startswith("parameters."):
        # OpenAI's fields: past the context, whatever the prompt, as OpenAI and vLLM word it for clients' fallbacks
        raise PromptTooLongError(
            f"{context_phrase(info.max_total_tokens)}. However, you requested more than {params.max_new_tokens} "
            f"tokens ({params.max_new_tokens} in {field}, and the prompt's): prompt tokens + {field} must be <= "
            f"{info.max_total_tokens}, and the prompt is too long for that many. Please reduce {field}.",
            field=field,
        )
    if params.max_new_tokens >= info.max_total_tokens:
        raise ParameterError(
            f"{field}: must be < {info.max_total_tokens} (max_total_tokens), got {params.max_new_tokens}", field=field
        )
    if params.min_tokens is not None and params.min_tokens > params.max_new_tokens:
        min_field = f"{field.rpartition('.')[0]}.min_tokens".lstrip(".")
        raise ParameterError(
            f"{min_field}: must be <= {field} ({params.max_new_tokens}), got {params.min_tokens}", field=min_field
        )


def check_limits(params: GenerateParameters, info: ModelInfo, *, streaming: bool) -> None:
    """TGI's validation, with the limits /info reports."""
    if streaming and (params.best_of or 1) > 1:
        raise ParameterError(
            "parameters.best_of: best_of > 1 is not supported when streaming", field="parameters.best_of"
        )
    check_best_of(params, info.max_best_of)
    if streaming and params.decoder_input_details:
        raise ParameterError(
            "parameters.decoder_input_details: not supported when streaming tokens",
            field="parameters.decoder_input_details",
        )
    check_top_n(params, info.max_top_n_tokens)
    if params.return_token_ids:  # (an extension TGI's answer has no place for)
        raise ParameterError(
            "parameters.return_token_ids: an OpenAI route's field (vLLM's); here `details` lists each token's id, "
            "and `decoder_input_details` the prompt's",
            field="parameters.return_token_ids",
        )
    if len(params.stop) > info.max_stop_sequences:
        raise ParameterError(
            f"parameters.stop: at most {info.max_stop_sequences} stop sequences, got {len(params.stop)}",
            field="parameters.stop",
        )
    check_lengths(params, info)


def check_token_ids(as_ids: bool | None, local: bool) -> None:
    """vLLM's return_tokens_as_token_ids names each token by its id: a remote model's come by their text alone."""
    if as_ids and not local:
        raise ParameterError(
            "return_tokens_as_token_ids: a remote model's tokens come by their text alone, without their ids",
            field="return_tokens_as_token_ids",
        )
