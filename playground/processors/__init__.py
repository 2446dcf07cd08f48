"""Named logits-processor factories, chosen per request by name with string params (TGI's proposed design).

A factory is `factory(params: list[str], tokenizer) -> processor`; a processor is a transformers-style
callable `(input_ids[batch, seq], scores[batch, vocab]) -> scores`, built fresh for every request so it
may keep state. `input_ids` holds the prompt and everything generated so far. Plugins register factories
when imported (`--custom-modules`) or through the `structured_playground.processors` entry-point group.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import threading
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import ValidationError

from playground.errors import PlaygroundError, ProcessorError
from playground.processors.builtin import ban_strings_factory, max_whitespace_factory
from playground.types import ProcessorSpec
from playground.wire.errors import validation_message

Processor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Factory = Callable[[list[str], Any], Processor]
ENTRY_POINT_GROUP = "structured_playground.processors"
FIELD = "logits_processors"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


class PluginLoadError(PlaygroundError):
    """A custom module or entry point could not be imported or failed while registering; start-up stops."""

    error_type = "plugin"


@dataclass(frozen=True)
class FactoryInfo:
    """What /info and the UI show about a registered factory."""

    name: str
    description: str
    builtin: bool
    one_text: bool = False  # its one parameter is a whole text (a grammar, a schema): an editor sends it unsplit


@dataclass(frozen=True)
class _Entry:
    factory: Factory
    info: FactoryInfo


_lock = threading.RLock()
_factories: dict[str, _Entry] = {}


def register_factory(
    name: str, factory: Factory, description: str = "", *, replace: bool = False, one_text: bool = False
) -> None:
    """Register `factory` under `name`; registering the same factory again is a no-op, another one needs replace.
    `one_text`: its one parameter is a whole text, lines and all (the UI's and the widget's params box sends it as
    one; otherwise each line is a parameter)."""
    _register(name, factory, description, replace=replace, builtin=False, one_text=one_text)


def _register(
    name: str, factory: Factory, description: str, *, replace: bool, builtin: bool, one_text: bool = False
) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ProcessorError(f"invalid processor name {name!r}: use letters, digits, '_', '.' or '-'")
    if not callable(factory):
        raise ProcessorError(f"the factory for processor {name!r} is not callable")
    with _lock:
        current = _factories.get(name)
        if current is not None and current.factory is not factory and not replace:
            raise ProcessorError(f"a processor named {name!r} is already registered; pass replace=True to replace it")
        _factories[name] = _Entry(factory, FactoryInfo(name, str(description or ""), builtin, one_text))


def unregister_factory(name: str) -> None:
    """Remove a registered factory (for plugins that undo themselves, and for tests)."""
    with _lock:
        if _factories.pop(name, None) is None:
            raise ProcessorError(f"no processor named {name!r} is registered")


def list_factories() -> list[FactoryInfo]:
    """Every registered factory, sorted by name."""
    with _lock:
        return sorted((entry.info for entry in _factories.values()), key=lambda info: info.name)


def get_factory(name: str) -> Factory:
    """The factory registered as `name`; an unknown name is an error that lists the known ones."""
    with _lock:
        entry = _factories.get(name)
        known = ", ".join(sorted(_factories))
    if entry is None:
        raise ProcessorError(f"unknown logits processor {name!r}; registered: {known or '(none)'}", field=FIELD)
    return entry.factory


class NamedProcessor:
    """Calls a processor and turns anything it raises into a ProcessorError, failing only its request."""

    def __init__(self, name: str, processor: Processor) -> None:
        self.name = name
        self.processor = processor

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        try:
            out = self.processor(input_ids, scores)
        except PlaygroundError:
            raise
        except Exception as exc:
            raise ProcessorError(f"processor {self.name!r} failed: {type(exc).__name__}: {exc}", field=FIELD) from exc
        if not isinstance(out, torch.Tensor) or out.shape != scores.shape:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ProcessorError(
                f"processor {self.name!r} failed: it returned {got} instead of scores of shape {tuple(scores.shape)}",
                field=FIELD,
            )
        return out

    def __repr__(self) -> str:
        return f"NamedProcessor({self.name!r})"


def build_processors(specs: Iterable[ProcessorSpec | dict], tokenizer: Any) -> list[NamedProcessor]:
    """Fresh processors for one request, in order; unknown names and bad params raise ProcessorError (422)."""
    built = []
    for spec in specs:
        if not isinstance(spec, ProcessorSpec):
            try:
                spec = ProcessorSpec.model_validate(spec)
            except ValidationError as exc:
                problems = validation_message(exc.errors(), whole="spec")
                raise ProcessorError(
                    f"a logits processor needs {{name, params: [str]}}: {problems}", field=FIELD
                ) from None
        factory = get_factory(spec.name)
        try:
            processor = factory(list(spec.params), tokenizer)
        except PlaygroundError:
            raise
        except (ValueError, TypeError) as exc:
            raise ProcessorError(f"logits processor {spec.name!r}: {exc}", field=FIELD) from exc
        except Exception as exc:
            raise ProcessorError(
                f"logits processor {spec.name!r} could not be built: {type(exc).__name__}: {exc}", field=FIELD
            ) from exc
        if not callable(processor):
            raise ProcessorError(f"the factory of {spec.name!r} returned {type(processor).__name__}, not a processor")
        built.append(NamedProcessor(spec.name, processor))
    return built


# --- plugins -------------------------------------------------------------------------------------


def load_custom_modules(names: Iterable[str]) -> list[str]:
    """Import each plugin module (it registers on import); returns the names it added; fails with PluginLoadError."""
    before = {info.name for info in list_factories()}
    for name in (n.strip() for n in names):
        if not name:
            continue
        try:
            importlib.import_module(name)
        except PlaygroundError as exc:
            raise PluginLoadError(f"custom module {name!r} failed while registering: {exc.message}") from exc
        except (Exception, SystemExit) as exc:  # a plugin may even call sys.exit; start-up still gets a message
            raise PluginLoadError(f"cannot import custom module {name!r}: {type(exc).__name__}: {exc}") from exc
    return sorted({info.name for info in list_factories()} - before)


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Load every entry point of `group`: a module registers on import, a callable is called with register_factory."""
    before = {info.name for info in list_factories()}
    for entry in importlib.metadata.entry_points(group=group):
        where = f"entry point {entry.name!r} ({entry.value}) of {group}"
        try:
            target = entry.load()
            if isinstance(target, types.ModuleType):
                continue
            if not callable(target):
                raise TypeError(
                    f"it is a {type(target).__name__}, not a module or a register(register_factory) callable"
                )
            target(register_factory)
        except PlaygroundError as exc:
            raise PluginLoadError(f"{where} failed while registering: {exc.message}") from exc
        except (Exception, SystemExit) as exc:
            raise PluginLoadError(f"{where} failed to load: {type(exc).__name__}: {exc}") from exc
    return sorted({info.name for info in list_factories()} - before)


