"""Tool calls on /v1/chat/completions: OpenAI's `tools` and `tool_choice` as a constraint, and the answer back
in OpenAI's `tool_calls` shape.

`tool_choice` named: the answer is that function's arguments, constrained by its parameters schema.
`required`: a JSON object {"name", "arguments"}, the name one of the tools and the arguments that tool's
schema. `auto`: free text (not starting with `{`) or such a call, as a Lark grammar with inline JSON
schemas (llguidance). `none`, or no tools: the request's own constraint. The tools are described to the
model in a system message.

A model whose chat template writes calls in a known envelope (`fmt`, playground.wire.tool_formats) gets the
tools from its template instead, and the calls as a structural tag in that envelope, read back from it.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic import Field, ValidationError, model_validator

from playground.constraints import Constraint, jsonformat
from playground.errors import (
    ConstraintError,
    InvalidConstraintError,
    ParameterError,
    UnsupportedConstraintError,
    json_problem,
)
from playground.types import ChatCompletionRequest, ChatMessage, GrammarType, Strict, ToolSpec
from playground.types.chat import ToolChoice, describe_tools, narrowed_tools
from playground.wire import tool_calls, tool_formats, tool_schema
from playground.wire.errors import parameter_error
from playground.wire.tool_formats import ToolFormat

INSTRUCTIONS = (
    "You can call these functions:\n{tools}\n"
    'To call one, answer with only a JSON object {{"name": <function name>, "arguments": <object>}}.'
)


class ToolsConstraint(Strict):
    """The UI's "tools" kind: tool definitions as OpenAI takes them, and the tool_choice."""

    tools: list[ToolSpec] = Field(min_length=1, max_length=64)
    tool_choice: ToolChoice | None = "auto"
    tool_prompt: str | None = None

    @model_validator(mode="after")
    def _allowed_tools(self) -> ToolsConstraint:
        self.tools, self.tool_choice = narrowed_tools(self.tools, self.tool_choice)  # type: ignore[assignment]
        return self


ToolRequest = ChatCompletionRequest | ToolsConstraint


def mode(req: ToolRequest) -> str | None:
    """none/auto/required, or "named" (one function to call); None when no tool can be called."""
    if not req.tools:
        if req.tool_choice not in (None, "none"):
            raise ParameterError("tool_choice: needs `tools`", field="tool_choice")
        return None
    names = [t.function.name for t in req.tools]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise ParameterError(f"tools: two tools are named {twice!r}", field="tools")
    choice = req.tool_choice or "auto"
    if choice == "none":
        return None
    if choice in ("auto", "required"):
        return choice
    name = _choice_name(req)
    if name not in names:
        # a bare string names a tool (TGI's shorthand) unless it is a mode: a misspelt mode lands here
        words = " (a string is none, auto, required or a tool's name)" if isinstance(req.tool_choice, str) else ""
        raise ParameterError(f"tool_choice: no tool named {name!r} in `tools`{words}", field="tool_choice")
    return "named"


def parallel(req: ToolRequest) -> bool:
    """parallel_tool_calls true: one or more calls in one answer (a JSON list); unset or false: exactly one."""
    return getattr(req, "parallel_tool_calls", None) is True


def grammar(req: ToolRequest, other: dict[str, Any] | None, fmt: ToolFormat | None = None) -> dict[str, Any] | None:
    """The grammar for a chat request: the tools' when a call may happen, else the request's own. Beside a
    response format (OpenAI's agents send both), `auto` is calls or an answer in the format's JSON schema; a
    call that `required` or a named tool_choice forces is no answer, so the format does not apply to it."""
    how = mode(req)
    if how is None:
        return other
    answer = _answer_schema(other) if other is not None else None  # (checked under every mode: a regex is a 400)
    if how != "auto":
        answer = None
    tools = req.tools or []
    if fmt is not None:
        tool_schema.check(tools)
        spec = tool_formats.spec(fmt, callable_tools(req), how, parallel(req), answer)
        return {"type": "structural_tag", "value": spec}
    # Arguments never get keys their schema does not declare (OpenAI's strict contract for tools).
    if how == "named":
        tool_schema.check([_named(req)])
        return {"type": "json", "value": tool_schema.parameters(_named(req)), "strict": True}
    tool_schema.check(tools)
    schema = tool_schema.call_schema(tools, parallel=parallel(req))
    if how == "required":
        return {"type": "json", "value": schema, "strict": True}
    return {"type": "grammar", "value": _auto_grammar(tools, parallel(req), answer)}


