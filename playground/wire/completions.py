"""OpenAI's (legacy) completions, as vLLM and TGI serve them: the request, its GenerateParameters, and the
`text_completion` choice with logprobs in the completions shape (tokens, token_logprobs, top_logprobs,
text_offset)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, field_validator, model_validator

from playground.errors import ParameterError
from playground.types import (
    GeneratedToken,
    GenerateParameters,
    GenerationResult,
    GrammarType,
    Token,
    TokenEvent,
    pieces,
)
from playground.types.base import InputText, KeptTokens, Name, TokenIds
from playground.types.chat import OpenAISampling
from playground.types.sizes import MAX_CHOICES, MAX_INPUT_CHARS
from playground.wire import chat_fields, inbound
from playground.wire.inbound import ChatResponseFormat

MAX_PROMPTS = 8
MAX_TOTAL_CHOICES = 16


class CompletionRequest(OpenAISampling):
    """OpenAI's CompletionCreateParams, with the constraint fields and extensions our chat route takes."""

    prompt: InputText | list[InputText] | TokenIds | list[TokenIds] = Field(
        description="One prompt, or a list of them (n choices each); a prompt may be token ids (a local model's)."
    )
    max_tokens: int = Field(
        default=16, ge=0, description="OpenAI's default is 16; 0 with echo scores the prompt and generates nothing."
    )
    best_of: int | None = Field(default=None, ge=1)
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20, description="The completions shape: top-n per token.")
    suffix: str | None = None
    response_format: ChatResponseFormat | None = None
    guided_whitespace_pattern: str | None = Field(default=None, max_length=256)
    # TGI's parameter names, which huggingface.js's textGeneration puts in this body (its `parameters`, flattened):
    # each does what it does on /generate; `details` and `decoder_input_details` shape TGI's answer, not this one.
    grammar: GrammarType | None = Field(default=None, description="TGI's constraint field.")
    do_sample: bool | None = Field(default=None, description="TGI's: false (with no warper set) is greedy.")
    top_n_tokens: int | None = Field(default=None, ge=0, le=20, description="TGI's name for `logprobs`.")
    typical_p: float | None = Field(default=None, gt=0.0, le=1.0)
    truncate: KeptTokens | None = Field(
        default=None, description="TGI's: keep the prompt's last k tokens (-1: vLLM's)."
    )
    watermark: bool | None = None
    return_full_text: bool | None = Field(default=None, description="TGI's name for `echo`.")
    adapter_id: Name | None = None
    details: bool | None = None
    decoder_input_details: bool | None = None
    # vLLM's extras of this route, as its chat route takes them (chat_fields): implemented, ignored or refused by name
    ignore_eos: bool | None = Field(default=None, description="vLLM's: the answer has exactly max_tokens tokens.")
    truncate_prompt_tokens: KeptTokens | None = Field(default=None, description="vLLM's name for `truncate`.")
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    guided_decoding_backend: str | None = Field(default=None, max_length=64)
    prompt_logprobs: int | None = Field(default=None, ge=0, le=20)
    add_special_tokens: bool | None = Field(default=None, description="vLLM's: true (the default) adds a BOS.")

    @field_validator("prompt", mode="wrap")
    @classmethod
    def _one_prompt_shape(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """One message for a prompt of no known shape, not one per shape it failed to be."""
        try:
            return handler(value)
        except ValidationError:
            if isinstance(value, str):
                raise ValueError(f"at most {MAX_INPUT_CHARS:,} characters, got {len(value):,}") from None
            raise ValueError(
                f"give a string, a list of strings, token ids (integers >= 0) or a list of token-id lists, each at "
                f"most {MAX_INPUT_CHARS:,} characters or ids"
            ) from None

    @model_validator(mode="after")
    def _tgi_names(self) -> CompletionRequest:
        """TGI's `top_n_tokens` and `return_full_text` are `logprobs` and `echo` here (both set differently: refused
        by `parameters`)."""
        if self.logprobs is None and self.top_n_tokens is not None:
            self.logprobs = self.top_n_tokens
        if self.return_full_text is not None and "echo" in self.model_fields_set and self.echo != self.return_full_text:
            raise ValueError("return_full_text: TGI's name for echo; give one of them")
        self.echo = self.echo or bool(self.return_full_text)
        return self

    def prompts(self) -> list[str | list[int]]:
        """Each prompt: its text, or its token ids."""
        if isinstance(self.prompt, str) or (self.prompt and isinstance(self.prompt[0], int)):
            return [self.prompt]  # type: ignore[list-item]
        return list(self.prompt)  # type: ignore[arg-type]


def _check(req: CompletionRequest) -> None:
    if not req.prompts() or len(req.prompts()) > MAX_PROMPTS:
        raise ParameterError(f"prompt: give 1 to {MAX_PROMPTS} prompts", field="prompt")
    if req.n > MAX_CHOICES:
        raise ParameterError(f"n: at most {MAX_CHOICES} choices per prompt, got {req.n}", field="n")
    if req.n * len(req.prompts()) > MAX_TOTAL_CHOICES:
        raise ParameterError(f"n: at most {MAX_TOTAL_CHOICES} choices for all prompts together", field="n")
    if req.max_tokens == 0 and not req.echo:
        raise ParameterError("max_tokens: 0 generates nothing; it needs echo (to score the prompt)", field="max_tokens")
    if req.suffix:
        raise ParameterError("suffix: not supported (no fill-in-the-middle)", field="suffix")
    chat_fields.check_stream_options(req)
    if req.best_of is not None and req.best_of < req.n:
        raise ParameterError(f"best_of: must be >= n ({req.n}), got {req.best_of}", field="best_of")
    if req.best_of and req.best_of > req.n and req.n > 1:
        raise ParameterError("best_of: more candidates than n is supported with n = 1 only", field="best_of")
    if req.stream and req.best_of and req.best_of > 1:
        raise ParameterError("best_of: cannot be streamed (OpenAI refuses it too)", field="best_of")
    if req.logprobs is not None and req.top_n_tokens is not None and req.logprobs != req.top_n_tokens:
        raise ParameterError("top_n_tokens: TGI's name for logprobs; give one of them", field="top_n_tokens")
    if req.truncate is not None and req.truncate_prompt_tokens not in (None, req.truncate):
        raise ParameterError("truncate_prompt_tokens: vLLM's name for truncate; give one of them", field="truncate")
    refused = {
        "ignore_eos": (
            bool(req.ignore_eos and req.stop_token_ids),
            chat_fields.ignore_eos_refusal(True, req.stop_token_ids) or "",
        ),
        "skip_special_tokens": (req.skip_special_tokens is False, "special tokens are always left out of the text"),
        "prompt_logprobs": (req.prompt_logprobs is not None, "use echo with logprobs: the prompt's tokens come first"),
        "add_special_tokens": (  # (token ids are read as sent, with or without it, as vLLM reads them)
            req.add_special_tokens is False and any(isinstance(p, str) for p in req.prompts()),
            "false is not supported for a text prompt (it gets them)",
        ),
    }
    for name in chat_fields.VLLM_EXTRAS.split():
        value = getattr(req, name)
        why = None if value is None else chat_fields.vllm_extra_refusal(name, value)
        refused[name] = (why is not None, why or "")
    for name, (refuse, why) in refused.items():
        if refuse:
            raise ParameterError(f"{name}: {why}", field=name)


def warnings(req: CompletionRequest) -> list[str]:
    """One line for each field accepted without effect."""
    out = ["user: accepted and ignored (no per-user accounting)"] if req.user is not None else []
    out += [
        f"{name}: accepted and ignored (TGI's answer shape; this one carries logprobs: ask with logprobs)"
        for name in ("details", "decoder_input_details")
        if getattr(req, name)
    ]
    ignored = {
        "guided_decoding_backend": "use constraint_engine to choose the engine",
        "spaces_between_special_tokens": "special tokens are left out of the text",
    }
    out += [f"{name}: accepted and ignored ({why})" for name, why in ignored.items() if getattr(req, name) is not None]
    return out + chat_fields.option_warnings(req)


def _greedy_by_tgi_rule(req: CompletionRequest) -> bool:
    """TGI's do_sample false decodes greedily unless a warper is set (a warper samples, as on /generate)."""
    warped = (req.top_p or 1.0) < 1.0 or (req.typical_p or 1.0) < 1.0 or (req.top_k or 0) > 0 or bool(req.min_p)
    return req.do_sample is False and req.temperature is None and not warped


def parameters(req: CompletionRequest, seed: int) -> GenerateParameters:
    """One choice's GenerateParameters (temperature 0 is greedy; best_of > n picks the likeliest candidate)."""
    _check(req)
    best_of = req.best_of if req.best_of and req.best_of > req.n else None
    sampling = inbound.openai_values(req.model_copy(update={"temperature": 0.0}) if _greedy_by_tgi_rule(req) else req)
    values: dict[str, Any] = {
        **sampling,
        "details": True,
        "max_new_tokens": req.max_tokens or 1,  # 0 (echo only): the one token decoded is left out of the answer
        "best_of": best_of,
        "seed": seed,
        "top_n_tokens": req.logprobs or None,
        "decoder_input_details": (req.echo and req.logprobs is not None) or None,
        "grammar": inbound.constraint_of(req),  # type: ignore[arg-type]
        "typical_p": req.typical_p if sampling["do_sample"] else None,
        "truncate": req.truncate or req.truncate_prompt_tokens,
        "min_tokens": (req.max_tokens or 1) if req.ignore_eos else req.min_tokens,
        "watermark": req.watermark,
        "adapter_id": req.adapter_id,
    }
    return inbound.parameters({k: v for k, v in values.items() if v is not None}, openai=True)


# (the token's own text, logprob, the likeliest there, its share of the text: what text_offset counts)
Logprob = tuple[str, float | None, dict[str, float] | None, str]


def logprobs(tokens: list[Logprob], start: int = 0) -> dict[str, Any]:
    """The completions logprobs shape; offsets count from `start`, in the text (a token that is part of a
    character, `bytes:\\xe4\\xbd`, adds nothing, the last part the whole character)."""
    offsets, at = [], start
    for *_, share in tokens:
        offsets.append(at)
        at += len(share)
    return {
        "tokens": [t for t, *_ in tokens],
        "token_logprobs": [lp for _, lp, *_ in tokens],
        "top_logprobs": [top for _, _, top, _ in tokens],
        "text_offset": offsets,
    }


def _likeliest(
    alternatives: list[Token], top_n: int, name: str, logprob: float | None, as_ids: bool
) -> dict[str, float]:
    """The `top_n` likeliest tokens, and the token itself (`name`: as named; up to top_n + 1 entries, as OpenAI and
    vLLM send: a client finds the token's own logprob there, and tells greedy from not by comparing it with the
    largest); `as_ids`: each named `token_id:<id>`."""
    top = {
        pieces.token_name(alt.id, alt.text, as_ids): alt.logprob
        for alt in alternatives[:top_n]
        if alt.logprob is not None
    }
    if logprob is not None:
        top[name] = logprob
    return top


def echo_only(req: CompletionRequest) -> bool:
    """max_tokens 0 with echo: the prompt and its logprobs, nothing generated (OpenAI's and vLLM's prompt scoring)."""
    return req.echo and req.max_tokens == 0


def generated(tokens: list[GeneratedToken], top_n: int, as_ids: bool = False) -> list[Logprob]:
    """The answer's tokens (EOS left out, as from the text), each by its own text as its alternatives are (`as_ids`:
    by `token_id:<id>`, vLLM's return_tokens_as_token_ids)."""
    return [
        (name, t.logprob, _likeliest(t.top_tokens, top_n, name, t.logprob, as_ids), t.text)
        for t in tokens
        if not t.special
        for name in [pieces.token_name(t.id, t.piece or t.text, as_ids)]
    ]


def prompt_tokens(source: GenerationResult | TokenEvent, top_n: int, as_ids: bool = False) -> list[Logprob]:
    """The prompt's tokens for echo, from the result or a stream's first token: the first has no logprob and no
    alternatives (null, as in OpenAI's answer); `as_ids`: as `generated`."""
    prefill, tops = source.prefill or [], source.prefill_top_tokens or []
    spelled = pieces.shares([p.text for p in prefill])
    out: list[Logprob] = []
    for k, p in enumerate(prefill):
        name = pieces.token_name(p.id, p.text, as_ids)
        top = tops[k] if k < len(tops) else []
        out.append(
            (
                name,
                p.logprob,
                None if p.logprob is None else _likeliest(top, top_n, name, p.logprob, as_ids),
                spelled[k],
            )
        )
    return out
