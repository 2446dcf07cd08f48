"""OpenAI chat completions <-> our types: constraints from response_format, structured_outputs or guided_*."""

from __future__ import annotations

import random
import time
import uuid
from typing import Any, Literal

from pydantic import model_validator

from playground.errors import ParameterError
from playground.server.convert import VERSION, build_parameters
from playground.types import (
    ChatCompletion,
    ChatCompletionRequest,
    GeneratedToken,
    GenerateParameters,
    GenerationResult,
    Sequence,
    Strict,
)

FINISH_REASONS = {"eos_token": "stop", "stop_sequence": "stop", "length": "length"}
MAX_CHOICES = 8
FINGERPRINT = f"structured-playground-{VERSION}"


class ChatResponseFormat(Strict):
    """OpenAI's response_format, and TGI's `{type: json|json_object|regex|json_schema, value}` that
    huggingface_hub's InferenceClient sends."""

    type: Literal["text", "json_object", "json_schema", "json", "regex"]
    json_schema: dict[str, Any] | None = None
    value: Any = None

    @model_validator(mode="after")
    def _complete(self) -> ChatResponseFormat:
        if (
            self.type == "json_schema"
            and not (self.json_schema and "schema" in self.json_schema)
            and self.value is None
        ):
            raise ValueError("type 'json_schema' needs json_schema: {name, schema}")
        if self.type in ("json", "regex") and self.value is None:
            raise ValueError(f"type {self.type!r} needs a value")
        return self


class ChatRequest(ChatCompletionRequest):
    """The chat body we accept: OpenAI's, with vLLM's structured_outputs and TGI's response_format form."""

    response_format: ChatResponseFormat | None = None  # type: ignore[assignment]


def _response_format_grammar(fmt: ChatResponseFormat) -> dict[str, Any] | None:
    if fmt.type == "text":
        return None
    if fmt.type == "regex":
        return {"type": "regex", "value": fmt.value}
    if fmt.type == "json_schema":
        if fmt.json_schema is not None:
            return {"type": "json", "value": fmt.json_schema["schema"]}
        return {"type": "json_schema", "value": fmt.value}
    return {"type": "json", "value": fmt.value if fmt.value is not None else {"type": "object"}}


def constraint_of(req: ChatCompletionRequest) -> dict[str, Any] | None:
    """The grammar a chat request asks for; asking in two places at once is an error naming both."""
    found: list[tuple[str, dict[str, Any] | None]] = []
    if req.response_format is not None and req.response_format.type != "text":
        found.append(("response_format", _response_format_grammar(req.response_format)))  # type: ignore[arg-type]
    so = req.structured_outputs
    if so is not None:
        kind, value = next((k, getattr(so, a)) for k, a in _SO_FIELDS if getattr(so, a) is not None)
        found.append(("structured_outputs", {"type": kind, "value": value}))
    for field, kind in _GUIDED_FIELDS:
        value = getattr(req, field)
        if value is not None:
            found.append((field, {"type": kind, "value": value}))
    if len(found) > 1:
        names = ", ".join(name for name, _ in found)
        raise ParameterError(f"{names}: give one constraint, not several", field=found[1][0])
    return found[0][1] if found else None


_SO_FIELDS = (("json", "json_"), ("regex", "regex"), ("choice", "choice"), ("grammar", "grammar"))
_GUIDED_FIELDS = (
    ("guided_json", "json"),
    ("guided_regex", "regex"),
    ("guided_choice", "choice"),
    ("guided_grammar", "grammar"),
)


def _check_unsupported(req: ChatCompletionRequest) -> None:
    if req.n > MAX_CHOICES:
        raise ParameterError(f"n: at most {MAX_CHOICES} choices per request, got {req.n}", field="n")
    if req.presence_penalty:
        raise ParameterError("presence_penalty: not supported; use frequency_penalty", field="presence_penalty")
    if req.top_logprobs and not req.logprobs:
        raise ParameterError("top_logprobs: needs logprobs set to true", field="top_logprobs")


def base_seed(req: ChatCompletionRequest) -> int:
    """Choice i is sampled with seed base+i, so each choice is reproducible on its own."""
    return req.seed if req.seed is not None else random.randrange(2**31)


