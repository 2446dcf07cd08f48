"""Pydantic types shared by every surface.

Field names mirror TGI's OpenAPI schemas (GenerateParameters, Token, Details, ...) and OpenAI's chat
types, so a client that knows either finds what it expects. Extra insight (raw logprobs, mass kept,
validation verdict) is added as extra fields, which TGI's schemas allow.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from playground.limits import (
    MAX_INPUT_CHARS,
    MAX_MESSAGES,
    MAX_NAME_CHARS,
    MAX_PREFIX_CHARS,
    MAX_PROCESSOR_PARAM_CHARS,
    MAX_PROCESSOR_PARAMS,
    MAX_PROCESSORS,
    MAX_STOP_CHARS,
)

FinishReason = Literal["length", "eos_token", "stop_sequence"]
ConstraintKind = Literal["none", "json_schema", "regex", "choice", "grammar"]
EngineName = Literal["auto", "llguidance", "xgrammar", "outlines_core"]
InputText = Annotated[str, Field(max_length=MAX_INPUT_CHARS)]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
StopText = Annotated[str, Field(max_length=MAX_STOP_CHARS)]
ParamText = Annotated[str, Field(max_length=MAX_PROCESSOR_PARAM_CHARS)]


class Strict(BaseModel):
    """Requests reject unknown fields (a typo is an error, not a silent no-op) and take JSON's types as
    they are: `true` or `"3"` is not a number, and numbers are finite (no `Infinity`, no `NaN`)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class GrammarType(Strict):
    """TGI's `grammar` parameter, plus our `choice` (list of strings) and `grammar` (Lark text)."""

    type: Literal["json", "json_schema", "regex", "choice", "grammar"]
    value: Any


class ProcessorSpec(Strict):
    """A registered logits processor chosen by name, with string parameters."""

    name: Name
    params: list[ParamText] = Field(default_factory=list, max_length=MAX_PROCESSOR_PARAMS)


