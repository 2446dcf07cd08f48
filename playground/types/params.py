"""What one generation asks for: TGI's GenerateParameters, its grammar and our logits processors."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_serializer

from playground.types.base import EngineName, KeptTokens, Name, ParamText, StopText, Strict
from playground.types.sizes import (
    MAX_ALLOWED_TOKEN_IDS,
    MAX_BAD_WORDS,
    MAX_PREFIX_CHARS,
    MAX_PROCESSOR_PARAMS,
    MAX_PROCESSORS,
    MAX_SEED,
    MAX_STOP_CHARS,
    MAX_STOP_SEQUENCES,
    MAX_STOP_TOKEN_IDS,
)


class GrammarType(Strict):
    """TGI's `grammar` parameter, plus our `choice` (list of strings), `grammar` (Lark text) and `structural_tag`
    (vLLM's segment constraint: free text with constrained segments between begin and end markers)."""

    type: Literal["json", "json_schema", "regex", "choice", "grammar", "structural_tag"]
    value: Any
    whitespace: str | None = Field(
        default=None,
        max_length=256,
        description="JSON only (extension): pretty (the default: one space, or a newline and indentation), compact "
        "(at most one space), free (any whitespace), or a regex for the whitespace (Outlines' whitespace_pattern).",
    )
    strict: bool | None = Field(
        default=None,
        description="JSON only (extension): unset or true: no object key the schema does not declare (as TGI's and "
        "vLLM's engines decode, and OpenAI's strict contract); false: JSON Schema as written (other keys allowed "
        "where the schema does not say).",
    )

    @model_serializer(mode="wrap")
    def _without_unset_extensions(self, handler: Any) -> dict[str, Any]:
        """TGI's two keys, and ours only when set: a body sent on stays the body TGI knows."""
        data = handler(self)
        return {k: v for k, v in data.items() if k in ("type", "value") or v is not None}


class ProcessorSpec(Strict):
    """A registered logits processor chosen by name, with string parameters."""

    name: Name
    params: list[ParamText] = Field(default_factory=list, max_length=MAX_PROCESSOR_PARAMS)


class Sampling(Strict):
    """The sampling fields TGI's body, OpenAI's chat and completions spell and range alike, declared once: every
    request shape inherits them, and `wire.controls` says which dialects carry each to a remote server. Their
    values are checked once, on GenerateParameters, so every route words a bad value alike."""

    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0, description="vLLM's and llama.cpp's min_p (extension).")
    repetition_penalty: float | None = Field(default=None, gt=0.0, description="TGI's and vLLM's.")
    presence_penalty: float | None = Field(
        default=None, ge=-2.0, le=2.0, description="OpenAI's: logit -= penalty for each token already generated."
    )
    logit_bias: dict[str, float] | None = Field(
        default=None, max_length=1024, description="OpenAI's: token id (as a string) -> bias added to its logit."
    )
    min_tokens: int | None = Field(
        default=None, ge=0, description="vLLM's: no end of sequence (nor a stop_token_ids token) before this many."
    )
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        max_length=MAX_STOP_TOKEN_IDS,
        description="vLLM's: token ids that end the answer as its end-of-text token does (finish_reason eos_token), "
        "their text left out (unless include_stop_str_in_output), as vLLM's engine leaves it out.",
    )
    allowed_token_ids: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None,
        min_length=1,  # none allowed would leave nothing to write: vLLM refuses it too
        max_length=MAX_ALLOWED_TOKEN_IDS,
        description="vLLM's: only these token ids may be generated (the end-of-text token too only when listed).",
    )
    bad_words: list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]] | None = Field(
        default=None,
        max_length=MAX_BAD_WORDS,
        description="vLLM's: words the answer may not write, each as the tokenizer spells it alone and after a space "
        "(its last token is out where the answer's last tokens are the rest of it).",
    )


class GenerateParameters(Sampling):
    """TGI's GenerateParameters: same names, same ranges, same defaults."""

    adapter_id: Name | None = None
    best_of: int | None = Field(default=None, gt=0)
    decoder_input_details: bool = False
    details: bool = True
    do_sample: bool = False
    frequency_penalty: float | None = Field(
        default=None, gt=-2.0, le=2.0
    )  # TGI's bound; OpenAI's takes -2.0 (inbound.parameters)
    grammar: GrammarType | None = None
    max_new_tokens: int | None = Field(default=None, ge=0)
    return_full_text: bool | None = None
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    stop: list[StopText] = Field(default_factory=list, max_length=MAX_STOP_SEQUENCES)
    temperature: float | None = Field(default=None, gt=0.0)
    top_k: int | None = Field(default=None, gt=0)
    top_n_tokens: int | None = Field(default=None, gt=0)
    truncate: KeptTokens | None = None  # the prompt's last k tokens; -1: as many as the context holds
    typical_p: float | None = Field(default=None, gt=0.0, le=1.0)
    watermark: bool = False
    # Extensions, ignored by TGI clients that don't send them.
    logits_processors: list[ProcessorSpec] = Field(default_factory=list, max_length=MAX_PROCESSORS)
    constraint_engine: EngineName = "auto"
    continue_from: str | None = Field(
        default=None,
        max_length=MAX_PREFIX_CHARS,
        description="The answer so far: forced through the constraint, then continued (only new text is returned).",
    )
    fast_forward: bool = Field(
        default=True, description="Append tokens the constraint forces without sampling, in one forward (local)."
    )
    include_stop_str_in_output: bool = Field(
        default=False,
        description="vLLM's: the OpenAI routes keep the stop sequence that ended the answer (cut after it, not before), "
        "and a stop_token_ids token's text; TGI's routes keep a stop sequence anyway.",
    )
    return_token_ids: bool = Field(
        default=False,
        description="vLLM's: the result carries the token ids the model read (`prompt_ids`; a stream's first token "
        "too), beside the generated tokens' own ids (local models).",
    )
    add_generation_prompt: bool = Field(default=True, description="vLLM's: the chat template's assistant header.")
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None, max_length=32, description="vLLM's: extra variables for the chat template (enable_thinking)."
    )
    max_reasoning_tokens: int | None = Field(
        default=None,
        ge=0,
        description="A thinking model's reasoning budget: past this many reasoning tokens its end delimiter is forced.",
    )
    think_first: bool = Field(
        default=False,
        description="Open a reasoning block before the answer (plain-text <think> for a model without one of its "
        "own), written freely up to max_reasoning_tokens (default 128), then the constraint.",
    )
    tools: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=64,
        description="OpenAI's tools, rendered by a chat template that writes tool calls in its own envelope.",
    )

    @field_validator("logit_bias")
    @classmethod
    def _bias_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (value or {}).items():
            # ("²" is a digit int() refuses, "３３" one OpenAI does; past 4,300 digits int() refuses any)
            if not (key.isascii() and key.isdigit() and len(key) <= 18):
                raise ValueError(f"keys are token ids (ASCII digits), got {key[:40]!r}")
            if not -100 <= bias <= 100:
                raise ValueError(f"a bias is between -100 and 100, got {bias} for token {key}")
        return value

    @property
    def sampling(self) -> bool:
        """TGI samples when asked to or when any warper is set."""
        warped = (
            (self.temperature is not None and self.temperature != 1.0)
            or self.top_k is not None
            or (self.top_p is not None and self.top_p < 1.0)
            or (self.typical_p is not None and self.typical_p < 1.0)
            or bool(self.min_p)
        )
        return self.do_sample or warped