def chat_parameters(req: ChatCompletionRequest, seed: int) -> GenerateParameters:
    """One choice's GenerateParameters; temperature 0 means greedy, unset means OpenAI's default 1."""
    _check_unsupported(req)
    greedy = req.temperature == 0
    values: dict[str, Any] = {
        "details": True,
        "do_sample": not greedy,
        "temperature": None if greedy else req.temperature,
        "top_p": None if greedy else req.top_p,
        "max_new_tokens": req.max_completion_tokens or req.max_tokens,
        "stop": [req.stop] if isinstance(req.stop, str) else list(req.stop or []),
        "seed": seed,
        "frequency_penalty": req.frequency_penalty or None,
        "top_n_tokens": req.top_logprobs if req.logprobs and req.top_logprobs else None,
        "grammar": constraint_of(req),
        "logits_processors": [spec.model_dump() for spec in req.logits_processors],
        "constraint_engine": req.constraint_engine,
    }
    return build_parameters({k: v for k, v in values.items() if v is not None})


def trim_stop(text: str, seq: Sequence) -> str:
    """OpenAI leaves the matched stop sequence (and anything after it) out of the text."""
    if seq.finish_reason == "stop_sequence" and seq.stop_sequence:
        cut = text.find(seq.stop_sequence)
        if cut >= 0:
            return text[:cut]
    return text


class StopHoldback:
    """Streams text while holding back a tail that could still become a stop sequence."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.text = ""
        self.sent = 0

    def feed(self, piece: str) -> str:
        """Text that is safe to send now."""
        self.text += piece
        safe = len(self.text) - self._partial_tail()
        out = self.text[self.sent : safe] if safe > self.sent else ""
        self.sent = max(self.sent, safe)
        return out

    def finish(self, seq: Sequence) -> str:
        """The rest of the text, with the stop sequence cut off."""
        final = trim_stop(self.text, seq)
        out = final[self.sent :]
        self.sent = len(final)
        return out

    def _partial_tail(self) -> int:
        """Length of the longest tail that is a prefix of, or contains, a stop sequence."""
        longest = 0
        for stop in self.stops:
            found = self.text.find(stop)
            if found >= 0:
                longest = max(longest, len(self.text) - found)
                continue
            for size in range(min(len(stop) - 1, len(self.text)), 0, -1):
                if stop.startswith(self.text[-size:]):
                    longest = max(longest, size)
                    break
        return longest


# --- responses -----------------------------------------------------------------------------------


def _top(token: Any) -> dict[str, Any]:
    return {"token": token.text, "logprob": token.logprob, "bytes": list(token.text.encode("utf-8"))}


def logprob_entry(token: GeneratedToken, top_logprobs: int) -> dict[str, Any]:
    """OpenAI's ChatCompletionTokenLogprob, plus what the model wanted and the mass the constraint kept."""
    return {
        **_top(token),
        "top_logprobs": [_top(t) for t in token.top_tokens[:top_logprobs]],
        "raw_logprob": token.raw_logprob,
        "mass_kept": token.mass_kept,
    }


def choice_logprobs(tokens: list[GeneratedToken], req: ChatCompletionRequest) -> dict[str, Any] | None:
    if not req.logprobs:
        return None
    return {"content": [logprob_entry(t, req.top_logprobs or 0) for t in tokens if not t.special]}


def choice_extras(result: GenerationResult) -> dict[str, Any]:
    """Non-standard keys on each choice (SDKs keep unknown keys): the verdict and the seed."""
    seq = result.best
    return {
        "validation": seq.validation.model_dump(),
        "seed": seq.seed,
        "constraint_kind": result.constraint_kind,
        "constraint_engine": result.constraint_engine,
    }


def completion_response(model: str, results: list[GenerationResult], req: ChatCompletionRequest) -> dict[str, Any]:
    """OpenAI's ChatCompletion for n results (one per choice)."""
    choices = []
    for index, result in enumerate(results):
        seq = result.best
        choices.append(
            {
                "index": index,
                "message": {"role": "assistant", "content": trim_stop(seq.generated_text, seq)},
                "logprobs": choice_logprobs(seq.tokens, req),
                "finish_reason": FINISH_REASONS[seq.finish_reason],
                **choice_extras(result),
            }
        )
    body = {**envelope(model, "chat.completion"), "choices": choices, "usage": usage(results)}
    return ChatCompletion.model_validate(body).model_dump(exclude_unset=True)


def envelope(model: str, kind: str, completion_id: str | None = None) -> dict[str, Any]:
    return {
        "id": completion_id or f"chatcmpl-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": FINGERPRINT,
    }


def usage(results: list[GenerationResult]) -> dict[str, int]:
    prompt = results[0].input_length if results else 0
    completion = sum(r.best.generated_tokens for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
