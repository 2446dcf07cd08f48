"""Tool calls streamed as OpenAI streams them: each call's id, type and name first (empty arguments), then
`arguments` deltas as they are decoded; free text under tool_choice auto streams as content."""

from __future__ import annotations

import uuid
from typing import Any

from playground.server.chat import StopHoldback
from playground.types import GenerationResult
from playground.wire import tool_calls, tools
from playground.wire.tools import ToolRequest


class ToolStream:
    """Turns the text decoded so far into chat chunk deltas; `finish` adds what the whole answer settles."""

    def __init__(self, req: ToolRequest, stops: list[str]) -> None:
        self.req = req
        self.how = tools.mode(req)
        self.named = tools.named_function(req) if self.how == "named" else None
        self.parallel = tools.parallel(req)
        self.text = ""
        self.kind: str | None = "call" if self.how in ("named", "required") else None  # auto: decided by 1st char
        self.content = StopHoldback(stops)
        self.ids: list[str] = []
        self.sent: list[str] = []  # each call's arguments text already sent

    def feed(self, piece: str) -> list[dict[str, Any]]:
        """The deltas that `piece` makes known."""
        self.text += piece
        if self.kind is None:
            body = self.text.lstrip()
            if not body:
                return []
            self.kind = "call" if body.startswith(("{", "[") if self.parallel else "{") else "content"
            if self.kind == "content":
                piece = self.text
        if self.kind == "content":
            text = self.content.feed(piece)
            return [{"content": text}] if text else []
        return self._call_deltas(tool_calls.partial(self.text, self.named, self.parallel))

    def finish(self, result: GenerationResult, text: str) -> tuple[list[dict[str, Any]], str, list[str]]:
        """The last deltas, OpenAI's finish_reason and the warnings, from the whole answer."""
        message, finish, notes = tools.answer(self.req, text, result.best.finish_reason)
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