# --- constraints as factories --------------------------------------------------------------------


def _constraint_factory(kind: str) -> Factory:
    """A factory that compiles a constraint of `kind` with the tokenizer's compiler (the engine's limits)."""

    def factory(params: list[str], tokenizer: Any) -> Processor:
        from playground.constraints import Constraint
        from playground.constraints.compiler import compiler_for

        if kind == "choice":
            constraint = Constraint.choice(list(params))
        elif len(params) != 1:
            raise ValueError(f"{kind} takes one parameter, the {_WHAT[kind]}; got {len(params)}")
        else:
            constraint = getattr(Constraint, kind)(params[0])
        return compiler_for(tokenizer).compile(constraint).new_processor()

    return factory


_WHAT = {"json_schema": "JSON schema text", "regex": "pattern", "grammar": "Lark grammar text"}

_BUILTINS: list[tuple[str, Factory, str]] = [
    (
        "ban_strings",
        ban_strings_factory,
        "Forbid strings in the output, even when split across tokens. params: the strings (case-sensitive).",
    ),
    (
        "max_whitespace",
        max_whitespace_factory,
        "Limit runs of consecutive whitespace (spaces, tabs, newlines), "
        "counted across tokens. params: [N], the longest run allowed.",
    ),
    (
        "json_schema",
        _constraint_factory("json_schema"),
        "Constrain the output to a JSON schema. params: [schema JSON].",
    ),
    ("regex", _constraint_factory("regex"), "Constrain the output to fully match a regex. params: [pattern]."),
    ("choice", _constraint_factory("choice"), "Constrain the output to one of the choices. params: the choices."),
    ("grammar", _constraint_factory("grammar"), "Constrain the output to a Lark grammar. params: [grammar text]."),
]
ONE_TEXT = frozenset({"max_whitespace", "json_schema", "regex", "grammar"})
for _name, _factory, _description in _BUILTINS:
    _register(_name, _factory, _description, replace=True, builtin=True, one_text=_name in ONE_TEXT)


def params_from_text(name: str, text: str) -> list[str]:
    """An editor's params box for processor `name`: one whole text, or a parameter per non-blank line."""
    info = next((info for info in list_factories() if info.name == name), None)
    if info is not None and info.one_text:
        return [text] if text.strip() else []
    return [line for line in text.splitlines() if line.strip()]