def _answer_schema(other: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema a response format gives the answer (its objects closed unless it says strict: false)."""
    kind, value = other.get("type"), other.get("value")
    if kind == "json_schema" and isinstance(value, dict):  # TGI's {name, schema} form
        kind, value = "json", value.get("schema")
    if isinstance(value, str):
        value = Constraint.json_schema(value).schema if kind == "json" else value
    if kind != "json" or not isinstance(value, dict):
        raise ParameterError(
            f"tools: beside tools, a response format must be a JSON schema (or json_object), not {kind}",
            field="tools",
        )
    return value if other.get("strict") is False else jsonformat.closed(value)


def _auto_grammar(tools: list[ToolSpec], many: bool, answer: dict[str, Any] | None = None) -> str:
    """tool_choice auto: free text (not starting like a call) or a call, as a Lark grammar llguidance compiles;
    with `answer`, a call or an answer in that JSON schema.

    A schema llguidance cannot compile inside the grammar is refused naming the tool (never "the grammar",
    which the user did not write), or the response format.
    """
    text = _auto_text(tools, many, answer)
    problem = _problem(text)
    if problem is None:
        return text
    if "Unimplemented keys" in problem:  # keywords it cannot enforce (uniqueItems): ignored, with a warning
        lenient = _auto_text(tools, many, answer, lenient=True)
        if _problem(lenient) is None:
            return lenient
    if answer is not None and _problem(_auto_text([], many, answer)) is not None:
        raise UnsupportedConstraintError(
            f"response_format: beside tools, llguidance cannot enforce this schema: {_problem(_auto_text([], many, answer))}",
            field="response_format",
        )
    culprit = next((i for i, t in enumerate(tools) if len(tools) > 1 and _problem(_auto_text([t], many))), 0)
    where = f"tools[{culprit}].function.parameters"
    raise UnsupportedConstraintError(
        f"{where} ({tools[culprit].function.name}): under tool_choice auto, llguidance cannot enforce this "
        f"schema: {problem}",
        field=where,
    )


def _auto_text(
    tools: list[ToolSpec], many: bool, answer: dict[str, Any] | None = None, *, lenient: bool = False
) -> str:
    """`lenient`: llguidance ignores the keywords it cannot enforce (and says which), as xgrammar does under
    `required`; vLLM does not constrain `auto` at all. No tools: the answer alone (to blame its schema)."""
    schemas: dict[str, dict[str, Any]] = {}
    if tools:
        schemas["call"] = jsonformat.with_layout(
            jsonformat.closed(tool_schema.call_schema(tools, parallel=many)), "pretty"
        )
    if answer is not None:
        schemas["answer"] = jsonformat.with_layout(answer, jsonformat.DEFAULT_LAYOUT)
    rules = [f"{name}: %json {json.dumps(_lenient(schema) if lenient else schema)}" for name, schema in schemas.items()]
    if answer is None:  # free text, not starting like a call: one, or a list of them (which a model that saw
        # parallel calls in its prompt writes even when one call is allowed: it must be the call, not text)
        rules.append("text: /[^{\\[][\\s\\S]*/")  # `[` opens a nested class inside a class in the engines' syntax
    return f"start: {' | '.join(rule.split(':')[0] for rule in rules)}\n" + "\n".join(rules) + "\n"


def _lenient(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "x-guidance": {**schema.get("x-guidance", {}), "lenient": True}}


def _problem(grammar_text: str) -> str | None:
    """Why llguidance refuses the grammar, in the JSON schema's terms; None when it compiles."""
    try:
        Constraint.grammar(grammar_text)
    except ConstraintError as exc:
        return exc.message.split("failed to compile JSON schema: ")[-1]
    return None


def _choice_name(req: ToolRequest) -> str:
    """The function a named tool_choice names: OpenAI's object, or TGI's bare string."""
    choice = req.tool_choice
    return choice if isinstance(choice, str) else choice.function.name  # type: ignore[union-attr]


def named_function(req: ToolRequest) -> str:
    """The name of the one function a named tool_choice calls."""
    return _named(req).function.name


def callable_tools(req: ToolRequest) -> list[ToolSpec]:
    """The tools a call may name: the named one, or all of them."""
    return [_named(req)] if mode(req) == "named" else list(req.tools or [])


def template_tools(req: ToolRequest, fmt: ToolFormat | None) -> list[dict[str, Any]] | None:
    """The tools for a template that renders them (OpenAI's shape), under every tool_choice: `none` too, as OpenAI
    shows the model its tools and vLLM renders them by default (the answer is then plain text, never a call)."""
    if fmt is None or not req.tools:
        return None
    return [t.model_dump(exclude_none=True) for t in req.tools]


def _named(req: ToolRequest) -> ToolSpec:
    name = _choice_name(req)
    return next(t for t in req.tools or [] if t.function.name == name)


def with_tools(req: ToolRequest, messages: list[ChatMessage], fmt: ToolFormat | None = None) -> list[ChatMessage]:
    """The messages with the tools described in a system message, and past calls written out as text
    (a template with its own envelope renders both itself)."""
    if mode(req) is None or fmt is not None:
        return messages
    described = describe_tools(req.tools or [])
    note = INSTRUCTIONS.format(tools=described)
    if req.tool_prompt:  # TGI's: the user's words before the tools, in place of ours
        note = f"{req.tool_prompt}\n{described}\n{note.splitlines()[-1]}"
    if mode(req) == "named":
        note += f"\nCall `{_named(req).function.name}` now: answer with its arguments object only."
    out = [_as_text(m) for m in messages]
    if out and out[0].role in ("system", "developer"):
        return [ChatMessage(role=out[0].role, content=out[0].text() + "\n\n" + note), *out[1:]]
    return [ChatMessage(role="system", content=note), *out]


def _as_text(message: ChatMessage) -> ChatMessage:
    """An assistant turn that called tools becomes the JSON it would have written, after what it said first."""
    written = message.written_calls()  # the request's types checked each call's name and JSON arguments
    if written is None:
        return message
    said = message.text()
    return ChatMessage(role="assistant", content=f"{said}\n{written}" if said else written)


CUT_OFF = "a tool call was cut off by max_tokens: it is not returned; whole calls before it are (raise max_tokens)"
STOPPED = "a stop sequence cut the tool call off: no call is returned (the stop sequence occurs in the call)"


def answer(
    req: ToolRequest,
    text: str,
    finish_reason: str = "stop",
    fmt: ToolFormat | None = None,
    prefix: str = "",
    formatted: bool = False,
) -> tuple[dict[str, Any], str, list[str]]:
    """The assistant message (content, or tool_calls in OpenAI's shape), OpenAI's finish_reason and warnings.

    A call cut off by max_tokens is no call: finish_reason "length", a warning, and the whole calls written before it
    (none: empty content, as vLLM answers); so is a call the tool choice forced that a stop sequence cut
    (finish_reason "stop"), rather than the call's text.
    `prefix`: the final assistant message the answer continues (continue_final_message): calls are read from it and
    the answer together, as the constraint matched them; content stays the new text only. `formatted`: the
    request has a response format, so under `auto` an answer that is no call is JSON too (cut off, it stays content).
    """
    how = mode(req)
    finish = "length" if finish_reason == "length" else "stop"
    whole = prefix + text
    if how is not None and fmt is not None:
        return _envelope_answer(req, whole, finish, fmt, prefix)
    starts = ("{", "[") if parallel(req) else ("{",)
    if how is None or (how == "auto" and not whole.lstrip().startswith(starts)):
        return {"role": "assistant", "content": text}, finish, []
    calls = tool_calls.final(whole, _named(req).function.name if how == "named" else None, parallel(req))
    if calls is None and how == "auto" and formatted and not tool_calls.partial(whole, None, parallel(req)):
        return {"role": "assistant", "content": text}, finish, []  # the answer in the format, not a call
    if calls is None and finish == "length":
        whole_calls = [(c.name, c.arguments) for c in tool_calls.partial(whole, None, parallel(req)) if c.complete]
        if how != "named" and whole_calls:  # (a named choice's one call is the arguments alone)
            return {"role": "assistant", "content": None, "tool_calls": wire_calls(whole_calls)}, "length", [CUT_OFF]
        return {"role": "assistant", "content": ""}, "length", [CUT_OFF]
    if calls is None and how in ("required", "named"):
        return {"role": "assistant", "content": ""}, finish, [STOPPED]
    if calls is None:  # free text under auto that happens to start like JSON
        return {"role": "assistant", "content": text}, finish, []
    return {"role": "assistant", "content": None, "tool_calls": wire_calls(calls)}, called(how), []


def called(how: str | None) -> str:
    """The finish_reason of an answer that holds calls: "tool_calls", but "stop" where a named tool_choice forced the
    call, as OpenAI and vLLM answer."""
    return "stop" if how == "named" else "tool_calls"


def _envelope_answer(
    req: ToolRequest, whole: str, finish: str, fmt: ToolFormat, prefix: str
) -> tuple[dict[str, Any], str, list[str]]:
    """The calls read out of the template's envelope; free text around them stays the content (the new text's:
    a continued prefix is not sent back)."""
    read = tool_formats.read(fmt, callable_tools(req), mode(req) or "auto", parallel(req), whole)
    content = read.content.removeprefix(prefix)
    if read.cut_off and finish == "length":  # the whole calls before the cut one still count
        calls = {"tool_calls": wire_calls(read.calls)} if read.calls else {}
        return (
            {"role": "assistant", "content": content or ("" if not calls else None), **calls},
            "length",
            [CUT_OFF],
        )
    if not read.calls:
        return {"role": "assistant", "content": whole[len(prefix) :]}, finish, []
    return (
        {"role": "assistant", "content": content or None, "tool_calls": wire_calls(read.calls)},
        called(mode(req)),
        [],
    )


def wire_calls(calls: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Calls in OpenAI's shape, each with a new id."""
    return [
        {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": n, "arguments": a}}
        for n, a in calls
    ]


# --- the UI's "tools" kind ------------------------------------------------------------------------------


def from_text(text: str) -> ToolsConstraint:
    """The editor's text: a list of tools (tool_choice auto), or {"tools": [...], "tool_choice": ...}."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidConstraintError(f"invalid JSON in the tools: {json_problem(exc)}") from None
    if isinstance(data, list):
        data = {"tools": data}
    try:
        tools = ToolsConstraint.model_validate(data)
    except ValidationError as exc:
        raise InvalidConstraintError(parameter_error(exc).message) from None
    mode(tools)
    return tools


def ui_grammar(text: str, fmt: ToolFormat | None = None) -> GrammarType | None:
    """The grammar the tools ask for (None with tool_choice none); in the template's envelope with `fmt`."""
    found = grammar(from_text(text), None, fmt)
    return GrammarType.model_validate(found) if found else None


def ui_tools(kind: str, text: str, fmt: ToolFormat | None) -> list[dict[str, Any]] | None:
    """The tools the model's template renders, for the "tools" kind on a model whose template writes calls."""
    if kind != "tools" or fmt is None:
        return None
    return template_tools(from_text(text), fmt)


def ui_system(kind: str, text: str, system_prompt: str, fmt: ToolFormat | None = None) -> str:
    """The system prompt with the tools described, for the "tools" kind (unless the template describes them);
    unchanged for the others."""
    if kind != "tools" or fmt is not None:
        return system_prompt
    try:
        tools = from_text(text)
    except (ConstraintError, ParameterError):
        return system_prompt  # the request itself reports the problem
    messages = with_tools(tools, [ChatMessage(role="system", content=system_prompt)] if system_prompt.strip() else [])
    return messages[0].text() if messages else system_prompt


def problem(text: str) -> str | None:
    """The live check under the editor: what is wrong with the tools, or None."""
    try:
        from_text(text)
    except (ConstraintError, ParameterError) as exc:
        return exc.message
    return None
