"""Tool calls in a chat template's own envelope: the families known, read from the template text.

A family says how its models write one call (`begin` with the function's name, the arguments' JSON, `end`), the
trigger that opens a call, and what separates parallel calls. The calls become a structural tag
(playground.constraints.segments): the envelope is enforced, each call's arguments against its tool's schema, and
the same spec reads the calls back with a verdict per call. Adding a family is one entry in FAMILIES.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from playground.constraints import jsonformat, segments
from playground.types import SegmentVerdict, ToolSpec
from playground.wire import tool_calls, tool_schema


@dataclass(frozen=True)
class ToolFormat:
    """One family of templates: how a call is written, and the template text that says a template is one."""

    name: str
    marks: tuple[str, ...]  # all of them in the template's text: it writes calls this way
    trigger: str  # what opens a call
    begin: str  # a call's opening, `{name}` the function's name as a JSON string
    end: str
    separator: str  # between parallel calls
    markup: tuple[str, ...] = ()  # special tokens of the envelope, kept in the answer's text

    def call_begin(self, name: str) -> str:
        return self.begin.replace("{name}", json.dumps(name))


_CALL_OBJECT = '{"name": {name}, "arguments": '  # a call as OpenAI's JSON object writes it, up to the arguments


def _special_tokens(name: str, tokens: tuple[str, ...], begin: str, end: str, separator: str) -> ToolFormat:
    """A family whose envelope is special tokens: the template names them all, the first opens a call, and they
    stay in the answer's text."""
    return ToolFormat(name, tokens, tokens[0], begin, end, separator, markup=tokens)


FAMILIES: tuple[ToolFormat, ...] = (
    # Qwen2.5, Qwen3, Hermes 2/3, SmolLM3 and the many templates that copied them (vLLM's `hermes` parser).
    _special_tokens("hermes", ("<tool_call>", "</tool_call>"), "<tool_call>\n" + _CALL_OBJECT, "}\n</tool_call>", "\n"),
    # Mistral's v3 tokenizers: `[TOOL_CALLS]` then a JSON list; here one call per list (vLLM's `mistral` parser).
    _special_tokens("mistral", ("[TOOL_CALLS]",), "[TOOL_CALLS][" + _CALL_OBJECT, "}]", ""),
    # Llama 3.1/3.2/3.3 JSON tool calling: a bare `{"name", "parameters"}` object (vLLM's `llama3_json` parser).
    ToolFormat(
        name="llama3_json",
        marks=('"parameters": dictionary of argument name and its value',),
        trigger='{"name": ',
        begin='{"name": {name}, "parameters": ',
        end="}",
        separator="; ",
    ),
)
MARKUP: frozenset[str] = frozenset(token for family in FAMILIES for token in family.markup)


def detect(template: str | None) -> ToolFormat | None:
    """The family whose marks all appear in the template's text (a template that never writes calls: None)."""
    if not template or "tools" not in template:
        return None
    return next((f for f in FAMILIES if all(mark in template for mark in f.marks)), None)


def by_name(name: str | None) -> ToolFormat | None:
    return next((f for f in FAMILIES if f.name == name), None)


def spec(
    fmt: ToolFormat, tools: list[ToolSpec], how: str, parallel: bool, answer: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The structural tag for a tool choice: `auto` free text or calls (with `answer`, a response format's JSON
    schema: calls, or an answer in that schema); `required` and named calls only."""
    tags = [
        {
            "begin": fmt.call_begin(t.function.name),
            "content": {"type": "json_schema", "json_schema": jsonformat.closed(tool_schema.parameters(t))},
            "end": fmt.end,
        }
        for t in tools
    ]
    calls = {
        "type": "tags_with_separator",
        "tags": tags,
        "separator": fmt.separator,
        "at_least_one": True,
        "stop_after_first": not parallel,
    }
    if how != "auto":
        return {"type": "structural_tag", "format": calls}
    if answer is not None:
        either = [calls, {"type": "json_schema", "json_schema": answer}]
        return {"type": "structural_tag", "format": {"type": "or", "elements": either}}
    body = {"type": "triggered_tags", "triggers": [fmt.trigger], "tags": tags, "stop_after_first": not parallel}
    return {"type": "structural_tag", "format": body}


@dataclass
class ReadCalls:
    """What an answer holds: the free text around the calls, and each call with its verdict."""

    content: str
    calls: list[tuple[str, str]]  # (name, arguments JSON text) of each whole call
    verdicts: list[SegmentVerdict]
    cut_off: bool  # the last call has no end: max_tokens stopped it


def read(fmt: ToolFormat, tools: list[ToolSpec], how: str, parallel: bool, text: str) -> ReadCalls:
    """The calls in a whole answer, each call's name from its envelope and its arguments' text as written."""
    names = {fmt.call_begin(t.function.name): t.function.name for t in tools}
    judged = segments.validate(segments.parse(spec(fmt, tools, how, parallel)), text)
    verdicts = judged.segments or []
    content, position = "", 0
    for k, verdict in enumerate(verdicts):
        between = text[position : verdict.start - len(verdict.begin)]
        content += _unseparated(between, fmt) if k else between  # the separator between two calls is no content
        position = verdict.end + len(fmt.end)
    rest = _unseparated(text[position:], fmt) if verdicts else text
    opening = rest.strip() and any(b.startswith(rest.lstrip()) for b in names)  # a call cut off in its envelope
    content += "" if opening else rest
    whole = [v for v in verdicts if text.startswith(fmt.end, v.end)]
    calls = [(names[v.begin], v.content) for v in whole]
    return ReadCalls(content.strip(), calls, verdicts, bool(opening) or len(whole) < len(verdicts))


def _unseparated(text: str, fmt: ToolFormat) -> str:
    """Text after a call, without the separator that leads to the next one (Llama 3's `; `; a newline, Hermes', is
    whitespace the content is stripped of anyway)."""
    separator, stripped = fmt.separator.strip(), text.lstrip()
    return stripped[len(separator) :] if separator and stripped.startswith(separator) else text


def partial(fmt: ToolFormat, tools: list[ToolSpec], text: str) -> list[tool_calls.Call]:
    """The calls as far as they are written: a call appears once its envelope has named it."""
    begins = {fmt.call_begin(t.function.name): t.function.name for t in tools}
    calls: list[tool_calls.Call] = []
    position = 0
    while True:
        found = [(text.find(b, position), b) for b in begins]
        found = [(at, b) for at, b in found if at >= 0]
        if not found:
            return calls
        at, begin = min(found, key=lambda f: (f[0], -len(f[1])))
        start = at + len(begin)
        end = tool_calls.value_end(text, start)
        calls.append(tool_calls.Call(begins[begin], text[start : end or len(text)], end is not None))
        if end is None:
            return calls
        position = end
