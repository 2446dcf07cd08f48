"""OpenAI's Responses API (`POST /v1/responses`, as vLLM serves it): the request read as the chat request it means,
and a chat completion written back as a Response (its output items, usage and status).

Function tools are the chat route's tools: a Responses tool (flat: `name`, `parameters`) is a chat tool (nested under
`function`), a `function_call` input item is a past assistant turn's call, a `function_call_output` a `tool` message,
and each call the model makes is a `function_call` output item whose `call_id` the client answers with."""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, ValidationError, field_validator, model_validator

from playground.errors import ParameterError
from playground.types.base import FIT_CONTEXT, InputText, Name
from playground.types.chat import (
    MAX_ARGUMENT_NESTING,
    FunctionCall,
    ReasoningEffort,
    Request,
    StructuredOutputs,
    nesting,
)
from playground.types.params import Sampling
from playground.types.sizes import MAX_MESSAGES, MAX_SEED
from playground.wire.errors import error_field, renamed, validation_message
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
    "max_tool_calls",
)
ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
TOOL_CHOICES = ("none", "auto", "required")
# OpenAI's metadata: up to 16 pairs, keys up to 64 characters, values up to 512.
MetadataKey = Annotated[str, StringConstraints(max_length=64)]
MetadataValue = Annotated[str, StringConstraints(max_length=512)]
# Input items a client sends back from an earlier response (`input += response.output`) that the prompt leaves out,
# as chat templates leave out past turns' reasoning.
SKIPPED = ("reasoning",)
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
    "truncate": "truncation",  # ("auto": a remote TGI refuses it by name)
    "truncate_prompt_tokens": "truncation",
}
# A function tool's keys OpenAI's SDKs may send that change nothing here at these values (left out), and why
# another value is refused.
TOOL_DEFAULTS = {"defer_loading": (False, "no tool search"), "allowed_callers": (["direct"], "no programmatic calls")}


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
    `structured_outputs`), a reasoning budget's the field that set it, a tool's schema its place in `tools`."""
    fmt = body.text.format if body.text is not None else None
    named = dict(NAMES)
    if (fmt is None or fmt.type == "text") and body.structured_outputs is not None:
        named["grammar"] = "structured_outputs"
    if body.max_reasoning_tokens is None and body.reasoning is not None and body.reasoning.effort is not None:
        named["max_reasoning_tokens"] = "reasoning.effort"
    sent = _sent_indexes(body)
    for k, i in enumerate(sent):  # a tool's schema is checked as chat's tools[k].function.parameters
        named[f"tools[{k}].function.parameters"] = f"tools[{i}].parameters"
    choice = body.tool_choice
    if sent and (choice == "required" or isinstance(choice, dict) and choice.get("mode") == "required"):
        named["grammar"] = "tools"  # a forced call's constraint is the tools' (text.format does not apply)
    elif sent and isinstance(choice, dict) and choice.get("type") == "function":
        index = next((i for i in sent if (body.tools or [])[i].get("name") == choice.get("name")), None)
        named["grammar"] = "tools" if index is None else f"tools[{index}].parameters"
    return named


def _shallow(value: Any) -> Any:
    """A field the Response repeats as sent nests at most MAX_ARGUMENT_NESTING levels (JSON writers stop deeper)."""
    if value is not None and nesting(value) > MAX_ARGUMENT_NESTING:
        raise ValueError(f"nests deeper than {MAX_ARGUMENT_NESTING} levels")
    return value


class TextFormat(Request):
    """`text.format`: plain text, any JSON object, or JSON under a schema (`strict`: no undeclared keys)."""

    type: Literal["text", "json_object", "json_schema"] = "text"
    name: Name | None = None
    description: str | None = Field(default=None, max_length=4096)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None

    _echoable = field_validator("schema_")(_shallow)

    @model_validator(mode="after")
    def _only_json_schema_has_a_schema(self) -> TextFormat:
        """As OpenAI's: `text` and `json_object` take no schema fields (a schema sent there would be dropped)."""
        sent = sorted(self.model_fields_set & {"name", "description", "schema_", "strict"})
        if self.type != "json_schema" and sent:
            fields = ", ".join(name.rstrip("_") for name in sent)
            raise ValueError(f'{fields}: only a "json_schema" format takes it; this one is "{self.type}"')
        return self


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
    `max_reasoning_tokens`; function `tools` with `tool_choice` and `parallel_tool_calls`, and the
    `function_call` / `function_call_output` items of a conversation that used them. Hosted tools, stored responses
    and background runs are refused by name: this server runs no tools itself and keeps no responses."""

    model: Name | None = None
    input: InputText | Annotated[list[dict[str, Any]], Field(max_length=MAX_MESSAGES)]
    instructions: InputText | None = None
    text: TextOptions | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_k: int | None = Field(default=None, ge=-1)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=-(MAX_SEED + 1), le=MAX_SEED)  # any int64, as chat's
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
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=64)
    previous_response_id: Name | None = None
    conversation: str | dict[str, Any] | None = None
    background: bool | None = None
    store: bool | None = None
    metadata: dict[MetadataKey, MetadataValue] | None = Field(default=None, max_length=16)
    user: Name | None = None
    service_tier: Name | None = None
    prompt_cache_key: Name | None = None
    safety_identifier: Name | None = None
    truncation: Literal["disabled", "auto"] | None = None
    prompt_cache_retention: Name | None = None
    max_tool_calls: int | None = Field(default=None, ge=0)

    _echoable = field_validator("tools", "tool_choice")(_shallow)

    def warnings(self) -> list[str]:
        sent = self.model_fields_set
        notes = [f"{name}: accepted and ignored (it cannot change the tokens)" for name in IGNORED if name in sent]
        if self.text and self.text.verbosity:
            notes.append("text.verbosity: accepted and ignored (the model has no verbosity setting)")
        if self.reasoning and (self.reasoning.summary or self.reasoning.generate_summary):
            notes.append("reasoning.summary: accepted and ignored (the reasoning comes whole, as a reasoning item)")
        if "reasoning.encrypted_content" in (self.include or []):
            notes.append(
                "include reasoning.encrypted_content: nothing to add (no reasoning is kept here; a reasoning item "
                "carries its text, and one sent back in `input` is skipped)"
            )
        if self.reasoning and self.reasoning.mode not in (None, "standard"):
            notes.append("reasoning.mode: accepted and ignored (one execution mode here: standard)")
        return notes

    def logprobs(self) -> bool:
        return self.top_logprobs is not None or "message.output_text.logprobs" in (self.include or [])


def chat_request(req: ResponsesRequest) -> ChatRequest:
    """The chat request a Responses request means: `instructions` as the system message, `input` as the messages,
    `text.format` as response_format; errors name this route's fields."""
    _refuse_what_this_server_cannot_keep(req)
    tools, tool_choice = _tools(req)
    chat: dict[str, Any] = {
        **req.model_dump(include=set(Sampling.model_fields), exclude_unset=True),
        "model": req.model,
        "messages": _messages(req),
        "max_completion_tokens": req.max_output_tokens,
        "temperature": 1.0 if req.temperature is None else req.temperature,  # in effect, as OpenAI echoes it
        "top_k": req.top_k,
        "frequency_penalty": req.frequency_penalty,
        "seed": req.seed,
        "logprobs": req.logprobs() or None,
        "top_logprobs": req.top_logprobs,
        "response_format": _response_format(req.text.format if req.text else TextFormat()),
        "reasoning_effort": req.reasoning.effort if req.reasoning else None,
        "max_reasoning_tokens": req.max_reasoning_tokens,
        "structured_outputs": req.structured_outputs.model_dump(exclude_unset=True) if req.structured_outputs else None,
        "tools": tools,
        "tool_choice": tool_choice,
        "parallel_tool_calls": req.parallel_tool_calls,
        # "auto": the prompt's first tokens go where it outgrows the context (vLLM's reading: its last tokens kept)
        "truncate_prompt_tokens": FIT_CONTEXT if req.truncation == "auto" else None,
        "stream": req.stream,
    }
    try:
        return ChatRequest.model_validate({key: value for key, value in chat.items() if value is not None})
    except ValidationError as exc:
        errors = [{**e, "loc": _renamed(e["loc"], req)} for e in exc.errors(include_url=False)]
        raise ParameterError(validation_message(errors), field=error_field(errors[0]) or None) from None


