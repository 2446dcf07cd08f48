"""OpenAI's Responses API (`POST /v1/responses`, as vLLM serves it): the request read as the chat request it means,
and a chat completion written back as a Response (its output items, usage and status)."""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from playground.errors import ParameterError
from playground.types.base import InputText, Name
from playground.types.chat import ReasoningEffort, Request, StructuredOutputs
from playground.types.params import Sampling
from playground.types.sizes import MAX_MESSAGES, MAX_SEED
from playground.wire.errors import error_field, validation_message
from playground.wire.inbound import ChatRequest

# Fields OpenAI's SDKs send that cannot change the tokens: accepted, and each named in `warnings`.
IGNORED = (
    "store",
    "metadata",
    "user",
    "service_tier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "truncation",
    "max_tool_calls",
)
ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
# Input items a client sends back from an earlier response (`input += response.output`) that the prompt leaves out,
# as chat templates leave out past turns' reasoning.
SKIPPED = ("reasoning",)
DEFAULT_NAME = "response"  # a json_schema format's name when the client gave none
# The chat route's field names as this route's client sent them, for an error's `param` and message.
NAMES = {
    "grammar": "text.format",  # a constraint error names where the constraint came in
    "inputs": "input",
    "messages": "input",
    "max_new_tokens": "max_output_tokens",
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
}


# OpenAI's `include` values: the logprobs are given; the others name outputs of tools this route does not run, and
# there is nothing to add for them. Anything else is refused, as OpenAI refuses it.
IncludeItem = Literal[
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
]


def names(body: ResponsesRequest) -> dict[str, str]:
    """NAMES for one request: a constraint's errors name the field it came in (`text.format` or
    `structured_outputs`), a reasoning budget's the field that set it."""
    fmt = body.text.format if body.text is not None else None
    named = dict(NAMES)
    if (fmt is None or fmt.type == "text") and body.structured_outputs is not None:
        named["grammar"] = "structured_outputs"
    if body.max_reasoning_tokens is None and body.reasoning is not None and body.reasoning.effort is not None:
        named["max_reasoning_tokens"] = "reasoning.effort"
    return named


class TextFormat(Request):
    """`text.format`: plain text, any JSON object, or JSON under a schema (`strict`: no undeclared keys)."""

    type: Literal["text", "json_object", "json_schema"] = "text"
    name: Name | None = None
    description: str | None = Field(default=None, max_length=4096)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextOptions(Request):
    format: TextFormat = Field(default_factory=TextFormat)
    verbosity: Literal["low", "medium", "high"] | None = None


class Reasoning(Request):
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    # Which past reasoning items the prompt shows: here only the current turn's (see SKIPPED); "all_turns" is refused.
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: Name | None = None


class ResponsesRequest(Request, Sampling):
    """OpenAI's ResponseCreateParams for text: `input` (a string, or messages whose content is text), `instructions`,
    `text.format`, `max_output_tokens`, sampling, `top_logprobs`, `reasoning.effort`, `stream`; vLLM's sampling
    extensions (`top_k`, `min_p`, `repetition_penalty`, `seed`, ...) and `structured_outputs`; our
    `max_reasoning_tokens`. Tools, stored responses and background runs
    are refused by name: this server keeps no responses and its tool calls live on /v1/chat/completions."""

    model: Name | None = None
    input: InputText | Annotated[list[dict[str, Any]], Field(max_length=MAX_MESSAGES)]
    instructions: InputText | None = None
    text: TextOptions | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_k: int | None = Field(default=None, ge=-1)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    include: list[IncludeItem] | None = Field(default=None, max_length=16)
    reasoning: Reasoning | None = None
    max_reasoning_tokens: int | None = Field(default=None, ge=0, description="Ours, as on chat: a reasoning budget.")
    structured_outputs: StructuredOutputs | None = Field(
        default=None, description="vLLM's, as on chat: a regex, choice or grammar instead of `text.format`."
    )
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    tool_choice: str | dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=128)
    previous_response_id: Name | None = None
    conversation: str | dict[str, Any] | None = None
    background: bool | None = None
    store: bool | None = None
    metadata: dict[str, Any] | None = Field(default=None, max_length=16)
    user: Name | None = None
    service_tier: Name | None = None
    prompt_cache_key: Name | None = None
    safety_identifier: Name | None = None
    truncation: Literal["disabled", "auto"] | None = None
    prompt_cache_retention: Name | None = None
    max_tool_calls: int | None = Field(default=None, ge=0)

    def warnings(self) -> list[str]:
        sent = self.model_fields_set
        notes = [f"{name}: accepted and ignored (it cannot change the tokens)" for name in IGNORED if name in sent]
        if self.text and self.text.verbosity:
            notes.append("text.verbosity: accepted and ignored (the model has no verbosity setting)")
        if self.reasoning and (self.reasoning.summary or self.reasoning.generate_summary):
            notes.append("reasoning.summary: accepted and ignored (the reasoning comes whole, as a reasoning item)")
        if self.reasoning and self.reasoning.mode not in (None, "standard"):
            notes.append("reasoning.mode: accepted and ignored (one execution mode here: standard)")
        return notes

    def logprobs(self) -> bool:
        return self.top_logprobs is not None or "message.output_text.logprobs" in (self.include or [])


