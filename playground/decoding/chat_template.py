"""A chat through the model's own template, with vLLM's options: `add_generation_prompt` and `chat_template_kwargs`."""

from __future__ import annotations

import inspect
from typing import Any

from transformers import PreTrainedTokenizerBase

from playground.errors import ParameterError, first_line

# apply_chat_template's own arguments (continue_final_message among them: the request's field of that name
# forces the prefix through the constraint): a request's template variables may not replace any of them.
_RESERVED = frozenset(inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters) - {"self", "kwargs"}


def render(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool, kwargs: dict | None) -> str:
    """The prompt text; a template variable the template chokes on is the request's error, not a 500."""
    extra = dict(kwargs or {})
    taken = sorted(_RESERVED & set(extra))
    if taken:
        raise ParameterError(
            f"chat_template_kwargs: {', '.join(taken)} cannot be set here (a request field of its own, or ours)",
            field="chat_template_kwargs",
        )
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )
    except Exception as exc:  # jinja2's TemplateError, or anything a template raises with odd variables
        if not extra:
            raise
        raise ParameterError(
            f"chat_template_kwargs: the chat template failed with them: {first_line(exc)}", field="chat_template_kwargs"
        ) from None
