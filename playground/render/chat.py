"""How the conversation appears in the UI's chatbot: exactly as written, Markdown only when the user asks for it.

A playground must show what the model wrote: `12*12*12*1` is not italics, `# x` is not a heading and `<b>`
is not bold. By default the chatbot renders no Markdown and every message is HTML-escaped text (its
whitespace kept by the page's CSS); constrained answers sit in a code block. With the Markdown toggle on,
unconstrained answers are rendered as Markdown (tags still shown as text) and everything else is put in a
fenced code block, which Markdown shows literally.
"""

from __future__ import annotations

import html
import re
from typing import Any

# The key an assistant message carries with the constraint kind it was generated under.
CONSTRAINT_KEY = "constraint"


def _fence(text: str) -> str:
    """A Markdown code block around `text`, its fence longer than any run of backticks inside."""
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    return f"{fence}\n{text}\n{fence}"


def is_exact(message: dict[str, str]) -> bool:
    """User messages and constrained answers are always shown exactly, even with Markdown on."""
    return message["role"] != "assistant" or message.get(CONSTRAINT_KEY, "none") != "none"


def display(message: dict[str, str], markdown: bool = False) -> str:
    """One message's chatbot content (the chatbot renders Markdown exactly when `markdown` is on)."""
    content, exact = message["content"], is_exact(message)
    if markdown:
        return _fence(content) if exact else html.escape(content, quote=False)
    text = html.escape(content, quote=False)
    if exact and message["role"] == "assistant":
        return f'<pre class="pg-answer"><code>{text}</code></pre>'
    return text


def chatbot_value(messages: list[dict[str, str]], markdown: bool = False) -> list[dict[str, Any]]:
    """The conversation in the chatbot's messages format.

    Each content is a text part, not a string: Gradio runs `inspect.cleandoc` on string contents, which
    strips indentation and expands tabs; a text part reaches the page as it is.
    """
    return [{"role": m["role"], "content": {"type": "text", "text": display(m, markdown)}} for m in messages]


def bubble_text(message: dict[str, Any]) -> str:
    """The markup one chatbot message carries (the inverse of the text part chatbot_value builds)."""
    return message["content"]["text"]
