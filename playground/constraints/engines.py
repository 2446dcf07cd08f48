"""What each constraint engine does, on each side of the compile worker.

A worker process compiles (`compile_payload`: slow, unbounded in the engine itself) and sends back a
payload the server rebuilds a processor template from cheaply (`rebuild_template`):
- llguidance: the payload is nothing; its grammar is text, and the matcher the server builds from it
  is bounded by llguidance's own parser and lexer limits (fuel, lexer states, grammar size). The worker
  still builds and validates it once, so a refusal or a slow conversion never reaches the server.
- xgrammar: nothing; the server compiles the same input again with the same options, once the worker has
  shown that the compile ends within the limits. Shipping the result costs more than compiling twice:
  xgrammar 0.2's `CompiledGrammar.serialize_json()` writes the grammar's complete FSM once per rule
  (MaskBench's Github_hard---o21372: a 3.3 MB grammar becomes 119 MB of JSON, 4.6 s to write, 2 s to
  read back, over 1 GB while writing), against 1.8 s to compile it.
- outlines_core: the `Index` itself (it pickles).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

TENSOR_LIBRARY = "torch"
# outlines_core builds one DFA state per repetition (measured: [a-z]{1,1000} ~ 200 MB, {1,5000} ~ 760 MB
# and 6 s); llguidance and xgrammar handle counted repetition without unrolling it.
OUTLINES_CORE_MAX_REPEAT = 1000
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")


class EngineRefusal(Exception):
    """An engine cannot take this constraint; `kind` says how the server reports it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "unsupported" | "invalid" | "unsatisfiable"
        self.message = message


# --- worker side ---------------------------------------------------------------------------------


def worker_backend(engine: str, tokenizer: Any) -> Any:
    """What a worker keeps warm per engine (reads the vocabulary once); llguidance's needs no torch."""
    if engine == "llguidance":
        import llguidance.hf

        backend = llguidance.hf.from_tokenizer(tokenizer)  # what Outlines' LLGuidanceBackend builds
    else:
        backend = _outlines_backend(engine, tokenizer)
    compile_payload(engine, backend, "regex", "a")  # first use builds tables (llguidance's trie: seconds)
    return backend


def _outlines_backend(engine: str, tokenizer: Any) -> Any:
    from outlines import backends
    from outlines.models.transformers import Transformers

    # Outlines' backends read only the tokenizer; the model slot is unused by them.
    model = Transformers(None, tokenizer)
    if engine == "outlines_core":
        return backends.OutlinesCoreBackend(model)
    import xgrammar

    backend = backends.XGrammarBackend(model)
    # playground.constraints.compiler keeps the cache of outcomes; xgrammar's own would only grow the process.
    tokenizer_info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer.get_vocab()))
    backend.grammar_compiler = xgrammar.GrammarCompiler(tokenizer_info, cache_enabled=False)
    return backend


# Each engine's JSON options, measured on MaskBench (README, "Benchmarks"): llguidance accepts `\\uXXXX`
# escapes of any printable character (json.dumps writes them for all non-ASCII text); xgrammar's strict
# mode forbids unlisted properties although JSON Schema allows them.
LLGUIDANCE_JSON_OPTIONS: dict[str, Any] = {"json_allow_general_unicode_escapes": True}
XGRAMMAR_JSON_OPTIONS: dict[str, Any] = {"strict_mode": False}


def llguidance_grammar(kind: str, text: str) -> str:
    """The llguidance grammar spec for (kind, text), as Outlines' LLGuidanceBackend writes it, plus our JSON options."""
    import llguidance

    if kind == "json_schema":
        return llguidance.LLMatcher.grammar_from_json_schema(text, defaults=LLGUIDANCE_JSON_OPTIONS)
    if kind in ("regex", "choice"):
        return llguidance.grammar_from("regex", text)
    try:
        return llguidance.grammar_from("grammar", text)
    except ValueError:
        return llguidance.grammar_from("lark", text)


def compile_template(engine: str, backend: Any, kind: str, text: str) -> Any:
    """The Outlines processor template of xgrammar or outlines_core: the engines' own options live here."""
    if kind == "json_schema" and engine == "xgrammar":  # Outlines passes no options to compile_json_schema
        from outlines.backends.xgrammar import XGrammarLogitsProcessor

        compiled = backend.grammar_compiler.compile_json_schema(text, **XGRAMMAR_JSON_OPTIONS)
        return XGrammarLogitsProcessor(compiled, TENSOR_LIBRARY)
    if kind == "json_schema":
        return backend.get_json_schema_logits_processor(text)
    if kind in ("regex", "choice"):
        return backend.get_regex_logits_processor(text)
    return backend.get_cfg_logits_processor(text)


def compile_payload(engine: str, backend: Any, kind: str, text: str) -> tuple[Any, list[str]]:
    """Compile in the worker: (payload for rebuild_template, engine warnings); raises EngineRefusal."""
    if kind == "json_schema":
        _check_satisfiable(text)
    if engine == "outlines_core":
        _check_outlines_core_bounds(kind, text)
    try:
        if engine == "llguidance":
            return None, _llguidance_warnings(llguidance_grammar(kind, text), backend, kind)
        template = compile_template(engine, backend, kind, text)
    except (EngineRefusal, MemoryError):
        raise
    except NotImplementedError as exc:
        raise EngineRefusal("unsupported", f"{engine} cannot enforce a {kind} constraint: {exc}") from None
    except Exception as exc:  # engines raise their own types (RuntimeError, ValueError, ...)
        raise EngineRefusal("unsupported", f"{engine} refused the {kind}: {_first_line(exc)}") from None
    if engine == "xgrammar":  # the server compiles it again (module docstring)
        return None, []
    return template.index, []


