"""The reasoning families a thinking model's delimiters come from, and what names one (--reasoning, a providers
file's `reasoning`): plain data, read at start before torch is imported (a providers file's mistake is said at once).
playground.decoding.reasoning finds them in a model and runs them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReasoningFormat:
    """One family's delimiters; `close` is what a budget forces when it is more than `end` (gpt-oss)."""

    family: str
    start: str
    end: str
    close: str = ""
    models: str = ""  # who writes it, for the README and errors
    auto: bool = True  # found in templates; plain-text families whose templates write them only on request are not

    @property
    def forced_close(self) -> str:
        return self.close or self.end

    def public(self) -> dict[str, str]:
        """What /info says about it."""
        return {"family": self.family, "start": self.start, "end": self.end}


# Most specific first: the first family whose delimiters the template writes wins.
FAMILIES: tuple[ReasoningFormat, ...] = (
    ReasoningFormat(
        "gpt-oss",
        "<|channel|>analysis<|message|>",
        "<|channel|>final<|message|>",
        close="<|end|><|start|>assistant<|channel|>final<|message|>",
        models="gpt-oss (harmony's analysis channel, then the final channel)",
    ),
    ReasoningFormat("seed", "<seed:think>", "</seed:think>", models="Seed-OSS"),
    ReasoningFormat("mistral", "[THINK]", "[/THINK]", models="Magistral"),
    ReasoningFormat("thought", "<|begin_of_thought|>", "<|end_of_thought|>", models="Sky-T1, OpenThinker-style"),
    ReasoningFormat(
        "think",
        "<think>",
        "</think>",
        models="Qwen3, QwQ, DeepSeek-R1 and its distills, SmolLM3, Phi-4-reasoning, Hunyuan, GLM-4.5",
    ),
    ReasoningFormat(
        "granite",
        "Here is my thought process:",
        "Here is my response:",
        models="Granite 3.2/3.3 (plain text, with their `thinking` template option)",
        auto=False,
    ),
)
BY_FAMILY = {f.family: f for f in FAMILIES}
# think_first on a model without reasoning of its own: the same markup, as plain text for its tokenizer.
PLAIN_THINK = ReasoningFormat("think-first", "<think>\n", "</think>", close="\n</think>\n", models="any model")


def setting_problem(setting: str) -> str | None:
    """Why a reasoning setting (--reasoning, a providers file's `reasoning`) names no family (START,END and auto/none
    are read as they are), in the words after its name."""
    if "," in setting or setting in ("auto", "none", *BY_FAMILY):
        return None
    return f"not auto, none, a family ({', '.join(BY_FAMILY)}) or START,END"