class GenerateParameters(Strict):
    """TGI's GenerateParameters: same names, same ranges, same defaults."""

    adapter_id: Name | None = None
    best_of: int | None = Field(default=None, gt=0)
    decoder_input_details: bool = False
    details: bool = True
    do_sample: bool = False
    frequency_penalty: float | None = Field(default=None, gt=-2.0, le=2.0)
    grammar: GrammarType | None = None
    max_new_tokens: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0, description="vLLM's and llama.cpp's min_p (extension).")
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    return_full_text: bool | None = None
    seed: int | None = Field(default=None, ge=0)
    stop: list[StopText] = Field(default_factory=list, max_length=4)
    temperature: float | None = Field(default=None, gt=0.0)
    top_k: int | None = Field(default=None, gt=0)
    top_n_tokens: int | None = Field(default=None, gt=0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    truncate: int | None = Field(default=None, ge=0)
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


class Wire(BaseModel):
    """TGI's response shapes: its fields, plus our extras (raw logprobs, verdicts) as extra keys."""

    model_config = ConfigDict(extra="allow")


class PrefillToken(BaseModel):
    """TGI's PrefillToken: a prompt token and its logprob given the tokens before it."""

    id: int
    text: str
    logprob: float | None = None


class Token(PrefillToken):
    """TGI's Token: a PrefillToken's fields, and whether it is special."""

    special: bool = False


class WireToken(Token, Wire):
    """A Token on the wire, keeping our extras (raw_logprob, mass_kept, raw_top_tokens)."""


class _SequenceDetails(Wire):
    """The fields TGI's Details and BestOfSequence share."""

    finish_reason: FinishReason
    generated_tokens: int
    seed: int | None = None
    prefill: list[PrefillToken] = Field(default_factory=list)
    tokens: list[WireToken] = Field(default_factory=list)
    top_tokens: list[list[Token]] | None = None


class BestOfSequence(_SequenceDetails):
    """TGI's BestOfSequence, as /generate returns it."""

    generated_text: str


class Details(_SequenceDetails):
    """TGI's Details of a /generate response."""

    best_of_sequences: list[BestOfSequence] | None = None


class GenerateResponse(Wire):
    """TGI's GenerateResponse."""

    generated_text: str
    details: Details | None = None


class StreamDetails(Wire):
    """TGI's StreamDetails, on the last event of /generate_stream."""

    finish_reason: FinishReason
    generated_tokens: int
    input_length: int
    seed: int | None = None


class StreamResponse(Wire):
    """TGI's StreamResponse: one server-sent event of /generate_stream."""

    index: int
    token: WireToken
    top_tokens: list[Token] = Field(default_factory=list)
    generated_text: str | None = None
    details: StreamDetails | None = None


class GeneratedToken(Token):
    """A generated token with what the model wanted against what the constraint allowed."""

    raw_logprob: float | None = None
    mass_kept: float | None = Field(default=None, description="Raw probability mass the constraint allowed.")
    top_tokens: list[Token] = Field(default_factory=list, description="Top-n after processors and mask (at least 1).")
    raw_top_tokens: list[Token] = Field(default_factory=list, description="Top-n of the model's own distribution.")
    forced: bool = Field(default=False, description="Fast-forwarded: the constraint forced it, nothing was sampled.")

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


class Validation(BaseModel):
    """The verdict on a finished output against its constraint."""

    valid: bool | None = Field(default=None, description="None when there was nothing to check.")
    message: str = ""
    enforced: bool = Field(default=True, description="False when a provider did not enforce the constraint.")


class Sequence(BaseModel):
    """One generated sequence; TGI's BestOfSequence plus our extras."""

    generated_text: str
    finish_reason: FinishReason
    generated_tokens: int
    tokens: list[GeneratedToken] = Field(default_factory=list)
    seed: int | None = None
    stop_sequence: str | None = None
    total_logprob: float = 0.0
    validation: Validation = Field(default_factory=Validation)
    continued_from: str | None = Field(
        default=None, description="The prefix this sequence continues (validated with it)."
    )
    fields: list[FieldConfidence] | None = Field(default=None, description="JSON answers: confidence per field.")


class Timings(BaseModel):
    """Where the time went, in seconds."""

    compile_s: float = 0.0
    compile_cached: bool = False  # the compiled constraint came from the cache (compile_s is only the lookup)
    prefill_s: float = 0.0
    time_to_first_token_s: float = 0.0
    total_s: float = 0.0
    tokens_per_s: float = 0.0


class GenerationResult(BaseModel):
    """What every surface renders: the chosen sequence, the other candidates and the context."""

    model_id: str
    provider_id: str = "local"
    prompt: str
    input_length: int
    prefill: list[PrefillToken] = Field(default_factory=list)
    best: Sequence
    best_of_sequences: list[Sequence] = Field(default_factory=list)
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
    allowed_count: int
    vocab_size: int


# --- chat -------------------------------------------------------------------------------------


class ChatMessage(BaseModel):
    """An OpenAI/TGI chat message; content may be a string or a list of text parts."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None

    @field_validator("content")
    @classmethod
    def _text_parts_only(cls, value: Any) -> Any:
        if isinstance(value, list):
            for part in value:
                if part.get("type") != "text":
                    raise ValueError(f"only text content parts are supported, got {part.get('type')!r}")
                if not isinstance(part.get("text", ""), str):
                    raise ValueError(
                        f"a text content part needs a string `text`, got {type(part.get('text')).__name__}"
                    )
        return value

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.get("text", "") for part in self.content)
        return self.content or ""


def check_messages_size(messages: list[ChatMessage]) -> list[ChatMessage]:
    """All messages together are a prompt: the same character limit as `inputs`."""
    total = sum(len(m.text()) for m in messages)
    if total > MAX_INPUT_CHARS:
        raise ValueError(f"{total} characters in all messages; at most {MAX_INPUT_CHARS}")
    return messages


class GenerateRequest(Strict):
    """TGI's GenerateRequest."""

    inputs: InputText
    parameters: GenerateParameters = Field(default_factory=GenerateParameters)
    stream: bool = False


class ResponseFormat(Strict):
    """OpenAI's response_format: text, json_object, or json_schema {name, schema, strict}."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _schema_present(self) -> ResponseFormat:
        if self.type == "json_schema" and (not self.json_schema or "schema" not in self.json_schema):
            raise ValueError("response_format.json_schema.schema is required when type is 'json_schema'")
        return self


class StructuredOutputs(Strict):
    """vLLM's structured_outputs: exactly one of json, regex, choice, grammar."""

    json_: dict[str, Any] | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _exactly_one(self) -> StructuredOutputs:
        given = [k for k in ("json_", "regex", "choice", "grammar") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("structured_outputs needs exactly one of json, regex, choice, grammar")
        return self


class StreamOptions(Strict):
    include_usage: bool = False


class FunctionDefinition(Strict):
    """OpenAI's FunctionDefinition: the arguments are constrained by `parameters` (a JSON schema)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(Strict):
    """OpenAI's ChatCompletionTool."""

    type: Literal["function"]
    function: FunctionDefinition


class ToolName(Strict):
    name: str


class NamedToolChoice(Strict):
    """OpenAI's named tool choice: {"type": "function", "function": {"name": ...}}."""

    type: Literal["function"]
    function: ToolName


class ChatCompletionRequest(Strict):
    """OpenAI's chat completion request, with vLLM's structured_outputs and our processors."""

    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    model: Name | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    n: int = Field(default=1, ge=1)
    seed: int | None = Field(default=None, ge=0)
    stop: StopText | list[StopText] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    logits_processors: list[ProcessorSpec] = Field(default_factory=list, max_length=MAX_PROCESSORS)
    constraint_engine: EngineName = "auto"
    fast_forward: bool = True
    user: Name | None = None
    tools: list[ToolSpec] | None = Field(default=None, max_length=64)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    continue_final_message: bool = Field(
        default=False, description="vLLM's: continue the final assistant message, forced through the constraint."
    )

    @field_validator("messages")
    @classmethod
    def _total_size(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        return check_messages_size(messages)


class TopLogprob(Wire):
    """OpenAI's TopLogprob."""

    token: str
    logprob: float | None
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    """OpenAI's ChatCompletionTokenLogprob (our extras: raw_logprob, mass_kept)."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(Wire):
    content: list[TokenLogprob] | None = None


class AssistantMessage(Wire):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatChoice(Wire):
    """One choice of a ChatCompletion (our extras: validation, seed, constraint_kind, constraint_engine)."""

    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None


class Usage(Wire):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(Wire):
    """OpenAI's ChatCompletion response."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: Usage | None = None