def _refuse_what_this_server_cannot_keep(req: ResponsesRequest) -> None:
    """Stored responses, conversations and background runs change what the model sees or does: refused."""
    refused = {
        "previous_response_id": "this server keeps no responses: send the whole conversation in `input`",
        "conversation": "this server keeps no conversations: send the whole conversation in `input`",
        "background": "responses run in the foreground only",
    }
    for name, why in refused.items():
        if getattr(req, name):
            raise ParameterError(f"{name}: not supported here ({why})", field=name)
    if req.stream_options is not None and not req.stream:  # as OpenAI and the chat route refuse it
        raise ParameterError("stream_options: only with stream: true", field="stream_options")
    if req.reasoning and req.reasoning.context == "all_turns":
        raise ParameterError(
            "reasoning.context: 'all_turns' is not supported here (past turns' reasoning items are left out of the "
            "prompt, as chat templates leave them out: 'current_turn')",
            field="reasoning.context",
        )


def _tools(req: ResponsesRequest) -> tuple[list[dict[str, Any]] | None, str | dict[str, Any] | None]:
    """The chat route's `tools` and `tool_choice`: function tools nested under `function`; `allowed_tools` keeps the
    tools it names, under its mode; a named function as chat names it. Hosted tools are refused by type."""
    functions: list[dict[str, Any]] = []
    for i, tool in enumerate(req.tools or []):
        if "type" not in tool:
            raise ParameterError(f"tools[{i}].type: required ('function')", field=f"tools[{i}]")
        if tool.get("type") != "function":
            raise ParameterError(
                f"tools[{i}].type: {tool.get('type')!r} tools are not supported here (this server runs no tools "
                "itself: function tools only, which your code runs)",
                field=f"tools[{i}]",
            )
        for key, (value, why) in TOOL_DEFAULTS.items():
            if key in tool and tool[key] != value:
                raise ParameterError(f"tools[{i}].{key}: only {value!r} here ({why})", field=f"tools[{i}]")
        functions.append(
            {"type": "function", "function": {k: v for k, v in tool.items() if k != "type" and k not in TOOL_DEFAULTS}}
        )
    choice = req.tool_choice
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise ParameterError(f"tool_choice: one of {', '.join(TOOL_CHOICES)}, got {choice!r}", field="tool_choice")
    elif choice is not None:
        choice = _tool_choice(choice, [f["function"].get("name") for f in functions])
        functions = [functions[i] for i in _sent_indexes(req)]
    if not functions:
        if choice not in (None, "none", "auto"):
            raise ParameterError(f"tool_choice: {req.tool_choice!r} needs function `tools`", field="tool_choice")
        return None, None
    return functions, choice


