"""A chat through the model's own template, with vLLM's options: `add_generation_prompt` and `chat_template_kwargs`;
tools and past tool calls as the template itself writes them, when it writes them in a known envelope."""

from __future__ import annotations

import inspect
import json
from typing import Any

from transformers import PreTrainedTokenizerBase

from playground.errors import ParameterError, first_line
from playground.types import ChatMessage
from playground.wire import tool_formats

# apply_chat_template's own arguments (continue_final_message among them: the request's field of that name
# forces the prefix through the constraint): a request's template variables may not replace any of them.
_RESERVED = frozenset(inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters) - {"self", "kwargs"}


def message(m: ChatMessage) -> dict[str, Any]:
    """A message as templates read it: role and text, and a past turn's tool calls or a tool result's ids."""
    out: dict[str, Any] = {"role": m.role, "content": m.text()}
    extra = m.model_extra or {}
    if m.role == "assistant" and extra.get("tool_calls"):
        out["tool_calls"] = [_with_object_arguments(call) for call in extra["tool_calls"]]
    for key in ("tool_call_id", "name"):
        value = extra.get(key) if key in extra else getattr(m, key, None)
        if m.role == "tool" and isinstance(value, str):
            out[key] = value
    return out


def _with_object_arguments(call: Any) -> Any:
    """A past call with its `arguments` as the object, not OpenAI's JSON text: templates write the arguments with
    `tojson` (Llama 3.1, Mistral), which would quote the text as a string; as vLLM does, and transformers' docs
    ask for. Arguments that are not JSON text stay as they are."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except ValueError:
        return call
    return {**call, "function": {**function, "arguments": arguments}}


def tool_format(tokenizer: Any) -> str | None:
    """The envelope family of a template that renders tools (the prompt changes with them) and writes calls."""
    template = getattr(tokenizer, "chat_template", None)
    found = tool_formats.detect(template if isinstance(template, str) else None)
    if found is None:
        return None
    probe = [{"role": "user", "content": "x"}]
    tool = {"type": "function", "function": {"name": "probe_tool", "description": "d", "parameters": {}}}
    try:
        plain = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        with_tool = tokenizer.apply_chat_template(probe, tools=[tool], tokenize=False, add_generation_prompt=True)
    except Exception:  # a template that cannot take tools keeps the generic instructions
        return None
    return found.name if with_tool != plain and "probe_tool" in with_tool else None


def render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
    kwargs: dict | None,
    tools: list[dict[str, Any]] | None = None,
) -> str:
    """The prompt text. OpenAI's `developer` role is the system role for a template that does not name it (most
    templates drop or refuse a role they do not know). A template that refuses the messages (roles that must
    alternate, a system message it does not support) or a template variable it chokes on is the request's error,
    not a 500."""
    extra = dict(kwargs or {})
    taken = sorted(_RESERVED & set(extra))
    if taken:
        raise ParameterError(
            f"chat_template_kwargs: {', '.join(taken)} cannot be set here (a request field of its own, or ours)",
            field="chat_template_kwargs",
        )
    described = {"tools": tools} if tools else {}
    template = getattr(tokenizer, "chat_template", None)
    if not (isinstance(template, str) and ("'developer'" in template or '"developer"' in template)):
        messages = _developer_as_system(messages)

    def apply(messages: list[dict[str, Any]]) -> str:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **described, **extra
        )

    try:
        return apply(messages)
    except Exception as exc:  # jinja2's TemplateError (its raise_exception), or anything a template raises
        folded = _system_in_first_turn(messages)
        if folded is not None:
            try:
                return apply(folded)
            except Exception:  # the template refused something else too: its first complaint is the one to show
                pass
        if extra:
            raise ParameterError(
                f"chat_template_kwargs: the chat template failed with them: {first_line(exc)}",
                field="chat_template_kwargs",
            ) from None
        raise ParameterError(
            f"messages: the model's chat template refused them: {first_line(exc)}", field="messages"
        ) from None


def _system_in_first_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The system text before the first user turn's, for a template without a system role (Gemma's refuses one; its
    own later templates fold it in so): a system message the client sent, or our tool instructions. None when the
    messages do not start with system then user text."""
    if len(messages) < 2 or messages[0]["role"] != "system" or messages[1]["role"] != "user":
        return None
    system, user = messages[0].get("content"), messages[1].get("content")
    if not (isinstance(system, str) and isinstance(user, str)):
        return None
    return [{**messages[1], "content": f"{system}\n\n{user}"}, *messages[2:]]


def _developer_as_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`developer` messages in the system role, each joined to a system message beside it (instructions, tool
    notes): a template that takes one system message, or wants the turns to alternate, takes them then. (System
    and developer messages are a role and a text here: `message` writes them so.)"""
    out: list[dict[str, Any]] = []
    with_developer = False  # whether out[-1] holds a developer message
    for m in messages:
        developer = m["role"] == "developer"
        if (
            out
            and out[-1]["role"] == "system"
            and m["role"] in ("system", "developer")
            and (developer or with_developer)
        ):
            out[-1] = {"role": "system", "content": f"{out[-1]['content']}\n\n{m['content']}"}
            with_developer = True
        else:
            out.append({**m, "role": "system"} if developer else m)
            with_developer = developer
    return out
