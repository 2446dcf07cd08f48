"""The fate of each chat request field that is not simply implemented: accepted and named in `warnings`
(it cannot change the tokens), or refused by name (ignoring it would silently change the answer).

`null` means unset everywhere (types.chat.Request), so a field sent as null has no fate at all.
"""

from __future__ import annotations

from typing import Any

from playground.errors import ParameterError
from playground.types import ChatCompletionRequest
from playground.types.chat import OpenAISampling
from playground.types.sizes import MAX_CHOICES

# Accepted, and named in the answer's `warnings`: none of them changes which tokens are generated.
IGNORED: dict[str, str] = {
    "metadata": "nothing is stored",
    "store": "nothing is stored",
    "user": "no per-user accounting",
    "service_tier": "one tier",
    "prompt_cache_key": "the prefix cache needs no key",
    "prompt_cache_options": "the prefix cache needs no options",
    "prompt_cache_retention": "the prefix cache keeps what fits",
    "moderation": "no moderation here",
    "safety_identifier": "no per-user accounting",
    "prediction": "a predicted output only saves time",
    "priority": "requests are served in arrival order",
    "request_id": "the answer's id is ours",
    "guided_decoding_backend": "use constraint_engine to choose the engine",
    "spaces_between_special_tokens": "special tokens are left out of the text",
    "mm_processor_kwargs": "text models only",
}
# Options inside structured_outputs / stream_options, accepted the same way.
IGNORED_OPTIONS: dict[tuple[str, str], str] = {
    ("structured_outputs", "disable_fallback"): "constraint_engine chooses the engine",
    ("stream_options", "continuous_usage_stats"): "usage comes in the last chunk (include_usage)",
}


# vLLM's sampling extras that both its chat and completions routes take: their defaults are what we do anyway
VLLM_EXTRAS = "use_beam_search length_penalty"


def vllm_extra_refusal(name: str, value: Any) -> str | None:
    """Why one of VLLM_EXTRAS set to `value` is refused, or None when that value is vLLM's default."""
    if name == "length_penalty":
        return None if value == 1 else "only beam search uses it, and it is not supported"
    return None if value is False else "not supported"


def ignore_eos_refusal(max_tokens: bool, stop_token_ids: list[int] | None) -> str | None:
    """Why ignore_eos (true) is refused, or None: it holds every end off until max_tokens (min_tokens set to it), the
    stop_token_ids' tokens too, where vLLM would still stop at them."""
    if not max_tokens:
        return "needs max_tokens (the answer then has exactly that many tokens)"
    if stop_token_ids:
        return "not with stop_token_ids (it holds their tokens off too, until max_tokens)"
    return None


def _refusal(name: str, value: Any, req: ChatCompletionRequest) -> str | None:
    """Why a field set to `value` is refused, or None when that value is what we do anyway."""
    if name in ("functions", "function_call"):
        return "OpenAI's deprecated form; use tools and tool_choice"
    if name in ("audio", "web_search_options", "documents", "chat_template", "verbosity"):
        return "not supported by this server"
    if name == "modalities":
        return None if value == ["text"] else "only text output is supported"
    if name in VLLM_EXTRAS.split():
        return vllm_extra_refusal(name, value)
    if name in ("echo", "add_special_tokens"):  # (the chat template adds them)
        return None if value is False else "not supported"
    if name == "skip_special_tokens":
        return None if value is True else "special tokens are always left out of the text"
    if name == "ignore_eos" and value is True:
        return ignore_eos_refusal(bool(req.max_tokens or req.max_completion_tokens), req.stop_token_ids)
    if name == "prompt_logprobs" and req.stream:
        return "not available when stream is true (as vLLM)"
    return None


REFUSABLE = (
    "functions function_call audio web_search_options documents chat_template verbosity modalities "
    "echo use_beam_search add_special_tokens "
    "skip_special_tokens length_penalty ignore_eos prompt_logprobs"
).split()


def check_stream_options(req: OpenAISampling) -> None:
    """OpenAI and vLLM refuse stream options on an answer that is not streamed."""
    if req.stream_options is not None and not req.stream:
        raise ParameterError("stream_options: only allowed when stream is true", field="stream_options")


def check(req: ChatCompletionRequest) -> None:
    """Refuse, by name, what would silently change the answer if ignored."""
    if req.n > MAX_CHOICES:
        raise ParameterError(f"n: at most {MAX_CHOICES} choices per request, got {req.n}", field="n")
    if req.top_logprobs and not req.logprobs:
        raise ParameterError("top_logprobs: needs logprobs set to true", field="top_logprobs")
    check_stream_options(req)
    for name in REFUSABLE:
        value = getattr(req, name)
        if value is None:
            continue
        why = _refusal(name, value, req)
        if why:
            raise ParameterError(f"{name}: {why}", field=name)


def option_warnings(req: OpenAISampling) -> list[str]:
    """One line for each option of structured_outputs or stream_options accepted without effect."""
    out = []
    for (part, option), why in IGNORED_OPTIONS.items():
        container = getattr(req, part)
        if container is not None and option in container.model_fields_set:
            out.append(f"{part}.{option}: accepted and ignored ({why})")
    return out


def warnings(req: ChatCompletionRequest) -> list[str]:
    """One line for each field accepted without effect."""
    out = [f"{name}: accepted and ignored ({why})" for name, why in IGNORED.items() if getattr(req, name) is not None]
    out += option_warnings(req)
    if req.listed_logit_bias:
        out.append("logit_bias: a list (TGI's form) names no token: accepted and ignored, as TGI does")
    if req.prompt_logprobs:
        out.append("prompt_logprobs: each position lists the prompt's own token, without alternatives")
    return out