def _tool_choice(choice: dict[str, Any], names: list[str | None]) -> str | dict[str, Any]:
    """A tool choice object as chat's: a function by name, or `allowed_tools`' mode (its tools: `_sent_indexes`)."""
    if choice.get("type") == "function":
        if not isinstance(choice.get("name"), str) or choice["name"] not in names:
            raise ParameterError(
                f"tool_choice.name: {choice.get('name')!r} is not one of the function tools", field="tool_choice"
            )
        return {"type": "function", "function": {"name": choice["name"]}}
    if choice.get("type") == "allowed_tools":
        mode, allowed = choice.get("mode"), choice.get("tools")
        if mode not in ("auto", "required") or not isinstance(allowed, list) or not allowed:
            raise ParameterError(
                "tool_choice: allowed_tools needs `mode` ('auto' or 'required') and a list of `tools`",
                field="tool_choice",
            )
        for j, tool in enumerate(allowed):
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise ParameterError(
                    f"tool_choice.tools[{j}]: a function tool of `tools` by name ({{'type': 'function', 'name': ...}})",
                    field="tool_choice",
                )
            if tool.get("name") not in names:
                raise ParameterError(
                    f"tool_choice.tools[{j}].name: {tool.get('name')!r} is not one of the function tools",
                    field="tool_choice",
                )
        return mode
    raise ParameterError(
        f"tool_choice.type: {choice.get('type')!r} is not supported here (function tools only: 'function' by name, "
        "or 'allowed_tools')",
        field="tool_choice",
    )


def _sent_indexes(req: ResponsesRequest) -> list[int]:
    """Which of `tools` the chat request gets, in order: all, or those `allowed_tools` names."""
    indexes = list(range(len(req.tools or [])))
    choice = req.tool_choice
    if (
        not isinstance(choice, dict)
        or choice.get("type") != "allowed_tools"
        or not isinstance(choice.get("tools"), list)
    ):
        return indexes
    allowed = [tool.get("name") for tool in choice["tools"] if isinstance(tool, dict)]
    return [i for i in indexes if (req.tools or [])[i].get("name") in allowed]


