"""OpenAI's chat completion request and response, with vLLM's structured outputs and our extensions."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from playground.types.base import EngineName, KeptTokens, Name, ResponseBody, StopText, Strict
from playground.types.params import ProcessorSpec, Sampling
from playground.types.sizes import MAX_INPUT_CHARS, MAX_MESSAGES, MAX_PROCESSORS, MAX_SEED

# OpenAI's reasoning efforts (its SDK's ReasoningEffort), each a reasoning budget (wire/inbound.py EFFORT_BUDGETS)
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ChatMessage(BaseModel):
    """An OpenAI/TGI chat message; content may be a string or a list of text parts."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None

    @field_validator("content")
    @classmethod
    def _text_parts_only(cls, value: Any) -> Any:
        """Text parts; an assistant's `refusal` parts too (OpenAI's assistant content; vLLM reads them as text)."""
        if isinstance(value, list):
            for part in value:
                kind = part.get("type")
                if kind not in ("text", "refusal"):
                    raise ValueError(f"only text content parts are supported, got {kind!r}")
                if not isinstance(part.get(kind), str):  # missing too, as OpenAI refuses it
                    got = type(part[kind]).__name__ if kind in part else "none"
                    raise ValueError(f"a {kind} content part needs a string `{kind}`, got {got}")
        return value

    @model_validator(mode="after")
    def _content_unless_the_assistant_s(self) -> ChatMessage:
        """Only an assistant's message may go without content (its tool calls say it), as OpenAI's API has it: a
        misspelt `content` was an empty message."""
        if self.content is None and self.role != "assistant":
            others = ", ".join(sorted(self.model_extra or {}))
            raise ValueError(f"a {self.role} message needs `content`" + (f" (it has: {others})" if others else ""))
        return self

    @model_validator(mode="after")
    def _refusals_are_the_assistants(self) -> ChatMessage:
        if self.role != "assistant" and isinstance(self.content, list):
            if any(part["type"] == "refusal" for part in self.content):
                raise ValueError(f"a refusal content part is an assistant's, not a {self.role} message's")
        return self

    @model_validator(mode="after")
    def _tool_calls_shape(self) -> ChatMessage:
        """Past `tool_calls` (kept as extra fields) in OpenAI's shape, arguments a JSON text (TGI's JSON object
        written out as one, empty text as `{}`): else a 422."""
        calls = (self.model_extra or {}).get("tool_calls")
        if calls is not None:
            try:
                checked = _TOOL_CALLS.validate_python(calls)
            except ValidationError as exc:  # located under the message's `tool_calls`, where the client wrote it
                raise ValidationError.from_exception_data(
                    exc.title,
                    [
                        {"type": e["type"], "loc": ("tool_calls", *e["loc"]), "input": e["input"]}
                        | ({"ctx": e["ctx"]} if "ctx" in e else {})
                        for e in exc.errors()
                    ],
                ) from None
            self.__pydantic_extra__["tool_calls"] = [  # arguments as read: an object or "" written out as JSON text
                {**raw, "function": {**raw["function"], "arguments": call.function.arguments}}
                for raw, call in zip(calls, checked)
            ]
        return self

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.get(part["type"], "") for part in self.content)
        return self.content or ""

    def written_calls(self) -> str | None:
        """An assistant turn's tool calls as the JSON it would have written (what the prompt then holds)."""
        calls = (self.model_extra or {}).get("tool_calls")
        if self.role != "assistant" or not calls:
            return None
        written = [{"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])} for c in calls]
        return json.dumps(written[0] if len(written) == 1 else written)

    def size(self) -> int:
        """Characters this message puts in the prompt: its text and its tool calls as written out."""
        return len(self.text()) + len(self.written_calls() or "")


class FunctionCall(BaseModel):
    """OpenAI's function call of a past assistant turn: `arguments` is JSON text (TGI writes it as a JSON object,
    and a conversation replayed from TGI's answers sends it so: written out as text here). Empty text or null is a
    call without arguments, `{}`, as vLLM reads it (histories of tools without parameters carry `""`)."""

    name: str = Field(max_length=MAX_INPUT_CHARS)
    arguments: str = Field(max_length=MAX_INPUT_CHARS)

    @field_validator("arguments", mode="before")
    @classmethod
    def _json(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return "{}"
        if not isinstance(value, (dict, str)):
            return value  # (refused as not a string)
        try:
            parsed = json.loads(value) if isinstance(value, str) else value
        except (ValueError, RecursionError):
            raise ValueError("must be JSON text") from None
        if nesting(parsed) > MAX_ARGUMENT_NESTING:  # written out again with the prompt, deeper in the stack
            raise ValueError(f"nests deeper than {MAX_ARGUMENT_NESTING} levels")
        if isinstance(value, dict):
            try:
                return json.dumps(value, ensure_ascii=False)
            except (TypeError, ValueError):
                raise ValueError("must be JSON text or a JSON object") from None
        return value


MAX_ARGUMENT_NESTING = 128


def nesting(value: Any) -> int:
    """How deep lists and objects nest in a parsed JSON value (counted without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


class ToolCall(BaseModel):
    """OpenAI's ChatCompletionMessageToolCall (extra keys are kept, as clients send them)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionCall


_TOOL_CALLS = TypeAdapter(list[ToolCall])


def check_messages_size(messages: list[ChatMessage], extra: int = 0) -> list[ChatMessage]:
    """All messages together (past tool calls as written out, `extra` characters of tools) are a prompt:
    the same character limit as `inputs`."""
    total = sum(m.size() for m in messages) + extra
    if total > MAX_INPUT_CHARS:
        what = "all messages and tools" if extra else "all messages"
        raise ValueError(f"{total} characters in {what}; at most {MAX_INPUT_CHARS}")
    return messages


class Request(Strict):
    """A request body part in which `null` means unset, as OpenAI, vLLM and TGI read it (clients send nulls)."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


class ResponseFormat(Request):
    """OpenAI's response_format: text, json_object, or json_schema {name, schema, strict}."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _schema_present(self) -> ResponseFormat:
        if self.type == "json_schema" and (not self.json_schema or "schema" not in self.json_schema):
            raise ValueError("response_format.json_schema.schema is required when type is 'json_schema'")
        return self


class StructuredOutputs(Request):
    """vLLM's structured_outputs: at most one of json, regex, choice, grammar, structural_tag, json_object, and its
    options. Options alone apply to the constraint the request gives elsewhere (response_format, guided_json), as
    vLLM merges a response_format into them."""

    json_: dict[str, Any] | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    structural_tag: dict[str, Any] | str | None = None
    json_object: bool | None = None
    # The JSON layout (inbound._whitespace); disable_fallback is accepted and named in `warnings`.
    whitespace_pattern: str | None = None
    disable_any_whitespace: bool | None = None
    disable_fallback: bool | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @property
    def constraints(self) -> list[str]:
        """The constraint fields set."""
        given = [k for k in ("json_", "regex", "choice", "grammar", "structural_tag") if getattr(self, k) is not None]
        return [*given, "json_object"] if self.json_object else given

    @model_validator(mode="after")
    def _at_most_one(self) -> StructuredOutputs:
        if len(self.constraints) > 1:
            raise ValueError(
                "structured_outputs takes one of json, regex, choice, grammar, structural_tag, json_object, not several"
            )
        return self


class StreamOptions(Request):
    include_usage: bool = False
    continuous_usage_stats: bool = Field(default=False, description="vLLM's: accepted, named in `warnings`.")


class FunctionDefinition(Request):
    """OpenAI's FunctionDefinition: the arguments are constrained by `parameters` (a JSON schema; TGI's spec names
    it `arguments`, and TGI reads either)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = Field(default=None, validation_alias=AliasChoices("parameters", "arguments"))
    strict: bool | None = None


class ToolSpec(Request):
    """OpenAI's ChatCompletionTool."""

    type: Literal["function"]
    function: FunctionDefinition


class ToolName(Request):
    name: str


class NamedToolChoice(Request):
    """OpenAI's named tool choice: {"type": "function", "function": {"name": ...}} (TGI's and huggingface_hub's
    object form leaves `type` out)."""

    type: Literal["function"] = "function"
    function: ToolName


class AllowedFunction(Request):
    type: Literal["function"] = "function"
    function: ToolName


class AllowedTools(Request):
    mode: Literal["auto", "required"]
    tools: list[AllowedFunction] = Field(min_length=1, max_length=64)


class AllowedToolsChoice(Request):
    """OpenAI's allowed_tools tool choice: the model may call only these of `tools`, under `mode` (the request is read
    as those tools under that tool_choice, as the Responses route reads its own allowed_tools)."""

    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


def _choice_kind(value: Any) -> str:
    """The ToolChoice form a value is (tags named as pydantic names union members, which errors leave out)."""
    if isinstance(value, (dict, BaseModel)):
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return "AllowedToolsChoice" if kind == "allowed_tools" else "NamedToolChoice"
    return "str"


# "none", "auto", "required", or (TGI's and huggingface_hub's form) the name of the function to call; an object by its
# `type` (a bad allowed_tools is named alone, not beside every other form's complaint).
ToolChoice = Annotated[
    Annotated[Annotated[str, Field(max_length=64)], Tag("str")]
    | Annotated[NamedToolChoice, Tag("NamedToolChoice")]
    | Annotated[AllowedToolsChoice, Tag("AllowedToolsChoice")],
    Discriminator(_choice_kind),
]


def narrowed_tools(
    tools: list[ToolSpec] | None, choice: str | NamedToolChoice | AllowedToolsChoice | None
) -> tuple[list[ToolSpec] | None, str | NamedToolChoice | None]:
    """An allowed_tools tool_choice read as `tools` cut to the ones it names under its mode (a name not in `tools` is a
    validation error at its place); any other choice as it is."""
    if not isinstance(choice, AllowedToolsChoice):
        return tools, choice
    known = [t.function.name for t in tools or []]
    for j, tool in enumerate(choice.allowed_tools.tools):
        if tool.function.name not in known:
            problem = PydanticCustomError("unknown_tool", f"{tool.function.name[:64]!r} is not one of `tools`")
            where = ("tool_choice", "allowed_tools", "tools", j, "function", "name")
            raise ValidationError.from_exception_data(
                "tool_choice", [{"type": problem, "loc": where, "input": tool.function.name}]
            )
    names = {tool.function.name for tool in choice.allowed_tools.tools}
    return [t for t in tools or [] if t.function.name in names], choice.allowed_tools.mode


class OpenAISampling(Request, Sampling):
    """What OpenAI's chat and completions requests share as vLLM serves them (sampling, the constraint fields,
    our extensions), declared once and mapped to GenerateParameters once (`wire.inbound.openai_values`)."""

    model: Name | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_k: int | None = Field(default=None, ge=-1, description="vLLM's: 0 and -1 mean off.")
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    n: int = Field(default=1, ge=1)
    # OpenAI's and vLLM's seed is any int64 (clients send -1): a negative one is read modulo 2**63 (base_seed)
    seed: int | None = Field(default=None, ge=-(MAX_SEED + 1), le=MAX_SEED)
    stop: StopText | list[StopText] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    structured_outputs: StructuredOutputs | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    logits_processors: list[ProcessorSpec] = Field(default_factory=list, max_length=MAX_PROCESSORS)
    constraint_engine: EngineName = "auto"
    fast_forward: bool = True
    include_stop_str_in_output: bool | None = Field(
        default=None,
        description="vLLM's: the stop sequence that ended the answer stays at its end (and a "
        "stop_token_ids token's text).",
    )
    return_token_ids: bool | None = Field(
        default=None,
        description="vLLM's: the answer carries the prompt's token ids (prompt_token_ids) and each choice's "
        "(token_ids); a stream, each chunk's.",
    )
    return_tokens_as_token_ids: bool | None = Field(
        default=None, description="vLLM's: logprobs name each token `token_id:<id>` instead of by its text."
    )
    user: Name | None = None
    # vLLM's sampling extras both routes take: their defaults accepted, other values refused by name
    # (playground.wire.chat_fields.VLLM_EXTRAS)
    use_beam_search: Any = None
    length_penalty: Any = None

    @field_validator("stop", mode="wrap")
    @classmethod
    def _one_stop_message(cls, value: Any, handler: Any) -> Any:
        """The error of the shape sent (a string, or a list of them), not one per shape of the union."""
        try:
            return handler(value)
        except ValidationError:
            if not isinstance(value, (str, list)):
                raise ValueError("give a string or a list of strings") from None
            try:
                TypeAdapter(StopText if isinstance(value, str) else list[StopText]).validate_python(value)
            except ValidationError as exc:
                error = exc.errors()[0]
                where = "".join(f"item {part}: " for part in error["loc"])
                raise ValueError(where + error["msg"].removeprefix("Value error, ")) from None
            raise


class ChatCompletionRequest(OpenAISampling):
    """OpenAI's chat completion request, with vLLM's and TGI's extensions and our processors.

    Every field is implemented, or accepted and named in `warnings` (it cannot change the tokens), or
    refused by name: `playground.wire.chat_fields` says which, and the README's table lists them.
    """

    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    prompt_logprobs: int | None = Field(default=None, ge=0, le=20, description="vLLM's: the prompt's logprobs.")
    response_format: ResponseFormat | None = None
    tools: list[ToolSpec] | None = Field(default=None, min_length=1, max_length=64)
    tool_choice: ToolChoice | None = None
    tool_prompt: str | None = Field(default=None, max_length=4096, description="TGI's: the text before the tools.")
    parallel_tool_calls: bool | None = None
    continue_final_message: bool = Field(
        default=False, description="vLLM's: continue the final assistant message, forced through the constraint."
    )
    add_generation_prompt: bool = Field(default=True, description="vLLM's: end the prompt with the assistant header.")
    chat_template_kwargs: dict[str, Any] | None = Field(default=None, max_length=32)
    max_reasoning_tokens: int | None = Field(
        default=None, ge=0, description="A thinking model's reasoning budget; then its end delimiter is forced."
    )
    reasoning_effort: ReasoningEffort | None = Field(
        default=None, description="OpenAI's: a reasoning budget (see max_reasoning_tokens) by name."
    )
    think_first: bool = Field(
        default=False,
        description="Open a reasoning block before the answer (plain-text <think> where the model has none).",
    )
    truncate_prompt_tokens: KeptTokens | None = Field(
        default=None, description="vLLM's: keep the last k tokens; -1: as many as the context leaves room for."
    )
    # Accepted and named in `warnings`, or refused by name: see playground.wire.chat_fields.
    metadata: Any = None
    store: Any = None
    service_tier: Any = None
    prompt_cache_key: Any = None
    prompt_cache_options: Any = None
    prompt_cache_retention: Any = None
    moderation: Any = None
    safety_identifier: Any = None
    prediction: Any = None
    modalities: Any = None
    priority: Any = None
    request_id: Any = None
    guided_decoding_backend: Any = None
    guided_whitespace_pattern: Any = None
    skip_special_tokens: Any = None
    spaces_between_special_tokens: Any = None
    functions: Any = None
    function_call: Any = None
    audio: Any = None
    web_search_options: Any = None
    verbosity: Any = None
    echo: Any = None
    ignore_eos: Any = None
    chat_template: Any = None
    documents: Any = None
    mm_processor_kwargs: Any = None
    add_special_tokens: Any = None

    _listed_bias: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _tgi_logit_bias(cls, data: Any, handler: Any) -> ChatCompletionRequest:
        """TGI's spec (and huggingface_hub's chat_completion) types logit_bias as a list of numbers, which names no
        token and which TGI does not use: accepted and named in `warnings` (chat_fields), as TGI ignores it."""
        bias = data.get("logit_bias") if isinstance(data, dict) else None
        listed = isinstance(bias, list)
        if listed:
            if not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bias):
                raise ValueError("logit_bias: a map of token ids to biases (or TGI's unused list of numbers)")
            data = {key: value for key, value in data.items() if key != "logit_bias"}
        req = handler(data)
        req._listed_bias = listed
        return req

    @property
    def listed_logit_bias(self) -> bool:
        """logit_bias came as TGI's list (ignored)."""
        return self._listed_bias

    @field_validator("messages")
    @classmethod
    def _total_size(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        return check_messages_size(messages)

    @model_validator(mode="after")
    def _allowed_tools(self) -> ChatCompletionRequest:
        self.tools, self.tool_choice = narrowed_tools(self.tools, self.tool_choice)
        return self

    @model_validator(mode="after")
    def _total_size_with_tools(self) -> ChatCompletionRequest:
        """The tools are described in the prompt (escaped as JSON): they count toward the same limit."""
        if self.tools:
            check_messages_size(self.messages, len(describe_tools(self.tools)))
        return self


def describe_tools(tools: list[ToolSpec]) -> str:
    """The tools as the prompt describes them (JSON; its escaping can multiply a text sixfold)."""
    return json.dumps([t.function.model_dump(exclude_none=True) for t in tools])


class TopLogprob(ResponseBody):
    """OpenAI's TopLogprob."""

    token: str
    logprob: float | None
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    """OpenAI's ChatCompletionTokenLogprob (our extras: raw_logprob, mass_kept)."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(ResponseBody):
    content: list[TokenLogprob] | None = None


class AssistantMessage(ResponseBody):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatChoice(ResponseBody):
    """One choice of a ChatCompletion (our extras: validation, seed, constraint_kind, constraint_engine)."""

    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None


class Usage(ResponseBody):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int] | None = None  # cached_tokens: what the prefix cache held
    completion_tokens_details: dict[str, int] | None = None


class ChatCompletion(ResponseBody):
    """OpenAI's ChatCompletion response."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: Usage | None = None