def _llguidance_warnings(grammar: str, llg_tokenizer: Any, kind: str) -> list[str]:
    import llguidance

    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, llg_tokenizer)
    if is_error:
        raise EngineRefusal(_refusal_kind(messages, kind), f"llguidance refused the {kind}: {'; '.join(messages)}")
    return list(messages)


def _refusal_kind(messages: list[str], kind: str) -> str:
    if any("Unsatisfiable" in m for m in messages):
        return "unsatisfiable"
    return "invalid" if kind == "grammar" else "unsupported"


def _check_satisfiable(schema_text: str) -> None:
    """Refuse a schema no value satisfies, whatever the engine: one that ignores the problem emits invalid output."""
    if json.loads(schema_text) == {"not": {}}:
        raise EngineRefusal("unsatisfiable", "the schema is `false`: no value satisfies it")
    import llguidance

    _, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
        llguidance.grammar_from("json_schema", schema_text), None
    )
    unsatisfiable = [m for m in messages if "Unsatisfiable" in m]
    if unsatisfiable:
        raise EngineRefusal("unsatisfiable", "no value satisfies the schema: " + "; ".join(unsatisfiable))


def _check_outlines_core_bounds(kind: str, text: str) -> None:
    if kind == "json_schema":
        from outlines_core.json_schema import build_regex_from_schema

        try:
            text = build_regex_from_schema(text)
        except Exception as exc:
            raise EngineRefusal("unsupported", f"outlines_core refused the json_schema: {_first_line(exc)}") from None
    repeat = max_repetition(text)
    if repeat > OUTLINES_CORE_MAX_REPEAT:
        raise EngineRefusal(
            "unsupported",
            f"outlines_core unrolls counted repetition into states: a repetition of up to {repeat} "
            f"exceeds its limit of {OUTLINES_CORE_MAX_REPEAT} (llguidance and xgrammar take it)",
        )


def max_repetition(pattern: str) -> int:
    """The largest count a regex repeats anything, nested counts multiplied (`(a{1,10}){2}` -> 20)."""
    inner = [1]  # per open group: the largest product of counts inside it
    last, i = 1, 0  # last: the product the previous atom carries (a group's inner product, else 1)
    while i < len(pattern):
        char, step = pattern[i], 1
        if char == "\\":
            last, step = 1, 2
        elif char == "[":
            last, step = 1, _class_end(pattern, i) - i
        elif char == "(":
            inner.append(1)
            last = 1
        elif char == ")" and len(inner) > 1:
            last = inner.pop()
            inner[-1] = max(inner[-1], last)
        elif char == "{" and (match := _QUANTIFIER.match(pattern, i)):
            last *= int(match.group(2) or match.group(1))
            inner[-1] = max(inner[-1], last)
            step = match.end() - i
        else:
            last = 1
        i += step
    return max(inner)


def _class_end(pattern: str, start: int) -> int:
    """The index just past the character class opening at `start` (nested classes counted)."""
    depth, i = 0, start
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "[":
            depth += 1
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                i += 1
        elif pattern[i] == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(pattern)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


# --- server side ---------------------------------------------------------------------------------


@dataclass
class _ServerXGrammar:
    """xgrammar in the server: the worker's kind of backend, and a lock so one proven compile runs at a time."""

    backend: Any
    lock: threading.Lock = field(default_factory=threading.Lock)


class ServerBackends:
    """What the server needs per (engine, tokenizer) to rebuild templates: built once, vocabulary read once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[tuple[str, int], Any] = {}

    def get(self, engine: str, tokenizer: Any) -> Any:
        key = (engine, id(tokenizer))
        with self._lock:
            if key not in self._built:
                self._built[key] = _server_backend(engine, tokenizer)
            return self._built[key]


def _server_backend(engine: str, tokenizer: Any) -> Any:
    if engine == "xgrammar":
        return _ServerXGrammar(worker_backend(engine, tokenizer))
    if engine == "llguidance":
        from outlines.backends import LLGuidanceBackend
        from outlines.models.transformers import Transformers

        backend = LLGuidanceBackend(Transformers(None, tokenizer))
        _warm_llguidance(backend)
        return backend
    return None


def _warm_llguidance(backend: Any) -> None:
    """llguidance builds its token trie on the first mask (seconds); pay that at start, not in a request."""
    import llguidance
    import llguidance.torch

    matcher = llguidance.LLMatcher(backend.llg_tokenizer, llguidance.grammar_from("regex", "a"))
    bitmask = llguidance.torch.allocate_token_bitmask(1, backend.llg_tokenizer.vocab_size)
    llguidance.torch.fill_next_token_bitmask(matcher, bitmask, 0)


def rebuild_template(engine: str, backend: Any, kind: str, text: str, payload: Any) -> Any:
    """The processor template in the server, from the worker's payload (xgrammar: its compile, again)."""
    if engine == "llguidance":
        from outlines.backends.llguidance import LLGuidanceLogitsProcessor

        return LLGuidanceLogitsProcessor(llguidance_grammar(kind, text), backend.llg_tokenizer, TENSOR_LIBRARY)
    if engine == "xgrammar":  # a worker compiled it within the limits; one at a time, so the server grows by one
        with backend.lock:
            return compile_template(engine, backend.backend, kind, text)
    from outlines.backends.outlines_core import OutlinesCoreLogitsProcessor

    return OutlinesCoreLogitsProcessor(payload, TENSOR_LIBRARY)