def _renamed(loc: tuple[Any, ...], req: ResponsesRequest) -> tuple[Any, ...]:
    """A chat field's error location as this route's: `messages[i]` is `input[j]`, `input` or `instructions`;
    `tools[i].function.x` is `tools[i].x`."""
    if len(loc) > 1 and loc[0] == "messages" and isinstance(loc[1], int):
        origins = _conversation(req)[1]
        origin = origins[loc[1]] if loc[1] < len(origins) else None
        if origin is None:
            return ("instructions",) if req.instructions and loc[1] == 0 else ("input",)
        return ("input",) if isinstance(req.input, str) else ("input", origin, *loc[2:])
    if len(loc) > 1 and loc[0] == "tools" and isinstance(loc[1], int):
        sent = _sent_indexes(req)
        index = sent[loc[1]] if loc[1] < len(sent) else loc[1]
        return ("tools", index, *(loc[3:] if loc[2:3] == ("function",) else loc[2:]))
    return (NAMES.get(str(loc[0]), loc[0]), *loc[1:]) if loc else loc


def _messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    messages, _ = _conversation(req)
    if len(messages) > MAX_MESSAGES:  # (input holds at most MAX_MESSAGES items: the instructions made one more)
        raise ParameterError(
            f"input: at most {MAX_MESSAGES - 1} messages with `instructions` (they take a message of their own)",
            field="input",
        )
    return messages


