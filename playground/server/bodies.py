"""ASGI sends that hold a whole response body and rewrite it before it goes out."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Message, Send

Rewrite = Callable[[Message, bytes], tuple[Message, bytes]]


def rewriting(send: Send, held: Callable[[Message], bool], rewrite: Rewrite) -> Send:
    """`send` for an answer whose start `held` picks: its body is gathered whole, then `rewrite` gives the start and
    body that go out (with the new body's content-length); every other answer passes as it is."""
    start: Message | None = None
    chunks: list[bytes] = []

    async def holding(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start" and held(message):
            start = message
            return
        if start is None or message["type"] != "http.response.body":
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body"):
            return
        out, body = rewrite(start, b"".join(chunks))
        headers = [(k, v) for k, v in out["headers"] if k.lower() != b"content-length"]
        await send({**out, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return holding
