"""Size limits on what one request may send: every one is a clear 422 naming it, and /info lists them.

Each bounds work done before the model's own limits can apply (tokenizing, stop-string matching, the
next-token prefix walk), so no request can spend seconds of CPU or gigabytes before it is refused.
"""

from __future__ import annotations

from typing import Any

# A request body: far above any prompt a model here takes (8k tokens) and any sane schema; a bigger body is refused
# with 413 before anyone tokenizes megabytes of text.
MAX_BODY_BYTES = 4 * 1024 * 1024
# A prompt (TGI `inputs`, the text of /tokenize) or all chat messages together. Far above what fits an
# 8k-token context; tokenizing this much takes about a second on one core.
MAX_INPUT_CHARS = 131_072
MAX_MESSAGES = 512
# The prompt as the model reads it (chat template, tool descriptions, continuations): whatever a request
# sent, past this it is refused before tokenizing (a request's own limits count what they can see first).
MAX_PROMPT_CHARS = MAX_INPUT_CHARS + 65_536
# The /next_token prefix is walked token by token through the constraint under the engine's lock.
MAX_PREFIX_CHARS = 4_096
MAX_STOP_CHARS = 256
# A seed is an int64 (TGI's spec types it so); best_of's rows take seed + i, wrapped below 2**63.
MAX_SEED = 2**63 - 1


def nth_seed(base: int, index: int) -> int:
    """The seed of the index-th sample (n's choices, best_of's rows) of a request seeded `base`."""
    return (base + index) % (MAX_SEED + 1)


MAX_PROCESSORS = 8
MAX_PROCESSOR_PARAMS = 64
MAX_PROCESSOR_PARAM_CHARS = 4_096
# Model, provider and adapter names, user ids.
MAX_NAME_CHARS = 512
# What a local model accepts per request (TGI's --max-best-of, --max-stop-sequences, --max-top-n-tokens).
MAX_BEST_OF = 4
MAX_STOP_SEQUENCES = 4
MAX_STOP_TOKEN_IDS = 64  # vLLM's stop_token_ids
MAX_BAD_WORDS = 64  # vLLM's bad_words
MAX_ALLOWED_TOKEN_IDS = 65_536  # vLLM's allowed_token_ids (a vocabulary's worth)
MAX_TOP_N_TOKENS = 20
# Choices of one chat or completions request (n), as vLLM caps them by default.
MAX_CHOICES = 8


def limits_info() -> dict[str, Any]:
    """The request size limits, as /info reports them."""
    return {
        "max_input_chars": MAX_INPUT_CHARS,
        "max_messages": MAX_MESSAGES,
        "max_prompt_chars": MAX_PROMPT_CHARS,
        "max_prefix_chars": MAX_PREFIX_CHARS,
        "max_stop_chars": MAX_STOP_CHARS,
        "max_processors": MAX_PROCESSORS,
        "max_processor_params": MAX_PROCESSOR_PARAMS,
        "max_processor_param_chars": MAX_PROCESSOR_PARAM_CHARS,
        "max_name_chars": MAX_NAME_CHARS,
    }
