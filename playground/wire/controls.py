"""The sampling controls, once: each surface builds its inputs from this table and each body its fields.

A control is a GenerateParameters field with a range, a neutral value that means "off" (the UI's
slider at 1 for temperature, 0 for top_k) and the wire dialects that carry it: `chat` is our
/v1/chat/completions (and vLLM's, which takes the same extensions), `openai` plain OpenAI, `vllm` a
vLLM server, `tgi` a TGI server. A new warper is one row here, its field (in `types.params.Sampling` when every
request shape takes it, so the TGI body, chat and completions all read it) and its warper in `decoding.sampling`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Dialect = str  # "chat" | "openai" | "vllm" | "tgi"


@dataclass(frozen=True)
class Control:
    """One sampling parameter as a control: its range, its "off" value and who understands it."""

    name: str
    low: float
    high: float
    step: float
    neutral: float
    dialects: frozenset[Dialect]
    integer: bool = False
    warper: bool = True  # reshapes the distribution to sample from (a penalty also applies when greedy)

    @property
    def label(self) -> str:
        """The name with what "off" is, as the UI and the widget show it."""
        off = int(self.neutral) if float(self.neutral).is_integer() else self.neutral
        return f"{self.name} ({off} = off)"

    def value(self, raw: Any) -> float | int | None:
        """A control's value as a parameter: the neutral value (or nothing) means unset."""
        if raw is None or raw == "":
            return None
        number = int(raw) if self.integer else float(raw)
        return None if number == self.neutral else number


_ALL = frozenset({"chat", "openai", "vllm", "tgi"})

SAMPLING: tuple[Control, ...] = (
    Control("temperature", 0.05, 2.0, 0.05, 1.0, _ALL),
    Control("top_k", 0, 200, 1, 0, frozenset({"chat", "vllm", "tgi"}), integer=True),
    Control("top_p", 0.05, 1.0, 0.01, 1.0, _ALL),
    Control("min_p", 0.0, 1.0, 0.01, 0.0, frozenset({"chat", "vllm"})),
    Control("typical_p", 0.05, 1.0, 0.01, 1.0, frozenset({"tgi"})),
    Control("repetition_penalty", 0.5, 2.0, 0.05, 1.0, frozenset({"chat", "vllm", "tgi"}), warper=False),
    Control("frequency_penalty", -1.95, 2.0, 0.05, 0.0, _ALL, warper=False),
)
BY_NAME: dict[str, Control] = {c.name: c for c in SAMPLING}


def sampling_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The controls' values as parameters, leaving out the ones at their neutral value."""
    out = {c.name: c.value(values.get(c.name)) for c in SAMPLING if c.name in values}
    return {name: value for name, value in out.items() if value is not None}


def carried_by(dialect: Dialect) -> tuple[str, ...]:
    """The sampling parameters a dialect's body carries by their own name."""
    return tuple(c.name for c in SAMPLING if dialect in c.dialects)


def spec(control: Control) -> dict[str, Any]:
    """A control as JSON, for the widget's JavaScript to build its input from."""
    return {
        "name": control.name,
        "label": control.label,
        "min": control.low,
        "max": control.high,
        "step": control.step,
        "neutral": control.neutral,
        "integer": control.integer,
    }
