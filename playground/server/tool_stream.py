"""Tool calls streamed as OpenAI streams them: each call's id, type and name first (empty arguments), then
`arguments` deltas as they are decoded; free text under tool_choice auto streams as content (in a template's own
envelope: the text before the first call, held back while it may be the start of one)."""

from __future__ import annotations

import uuid
from typing import Any

from playground.server.chat import StopHoldback
from playground.types import GenerationResult
from playground.wire import tool_calls, tool_formats, tools
from playground.wire.tool_formats import ToolFormat
from playground.wire.tools import ToolRequest


class ToolStream:
    """Turns the text decoded so far into chat chunk deltas; `finish` adds what the whole answer settles."""

    def __init__(
        self,
        req: ToolRequest,
        stops: list[str],
        fmt: ToolFormat | None = None,
        prefix: str = "",
        formatted: bool = False,
        keep: bool = False,
    ) -> None:
        """`keep`: vLLM's include_stop_str_in_output (see chat.StopHoldback)."""
        self.req = req
        self.formatted = formatted  # beside a response format: see tools.answer
        self.prefix = prefix  # a continued final message: part of the calls, never sent again as content
        self.fmt = fmt
        self.how = tools.mode(req)
        self.named = tools.named_function(req) if self.how == "named" else None
        self.parallel = tools.parallel(req)
        self.text = prefix
        self.kind: str | None = "call" if self.how in ("named", "required") else None  # auto: decided by 1st char
        self.content = StopHoldback(stops, keep)
        if fmt is not None:  # free text until the envelope's trigger; the calls are read out of the envelope
            self.kind = "envelope"
            self.content = StopHoldback(stops, keep, held=(fmt.trigger,))
            self.streamed = ""
        self.ids: list[str] = []
        self.sent: list[str] = []  # each call's arguments text already sent

    def feed(self, piece: str) -> list[dict[str, Any]]:
        """The deltas that `piece` makes known."""
        self.text += piece
        if self.fmt is not None:
            return self._envelope_deltas(piece)
        if self.kind is None:
            body = self.text.lstrip()
            if not body:
                return []
            self.kind = "call" if body.startswith(("{", "[") if self.parallel else "{") else "content"
            if self.kind == "content":
                piece = self.text[len(self.prefix) :]
        if self.kind == "content":
            text = self.content.feed(piece)
            return [{"content": text}] if text else []
        return self._call_deltas(tool_calls.partial(self.text, self.named, self.parallel))

    def finish(self, result: GenerationResult, text: str) -> tuple[list[dict[str, Any]], str, list[str]]:
        """The last deltas, OpenAI's finish_reason and the warnings, from the whole answer."""
        message, finish, notes = tools.answer(
            self.req, text, result.best.finish_reason, self.fmt, self.prefix, self.formatted
        )
        if self.fmt is not None:
            return self._envelope_finish(message), finish, notes
        if message.get("tool_calls"):
            made = [
                tool_calls.Call(c["function"]["name"], c["function"]["arguments"], True) for c in message["tool_calls"]
            ]
            return self._call_deltas(made), finish, notes
        if self.kind == "content":
            rest = self.content.finish(result.best)
            return ([{"content": rest}] if rest else []), finish, notes
        content = message.get("content") or ""  # nothing streamed as content yet (a cut-off call: "")
        return ([{"content": content}] if content else []), finish, notes

    def _envelope_deltas(self, piece: str) -> list[dict[str, Any]]:
        """Content up to the first call (never a trigger's first characters), then each call's deltas."""
        text = self.content.feed(piece)
        deltas = [{"content": text}] if text else []
        self.streamed += text
        calls = tool_formats.partial(self.fmt, tools.callable_tools(self.req), self.text) if self.fmt else []
        return deltas + self._call_deltas(calls)

    def _envelope_finish(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """What the whole answer adds: the calls' last arguments, or the content not streamed yet."""
        if message.get("tool_calls"):
            made = [
                tool_calls.Call(c["function"]["name"], c["function"]["arguments"], True) for c in message["tool_calls"]
            ]
            deltas = self._call_deltas(made)
        else:
            deltas = []
        content = message.get("content") or ""
        rest = content[len(self.streamed) :] if content.startswith(self.streamed) else ""
        return ([{"content": rest}] if rest else []) + deltas

    def _call_deltas(self, calls: list[tool_calls.Call]) -> list[dict[str, Any]]:
        deltas = []
        for index, call in enumerate(calls):
            if index == len(self.ids):
                self.ids.append(f"call_{uuid.uuid4().hex[:24]}")
                self.sent.append("")
                head = {"index": index, "id": self.ids[index], "type": "function"}
                deltas.append({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
            sent = self.sent[index]
            new = call.arguments[len(sent) :] if call.arguments.startswith(sent) else ""
            if new:
                self.sent[index] = call.arguments
                deltas.append({"tool_calls": [{"index": index, "function": {"arguments": new}}]})
        return deltas
