"""The two bases (requests strict, responses open to our extras) and the field types every request shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from playground.types.sizes import MAX_INPUT_CHARS, MAX_NAME_CHARS, MAX_PROCESSOR_PARAM_CHARS, MAX_STOP_CHARS

FinishReason = Literal["length", "eos_token", "stop_sequence"]
ConstraintKind = Literal["none", "json_schema", "regex", "choice", "grammar", "structural_tag"]
# "auto" or a registered constraint engine (GET /info lists them; the compiler refuses others by name).
EngineName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", examples=["auto", "llguidance"])]
InputText = Annotated[str, Field(max_length=MAX_INPUT_CHARS)]
# A prompt as token ids (OpenAI's and vLLM's completions take them; lm-evaluation-harness sends them).
TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1, max_length=MAX_INPUT_CHARS)]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]


def _stop_text(value: str) -> str:
    if not value:
        raise ValueError("an empty stop sequence would stop before every token")
    return value


StopText = Annotated[str, Field(max_length=MAX_STOP_CHARS), AfterValidator(_stop_text)]
ParamText = Annotated[str, Field(max_length=MAX_PROCESSOR_PARAM_CHARS)]
FIT_CONTEXT = -1  # a truncation to as many of the prompt's last tokens as the context leaves room for (vLLM's -1)


def _kept_tokens(value: int) -> int:
    if value == 0:
        raise ValueError("must be -1 (as many of the last tokens as the context holds) or 1 or more")
    return value


# vLLM's truncate_prompt_tokens: keep the prompt's last k tokens, or -1: as many as the context leaves room for.
KeptTokens = Annotated[int, Field(ge=FIT_CONTEXT), AfterValidator(_kept_tokens)]


class Strict(BaseModel):
    """Requests reject unknown fields (a typo is an error, not a silent no-op) and take JSON's types as
    they are: `true` or `"3"` is not a number, and numbers are finite (no `Infinity`, no `NaN`)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ResponseBody(BaseModel):
    """Response shapes (TGI's and OpenAI's): their fields, plus our extras (raw logprobs, verdicts) as extra keys."""

    model_config = ConfigDict(extra="allow")


class TokenPrompt(str):
    """A prompt sent as token ids: the string is their text (what echo returns and a page shows); a local engine
    decodes after the ids themselves, so the model reads exactly them, not a new tokenization of the text."""

    ids: tuple[int, ...]

    def __new__(cls, text: str, ids: Sequence[int]) -> TokenPrompt:
        prompt = super().__new__(cls, text)
        prompt.ids = tuple(ids)
        return prompt

    def __reduce__(self) -> tuple[type, tuple[str, tuple[int, ...]]]:  # a lease's process gets the ids too
        return TokenPrompt, (str(self), self.ids)