def chat_request(req: ResponsesRequest) -> ChatRequest:
    """The chat request a Responses request means: `instructions` as the system message, `input` as the messages,
    `text.format` as response_format; errors name this route's fields."""
    _refuse_what_this_server_cannot_keep(req)
    chat: dict[str, Any] = {
        **req.model_dump(include=set(Sampling.model_fields), exclude_unset=True),
        "model": req.model,
        "messages": _messages(req),
        "max_completion_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_k": req.top_k,
        "frequency_penalty": req.frequency_penalty,
        "seed": req.seed,
        "logprobs": req.logprobs() or None,
        "top_logprobs": req.top_logprobs,
        "response_format": _response_format(req.text.format if req.text else TextFormat()),
        "reasoning_effort": req.reasoning.effort if req.reasoning else None,
        "max_reasoning_tokens": req.max_reasoning_tokens,
        "structured_outputs": req.structured_outputs.model_dump(exclude_unset=True) if req.structured_outputs else None,
        "stream": req.stream,
    }
    try:
        return ChatRequest.model_validate({key: value for key, value in chat.items() if value is not None})
    except ValidationError as exc:
        errors = [{**e, "loc": _renamed(e["loc"], req)} for e in exc.errors(include_url=False)]
        raise ParameterError(validation_message(errors), field=error_field(errors[0]) or None) from None


def _refuse_what_this_server_cannot_keep(req: ResponsesRequest) -> None:
    """Stored responses, conversations, background runs and tools change what the model sees or does: refused."""
    refused = {
        "previous_response_id": "this server keeps no responses: send the whole conversation in `input`",
        "conversation": "this server keeps no conversations: send the whole conversation in `input`",
        "background": "responses run in the foreground only",
        "tools": "tool calls are served on /v1/chat/completions (`tools`, `tool_choice`)",
    }
    for name, why in refused.items():
        if getattr(req, name):
            raise ParameterError(f"{name}: not supported here ({why})", field=name)
    if req.reasoning and req.reasoning.context == "all_turns":
        raise ParameterError(
            "reasoning.context: 'all_turns' is not supported here (past turns' reasoning items are left out of the "
            "prompt, as chat templates leave them out: 'current_turn')",
            field="reasoning.context",
        )
    if req.tool_choice not in (None, "none", "auto"):
        raise ParameterError("tool_choice: only 'none' or 'auto' without tools here", field="tool_choice")


def _renamed(loc: tuple[Any, ...], req: ResponsesRequest) -> tuple[Any, ...]:
    """A chat field's error location as this route's: `messages[i]` is `input[j]`, `input` or `instructions`."""
    if len(loc) > 1 and loc[0] == "messages" and isinstance(loc[1], int):
        message = loc[1] - (1 if req.instructions else 0)
        if message < 0:
            return ("instructions",)
        if isinstance(req.input, str):
            return ("input",)
        kept = [i for i, item in enumerate(req.input) if item.get("type") not in SKIPPED]
        return ("input", kept[message], *loc[2:]) if message < len(kept) else ("input",)
    return (NAMES.get(str(loc[0]), loc[0]), *loc[1:]) if loc else loc


def _messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    system = [{"role": "system", "content": req.instructions}] if req.instructions else []
    if isinstance(req.input, str):
        return [*system, {"role": "user", "content": req.input}]
    kept = [_message(item, f"input[{i}]") for i, item in enumerate(req.input) if item.get("type") not in SKIPPED]
    if system and len(kept) >= MAX_MESSAGES:
        raise ParameterError(
            f"input: at most {MAX_MESSAGES - 1} messages with `instructions` (they take a message of their own)",
            field="input",
        )
    return [*system, *kept]