def _conversation(req: ResponsesRequest) -> tuple[list[dict[str, Any]], list[int | None]]:
    """The chat messages, and the input item each came from (None: `instructions`, or `input` as a string).

    Function calls join the assistant message before them (a turn's text and its calls are one chat message), as a
    run of calls does; a call's output is a `tool` message."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": req.instructions}] if req.instructions else []
    origins: list[int | None] = [None] * len(messages)
    if isinstance(req.input, str):
        return [*messages, {"role": "user", "content": req.input}], [*origins, None]
    called: set[str] = set()
    for i, item in enumerate(req.input):
        kind, field = item.get("type", "message"), f"input[{i}]"
        if kind in SKIPPED:
            continue
        if kind == "function_call":
            call = _function_call(item, field)
            called.add(call["id"])
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                continue
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(_call_output(item, field, called))
        else:
            messages.append(_message(item, field))
        origins.append(i)
    return messages, origins


def _function_call(item: dict[str, Any], field: str) -> dict[str, Any]:
    """A `function_call` item as a chat tool call: its `call_id` is the id its output answers."""
    name, arguments, call_id = item.get("name"), item.get("arguments"), item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ParameterError(f"{field}.call_id: the call's id, a string", field=field)
    try:
        checked = FunctionCall.model_validate({"name": name, "arguments": arguments})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ParameterError(f"{field}.{where}: {error['msg'].removeprefix('Value error, ')}", field=field) from None
    return {"id": call_id, "type": "function", "function": {"name": checked.name, "arguments": checked.arguments}}


def _call_output(item: dict[str, Any], field: str, called: set[str]) -> dict[str, Any]:
    """A `function_call_output` item as a `tool` message: its output is text, or a list of text parts; it answers a
    `function_call` item before it (as OpenAI requires)."""
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise ParameterError(f"{field}.call_id: the id of the call this output answers, a string", field=field)
    if call_id not in called:
        raise ParameterError(f"{field}.call_id: no function_call item before it has call_id {call_id!r}", field=field)
    if isinstance(output, list):
        output = _texts(output, f"{field}.output")
    if not isinstance(output, str):
        raise ParameterError(f"{field}.output: a string or a list of text parts", field=field)
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _message(item: dict[str, Any], field: str) -> dict[str, Any]:
    """One input item as a chat message: a message (`type` "message" or none) whose content is text."""
    kind = item.get("type", "message")
    if kind != "message":
        raise ParameterError(
            f"{field}.type: {kind!r} items are not supported here (text messages, and function calls with their "
            "outputs)",
            field=field,
        )
    role, content = item.get("role"), item.get("content")
    if role not in ROLES:
        raise ParameterError(f"{field}.role: one of {', '.join(ROLES)}, got {role!r}", field=field)
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise ParameterError(f"{field}.content: a string or a list of text parts", field=field)
    return {"role": role, "content": _texts(content, f"{field}.content", refusals=role == "assistant")}


def _texts(parts: list[Any], field: str, *, refusals: bool = False) -> str:
    """The parts' text; with `refusals` (an assistant's message: an OpenAI Response replayed as input) its `refusal`
    parts read as text too."""
    texts = []
    for j, part in enumerate(parts):
        key = "refusal" if refusals and isinstance(part, dict) and part.get("type") == "refusal" else "text"
        if not isinstance(part, dict) or (key == "text" and part.get("type") not in TEXT_PARTS):
            got = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ParameterError(
                f"{field}[{j}]: text parts only ({', '.join(TEXT_PARTS)} with `text`, refusal), got {got!r}",
                field=field.split(".")[0],
            )
        if not isinstance(part.get(key), str):
            raise ParameterError(
                f"{field}[{j}]: a {part['type']} part needs a string `{key}`", field=field.split(".")[0]
            )
        texts.append(part[key])
    return "".join(texts)


def _response_format(fmt: TextFormat) -> dict[str, Any] | None:
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.schema_ is None:
        raise ParameterError("text.format.schema: required when type is 'json_schema'", field="text.format")
    if not fmt.name:  # as OpenAI and vLLM refuse it: an app that runs here must not fail there
        raise ParameterError("text.format.name: required when type is 'json_schema'", field="text.format")
    spec = {"name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict}
    return {"type": "json_schema", "json_schema": {k: v for k, v in spec.items() if v is not None}}


def _echoed(fmt: TextFormat) -> dict[str, Any]:
    """`text.format` as the Response repeats it."""
    return fmt.model_dump(by_alias=True, exclude_none=True)


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
        "parallel_tool_calls": req.parallel_tool_calls is True,  # unset is one call, as on chat
        "previous_response_id": None,
        "reasoning": _reasoning(req),
        "store": False,
        "temperature": 1.0 if req.temperature is None else req.temperature,  # in effect, as OpenAI echoes it
        "text": {"format": _echoed(fmt)},
        "tool_choice": req.tool_choice or "auto",
        "tools": req.tools or [],
        "top_logprobs": req.top_logprobs,
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "truncation": req.truncation or "disabled",
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
    calls = message.get("tool_calls") or []
    # text before calls was finished (a cut falls in the calls); an answer cut before any text or call (inside a
    # call's name) lists no message: there is none, as OpenAI lists none for an answer cut while it reasons
    if message.get("content") or not (calls or cut):
        text_status = "completed" if calls else status
        body["output"].append(message_item(ids["msg"], message.get("content") or "", _logprobs(choice), text_status))
    body["output"] += [function_call_item(call, "completed") for call in calls]
    extras = {key: choice[key] for key in ("validation", "seed", "constraint_kind", "constraint_engine")}
    named = names(req)  # what the chat route says of its fields (max_tokens, ...), as this route's client sent them
    if isinstance(extras["validation"], dict) and isinstance(extras["validation"].get("message"), str):
        extras["validation"] = {**extras["validation"], "message": renamed(extras["validation"]["message"], named)}
    return {
        **body,
        "status": status,
        "completed_at": None if cut else int(time.time()),
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "usage": usage(completion["usage"]),
        **extras,
        "warnings": [*req.warnings(), *(renamed(warning, named) for warning in choice["warnings"])],
    }


def message_item(item_id: str, text: str, logprobs: list[dict[str, Any]] | None, status: str) -> dict[str, Any]:
    """The answer's message item; its text part lists `logprobs` always, empty where none were asked (as OpenAI's,
    and as the stream's content_part.added announced it)."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def function_call_id(call: dict[str, Any]) -> str:
    """A chat tool call's `function_call` item id, which follows from its call id."""
    return "fc_" + call["id"].removeprefix("call_")


def function_call_item(call: dict[str, Any], status: str) -> dict[str, Any]:
    """A chat tool call as a `function_call` output item; its item id follows from its call id (a stream announces
    the item before the Response lists it)."""
    function = call["function"]
    return {
        "type": "function_call",
        "id": function_call_id(call),
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function["arguments"],
        "status": status,
    }


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
    """The message's output_text logprobs: its own tokens' (chat lists the reasoning's too, marked)."""
    found = choice.get("logprobs")
    if found is None:
        return None
    return [entry for entry in found.get("content") or [] if entry.get("segment") != "reasoning"]


def usage(chat_usage: dict[str, Any]) -> dict[str, Any]:
    reasoning = (chat_usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    return {
        "input_tokens": chat_usage["prompt_tokens"],
        # (both required by OpenAI's type; a server that did not say what its cache held: 0)
        "input_tokens_details": {
            "cached_tokens": (chat_usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            "cache_write_tokens": 0,
        },
        "output_tokens": chat_usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": chat_usage["total_tokens"],
    }
