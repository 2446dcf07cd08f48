"""The constraint editor's fixed choices: the kinds, their highlighting, processor params, the system prompt.

The ready examples themselves live in the library (playground/constraints/examples.py), shared with the widget.
"""

from __future__ import annotations

# The UI's constraint kinds, as (label, value) pairs for the kind picker.
KINDS: list[tuple[str, str]] = [
    ("none", "none"),
    ("JSON schema", "json_schema"),
    ("regex", "regex"),
    ("choice", "choice"),
    ("grammar (Lark or GBNF)", "grammar"),
    ("segments (structural tag)", "structural_tag"),
    ("tools (function calls)", "tools"),
    ("custom processor", "processor"),
]

# gr.Code highlighting per kind; regex and Lark have no highlighter, so plain text.
LANGUAGES: dict[str, str | None] = {
    "json_schema": "json",
    "choice": None,
    "regex": None,
    "grammar": None,
    "structural_tag": "json",
    "tools": "json",
}

# Params (one per line) to start from for the processors shipped with the playground.
PROCESSOR_PARAMS: dict[str, str] = {
    "ban_strings": "the\nThe",
    "max_whitespace": "1",
}

SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly."