def _message(item: dict[str, Any], field: str) -> dict[str, Any]:
    """One input item as a chat message: a message (`type` "message" or none) whose content is text."""
    kind = item.get("type", "message")
    if kind != "message":
        raise ParameterError(
            f"{field}.type: {kind!r} items are not supported here (text messages only; tool calls are served on "
            "/v1/chat/completions)",
            field=field,
        )
    role, content = item.get("role"), item.get("content")
    if role not in ROLES:
        raise ParameterError(f"{field}.role: one of {', '.join(ROLES)}, got {role!r}", field=field)
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise ParameterError(f"{field}.content: a string or a list of text parts", field=field)
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS or not isinstance(part.get("text"), str):
            got = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ParameterError(
                f"{field}.content[{j}]: text parts only ({', '.join(TEXT_PARTS)} with `text`), got {got!r}",
                field=field,
            )
        texts.append(part["text"])
    return {"role": role, "content": "".join(texts)}


def _response_format(fmt: TextFormat) -> dict[str, Any] | None:
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.schema_ is None:
        raise ParameterError("text.format.schema: required when type is 'json_schema'", field="text.format")
    spec = {"name": fmt.name or DEFAULT_NAME, "schema": fmt.schema_, "strict": fmt.strict}
    return {"type": "json_schema", "json_schema": {k: v for k, v in spec.items() if v is not None}}


def _echoed(fmt: TextFormat) -> dict[str, Any]:
    """`text.format` as the Response repeats it: a schema's name as used (the SDK's type requires one)."""
    echoed = fmt.model_dump(by_alias=True, exclude_none=True)
    if fmt.type == "json_schema":
        echoed.setdefault("name", DEFAULT_NAME)
    return echoed


def new_ids() -> dict[str, str]:
    """The response's id and its output items' ids, fixed before a stream announces them."""
    return {key: f"{key}_{uuid.uuid4().hex}" for key in ("resp", "rs", "msg")}


def response_body(
    req: ResponsesRequest,
    ids: dict[str, str],
    model: str,
    completion: dict[str, Any] | None = None,
    *,
    created_at: int | None = None,
) -> dict[str, Any]:
    """The Response: from a chat completion's only choice, or, without one, the shell a stream starts with."""
    fmt = req.text.format if req.text else TextFormat()
    body: dict[str, Any] = {
        "id": ids["resp"],
        "object": "response",
        "created_at": created_at or int(time.time()),
        "status": "in_progress",
        "background": False,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "model": model,
        "output": [],
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "previous_response_id": None,
        "reasoning": _reasoning(req),
        "store": False,
        "temperature": req.temperature,
        "text": {"format": _echoed(fmt)},
        "tool_choice": req.tool_choice or "auto",
        "tools": [],
        "top_logprobs": req.top_logprobs,
        "top_p": req.top_p,
        "truncation": "disabled",
        "usage": None,
        "user": req.user,
        "metadata": req.metadata or {},
    }
    if completion is None:
        return body
    choice = completion["choices"][0]
    message, cut = choice["message"], choice["finish_reason"] == "length"
    status = "incomplete" if cut else "completed"
    reasoning = message.get("reasoning")
    if reasoning:
        body["output"].append(reasoning_item(ids["rs"], reasoning))
    body["output"].append(message_item(ids["msg"], message.get("content") or "", _logprobs(choice), status))
    extras = {key: choice[key] for key in ("validation", "seed", "constraint_kind", "constraint_engine")}
    return {
        **body,
        "status": status,
        "completed_at": None if cut else int(time.time()),
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "usage": usage(completion["usage"]),
        **extras,
        "warnings": [*req.warnings(), *choice["warnings"]],
    }


def message_item(item_id: str, text: str, logprobs: list[dict[str, Any]] | None, status: str) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def _reasoning(req: ResponsesRequest) -> dict[str, Any]:
    """The reasoning settings as used: the effort asked; the context and mode in effect where the request named them."""
    used: dict[str, Any] = {"effort": req.reasoning.effort if req.reasoning else None, "summary": None}
    if req.reasoning and req.reasoning.context:
        used["context"] = "current_turn"
    if req.reasoning and req.reasoning.mode:
        used["mode"] = "standard"
    return used


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id, "summary": [], "content": [{"type": "reasoning_text", "text": text}]}


def _logprobs(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    found = choice.get("logprobs")
    return None if found is None else list(found.get("content") or [])


def usage(chat_usage: dict[str, Any]) -> dict[str, Any]:
    reasoning = (chat_usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    return {
        "input_tokens": chat_usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": chat_usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": chat_usage["total_tokens"],
    }
