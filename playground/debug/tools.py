"""Tool calls on /v1/chat/completions: OpenAI's `tools` and `tool_choice` as a constraint, and the answer back
in OpenAI's `tool_calls` shape.

`tool_choice` named: the answer is that function's arguments, constrained by its parameters schema.
`required`: a JSON object {"name", "arguments"}, the name one of the tools and the arguments that tool's
schema. `auto`: free text (not starting with `{`) or such a call, as a Lark grammar with inline JSON
schemas (llguidance). `none`, or no tools: the request's own constraint. The tools are described to the
model in a system message.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import Field, ValidationError

from playground.errors import InvalidConstraintError, ParameterError
from playground.types import ChatCompletionRequest, ChatMessage, GrammarType, NamedToolChoice, Strict, ToolSpec
from playground.types.chat import describe_tools
from playground.wire.errors import parameter_error

INSTRUCTIONS = (
    "You can call these functions:\n{tools}\n"
    'To call one, answer with only a JSON object {{"name": <function name>, "arguments": <object>}}.'
)


class ToolsConstraint(Strict):
    """The UI's "tools" kind: tool definitions as OpenAI takes them, and the tool_choice."""

    tools: list[ToolSpec] = Field(min_length=1, max_length=64)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = "auto"


ToolRequest = ChatCompletionRequest | ToolsConstraint


def mode(req: ToolRequest) -> str | None:
    """none/auto/required, or the name of the one function to call; None when no tool can be called."""
    if not req.tools:
        if req.tool_choice not in (None, "none"):
            raise ParameterError("tool_choice: needs `tools`", field="tool_choice")
        return None
    choice = req.tool_choice or "auto"
    if choice == "none":
        return None
    if isinstance(choice, str):
        return choice
    name = choice.function.name
    if name not in {t.function.name for t in req.tools}:
        raise ParameterError(f"tool_choice: no tool named {name!r} in `tools`", field="tool_choice")
    return "named"


def _call_schema(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": tool.function.name}, "arguments": _parameters(tool)},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def _parameters(tool: ToolSpec) -> dict[str, Any]:
    return tool.function.parameters or {"type": "object"}


def grammar(req: ToolRequest, other: dict[str, Any] | None) -> dict[str, Any] | None:
    """The grammar for a chat request: the tools' when a call may happen, else the request's own."""
    how = mode(req)
    if how is None:
        return other
    if other is not None:
        raise ParameterError("tools: give tools or a response format / structured output, not both", field="tools")
    tools = req.tools or []
    if how == "named":
        return {"type": "json", "value": _parameters(_named(req))}
    calls = [_call_schema(t) for t in tools]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if how == "required":
        return {"type": "json", "value": schema}
    return {
        "type": "grammar",
        "value": f"start: call | text\ncall: %json {json.dumps(schema)}\ntext: /[^{{][\\s\\S]*/\n",
    }


def _named(req: ToolRequest) -> ToolSpec:
    name = req.tool_choice.function.name  # type: ignore[union-attr]
    return next(t for t in req.tools or [] if t.function.name == name)


def with_tools(req: ToolRequest, messages: list[ChatMessage]) -> list[ChatMessage]:
    """The messages with the tools described in a system message, and past calls written out as text."""
    if mode(req) is None:
        return messages
    note = INSTRUCTIONS.format(tools=describe_tools(req.tools or []))
    if mode(req) == "named":
        note += f"\nCall `{_named(req).function.name}` now: answer with its arguments object only."
    out = [_as_text(m) for m in messages]
    if out and out[0].role == "system":
        return [ChatMessage(role="system", content=out[0].text() + "\n\n" + note), *out[1:]]
    return [ChatMessage(role="system", content=note), *out]


def _as_text(message: ChatMessage) -> ChatMessage:
    """An assistant turn that called tools becomes the JSON it would have written."""
    written = message.written_calls()
    return message if written is None else ChatMessage(role="assistant", content=written)


def answer(req: ToolRequest, text: str) -> tuple[dict[str, Any], bool]:
    """The assistant message (content, or tool_calls in OpenAI's shape) and whether it is a call."""
    how = mode(req)
    if how is None or (how == "auto" and not text.lstrip().startswith("{")):
        return {"role": "assistant", "content": text}, False
    try:
        data = json.loads(text)
    except json.JSONDecodeError:  # cut off by max_tokens: not a call that can be made
        return {"role": "assistant", "content": text}, False
    if how == "named":
        name, arguments = _named(req).function.name, data
    elif isinstance(data, dict):
        name, arguments = data.get("name"), data.get("arguments")
    else:
        return {"role": "assistant", "content": text}, False
    call = {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}, True


# --- the UI's "tools" kind ------------------------------------------------------------------------------


def from_text(text: str) -> ToolsConstraint:
    """The editor's text: a list of tools (tool_choice auto), or {"tools": [...], "tool_choice": ...}."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidConstraintError(f"invalid JSON in the tools: {exc.msg} at line {exc.lineno}") from None
    if isinstance(data, list):
        data = {"tools": data}
    try:
        tools = ToolsConstraint.model_validate(data)
    except ValidationError as exc:
        raise InvalidConstraintError(parameter_error(exc).message) from None
    mode(tools)
    return tools


def ui_grammar(text: str) -> GrammarType | None:
    """The grammar the tools ask for (None with tool_choice none)."""
    found = grammar(from_text(text), None)
    return GrammarType.model_validate(found) if found else None


def ui_system(kind: str, text: str, system_prompt: str) -> str:
    """The system prompt with the tools described, for the "tools" kind; unchanged for the others."""
    if kind != "tools":
        return system_prompt
    try:
        tools = from_text(text)
    except (InvalidConstraintError, ParameterError):
        return system_prompt  # the request itself reports the problem
    messages = with_tools(tools, [ChatMessage(role="system", content=system_prompt)] if system_prompt.strip() else [])
    return messages[0].text() if messages else system_prompt


def problem(text: str) -> str | None:
    """The live check under the editor: what is wrong with the tools, or None."""
    try:
        from_text(text)
    except (InvalidConstraintError, ParameterError) as exc:
        return exc.message
    return None
