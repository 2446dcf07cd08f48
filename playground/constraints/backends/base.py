"""What every constraint engine is: the Backend contract, its refusal, and the helpers engines share."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, ClassVar

from playground.constraints import jsonformat

TENSOR_LIBRARY = "torch"


class EngineRefusal(Exception):
    """An engine cannot take this constraint; `kind` says how the server reports it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "unsupported" | "invalid" | "unsatisfiable"
        self.message = message


class Backend:
    """One constraint engine: what it reads, how it compiles, what it ignores, how its result looks."""

    name: ClassVar[str]
    kinds: ClassVar[frozenset[str]]  # the constraint kinds it reads
    # JSON Schema keywords it compiles without enforcing (only the final check enforces them).
    ignored_keywords: ClassVar[frozenset[str]] = frozenset()
    notes: ClassVar[str] = ""  # one line for /info and the docs: what sets it apart

    def refusal(self, kind: str, dialect: str | None) -> str | None:
        """Why this engine cannot take a constraint of `kind` (and grammar `dialect`), before any compile."""
        if kind not in self.kinds:
            return f"{self.name} does not support {kind} constraints"
        return None

    def worker_backend(self, tokenizer: Any) -> Any:
        """What a worker keeps warm for this engine (reads the vocabulary once)."""
        raise NotImplementedError

    def warmed(self, tokenizer: Any) -> Any:
        """worker_backend, after a first compile: building the engine's tables is no part of any limit."""
        built = self.worker_backend(tokenizer)
        self.compile_payload(built, "regex", "a")
        return built

    def compile_payload(self, backend: Any, kind: str, text: str) -> tuple[Any, list[str]]:
        """Compile in the worker: (payload for rebuild_template, engine warnings); raises EngineRefusal."""
        raise NotImplementedError

    def server_backend(self, tokenizer: Any) -> Any:
        """What the server keeps per tokenizer to rebuild templates (None when nothing)."""
        return None

    def rebuild_template(self, backend: Any, kind: str, text: str, payload: Any) -> Any:
        """The Outlines processor template in the server, from the worker's payload."""
        raise NotImplementedError

    def compiled_form(self, constraint: Any, template: Any) -> str:
        """What the engine compiled, as text (the inspect panel)."""
        return constraint.engine_input()


_CLASS_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\([dDwWsSpP])")  # \d, \w, \s, \p{..} and their negations


def narrow_classes(engine: str, kind: str, pattern: str, narrow: str) -> list[str]:
    """A warning for the class escapes (`narrow`: their letters) an engine's mask reads as ASCII where the final check
    reads them as Unicode (`١` is a digit there): the mask then refuses, or its negation lets through, what is
    valid (measured: /check on Arabic digits, Greek letters, no-break spaces)."""
    if kind != "regex":
        return []
    used = sorted({m.group(1).lower() for m in _CLASS_ESCAPE.finditer(pattern)} & set(narrow))
    if not used:
        return []
    names = ", ".join(f"`\\{letter}`" for letter in used)
    return [
        f"{engine} reads {names} as ASCII only (the final check reads them as Unicode, as llguidance does): write "
        "the characters meant as a class, e.g. [0-9], or use llguidance"
    ]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def check_satisfiable(schema_text: str) -> None:
    """Refuse a schema no value satisfies, whatever the engine: one that ignores the problem emits invalid output."""
    if jsonformat.layout_of(json.loads(schema_text))[0] == {"not": {}}:
        raise EngineRefusal("unsatisfiable", "the schema is `false`: no value satisfies it")
    import llguidance

    _, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
        llguidance.grammar_from("json_schema", schema_text), None
    )
    unsatisfiable = [m for m in messages if "Unsatisfiable" in m]
    if unsatisfiable:
        raise EngineRefusal("unsatisfiable", "no value satisfies the schema: " + "; ".join(unsatisfiable))


def outlines_backend(kind: str, tokenizer: Any) -> Any:
    """An Outlines backend object for `kind` ("xgrammar" | "outlines_core"); they read only the tokenizer."""
    from outlines import backends
    from outlines.models.transformers import Transformers

    model = Transformers(None, tokenizer)  # the model slot is unused by the backends
    if kind == "outlines_core":
        return backends.OutlinesCoreBackend(model)
    return backends.XGrammarBackend(model)


def refusing(engine: str, kind: str, build: Callable[[], Any]) -> Any:
    """`build()`, with the engines' own exceptions as EngineRefusal (MemoryError passes through)."""
    try:
        return build()
    except (EngineRefusal, MemoryError):
        raise
    except NotImplementedError as exc:
        raise EngineRefusal("unsupported", f"{engine} cannot enforce a {kind} constraint: {exc}") from None
    except Exception as exc:  # engines raise their own types (RuntimeError, ValueError, ...)
        reason = _SOURCE_PREFIX.sub("", first_line(exc))
        raise EngineRefusal("unsupported", f"{engine} refused the {kind}: {reason}") from None


# xgrammar's C++ errors start with their log line's time and source: "[17:16:26] /project/cpp/x.cc:974: "
_SOURCE_PREFIX = re.compile(r"^\[\d{2}:\d{2}:\d{2}\] \S+:\d+: ")
