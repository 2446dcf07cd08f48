"""Named logits-processor factories, chosen per request by name with string params (TGI's proposed design).

A factory is `factory(params: list[str], tokenizer) -> processor`; a processor is a transformers-style
callable `(input_ids[batch, seq], scores[batch, vocab]) -> scores`, built fresh for every request so it
may keep state. `input_ids` holds the prompt and everything generated so far. Plugins register factories
when imported (`--custom-modules`) or through the `structured_playground.processors` entry-point group.
"""

from __future__ import annotations

import bisect
import importlib
import importlib.metadata
import itertools
import re
import threading
import types
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
from pydantic import ValidationError

from playground.errors import PlaygroundError, ProcessorError
from playground.types import ProcessorSpec

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


@dataclass(frozen=True)
class _Entry:
    factory: Factory
    info: FactoryInfo


_lock = threading.RLock()
_factories: dict[str, _Entry] = {}


def register_factory(name: str, factory: Factory, description: str = "", *, replace: bool = False) -> None:
    """Register `factory` under `name`; registering the same factory again is a no-op, another one needs replace."""
    _register(name, factory, description, replace=replace, builtin=False)


def _register(name: str, factory: Factory, description: str, *, replace: bool, builtin: bool) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ProcessorError(f"invalid processor name {name!r}: use letters, digits, '_', '.' or '-'")
    if not callable(factory):
        raise ProcessorError(f"the factory for processor {name!r} is not callable")
    with _lock:
        current = _factories.get(name)
        if current is not None and current.factory is not factory and not replace:
            raise ProcessorError(f"a processor named {name!r} is already registered; pass replace=True to replace it")
        _factories[name] = _Entry(factory, FactoryInfo(name, str(description or ""), builtin))


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
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']}" for e in exc.errors())
                raise ProcessorError(f"a logits processor needs {{name, params: [str]}}: {problems}", field=FIELD) from None
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
                raise TypeError(f"it is a {type(target).__name__}, not a module or a register(register_factory) callable")
            target(register_factory)
        except PlaygroundError as exc:
            raise PluginLoadError(f"{where} failed while registering: {exc.message}") from exc
        except (Exception, SystemExit) as exc:
            raise PluginLoadError(f"{where} failed to load: {type(exc).__name__}: {exc}") from exc
    return sorted({info.name for info in list_factories()} - before)


# --- per-tokenizer tables ------------------------------------------------------------------------


class TokenTable:
    """What each token adds to the output, as bytes, built once per tokenizer; special tokens add nothing."""

    def __init__(self, tokenizer: Any) -> None:
        import xgrammar

        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer)
        special = _skipped_ids(tokenizer)
        self.pieces: list[bytes] = [b"" if i in special else bytes(p) for i, p in enumerate(info.decoded_vocab)]
        order = sorted(range(len(self.pieces)), key=self.pieces.__getitem__)
        self._sorted = [self.pieces[i] for i in order]
        self._sorted_ids = torch.tensor(order, dtype=torch.long)
        self._lock = threading.Lock()
        self._ids: OrderedDict[tuple[str, bytes], torch.Tensor] = OrderedDict()
        self._whitespace: tuple[torch.Tensor, ...] | None = None

    def starting_with(self, prefix: bytes) -> torch.Tensor:
        """Ids of tokens whose bytes start with `prefix`: one range of the sorted vocabulary."""
        return self._cached(("prefix", prefix), lambda: self._prefix_range(prefix))

    def containing(self, needle: bytes) -> torch.Tensor:
        """Ids of tokens whose bytes contain `needle`."""
        return self._cached(
            ("contains", needle),
            lambda: torch.tensor([i for i, p in enumerate(self.pieces) if needle in p], dtype=torch.long),
        )

    def _prefix_range(self, prefix: bytes) -> torch.Tensor:
        lo = bisect.bisect_left(self._sorted, prefix)
        hi = bisect.bisect_right(self._sorted, prefix, lo, key=lambda p: p[: len(prefix)])
        return self._sorted_ids[lo:hi]

    def _cached(self, key: tuple[str, bytes], make: Callable[[], torch.Tensor]) -> torch.Tensor:
        with self._lock:
            if key in self._ids:
                self._ids.move_to_end(key)
                return self._ids[key]
        ids = make()
        with self._lock:
            self._ids[key] = ids
            while len(self._ids) > 4096:
                self._ids.popitem(last=False)
        return ids

    def whitespace(self) -> tuple[torch.Tensor, ...]:
        """Per token: leading and trailing whitespace chars, the longest run, and whether it keeps a run going."""
        with self._lock:
            if self._whitespace is None:
                rows = [_whitespace_counts(p.decode("utf-8", errors="replace")) for p in self.pieces]
                lead, trail, run, keeps = zip(*rows)
                self._whitespace = (
                    torch.tensor(lead, dtype=torch.long),
                    torch.tensor(trail, dtype=torch.long),
                    torch.tensor(run, dtype=torch.long),
                    torch.tensor(keeps, dtype=torch.bool),
                )
            return self._whitespace


def _skipped_ids(tokenizer: Any) -> set[int]:
    """Tokens that decode(skip_special_tokens=True), and so the engine's output text, leaves out."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return set(getattr(tokenizer, "all_special_ids", [])) | {i for i, t in added.items() if getattr(t, "special", False)}


def _whitespace_counts(text: str) -> tuple[int, int, int, bool]:
    """(leading, trailing, longest run, keeps the run going) for one token's text."""
    runs = [len(list(group)) for is_ws, group in itertools.groupby(text, str.isspace) if is_ws]
    lead = len(text) - len(text.lstrip())
    trail = len(text) - len(text.rstrip())
    return lead, trail, max(runs, default=0), text == "" or text.isspace()


_tables: weakref.WeakKeyDictionary[Any, TokenTable] = weakref.WeakKeyDictionary()
_tables_lock = threading.Lock()


def token_table(tokenizer: Any) -> TokenTable:
    """The tokenizer's table, built on first use and kept while the tokenizer lives."""
    with _tables_lock:
        table = _tables.get(tokenizer)
        if table is None:
            table = _tables[tokenizer] = TokenTable(tokenizer)
        return table


def _pad(values: torch.Tensor, size: int, fill: Any) -> torch.Tensor:
    """Fit a per-token table to the model's vocabulary width (often padded past the tokenizer's)."""
    if values.shape[0] >= size:
        return values[:size]
    return torch.cat([values, torch.full((size - values.shape[0],), fill, dtype=values.dtype)])


# --- built-in processors -------------------------------------------------------------------------


class BanStrings:
    """Masks every token that would complete a banned string in the generated text, even across tokens.

    The prompt length is taken from the first call (its input_ids are the prompt), so only generated text
    is checked. Matching is on the exact bytes each token adds, so it is case-sensitive.
    """

    def __init__(self, banned: list[bytes], table: TokenTable) -> None:
        self.banned = banned
        self.table = table
        self.keep = max(len(b) for b in banned) - 1
        self.inside = torch.unique(torch.cat([table.containing(b) for b in banned]))
        self.prompt_len: int | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prompt_len is None:
            self.prompt_len = input_ids.shape[1]
        mask = torch.zeros(scores.shape, dtype=torch.bool)
        for row in range(input_ids.shape[0]):
            ids = self._banned_after(self._tail(input_ids[row]))
            mask[row, ids[ids < scores.shape[1]]] = True
        return scores.masked_fill(mask.to(scores.device), float("-inf"))

    def _tail(self, row: torch.Tensor) -> bytes:
        """The last bytes generated, enough to hold all but the last byte of the longest banned string."""
        if self.keep == 0:
            return b""
        start = max(self.prompt_len or 0, row.shape[0] - self.keep - 8)
        pieces = self.table.pieces
        tail = b"".join(pieces[i] if i < len(pieces) else b"" for i in row[start:].tolist())
        return tail[-self.keep :]

    def _banned_after(self, tail: bytes) -> torch.Tensor:
        parts = [self.inside]
        for banned in self.banned:
            for cut in range(1, len(banned)):
                if tail.endswith(banned[:cut]):
                    parts.append(self.table.starting_with(banned[cut:]))
        return torch.cat(parts) if len(parts) > 1 else self.inside


def ban_strings_factory(params: list[str], tokenizer: Any) -> BanStrings:
    """params: the strings the output must never contain."""
    if not params:
        raise ValueError("ban_strings needs at least one string to ban")
    if any(not isinstance(p, str) or p == "" for p in params):
        raise ValueError("ban_strings cannot ban an empty string")
    return BanStrings([p.encode("utf-8") for p in dict.fromkeys(params)], token_table(tokenizer))


class MaxWhitespace:
    """Masks tokens that would make the trailing run of whitespace longer than `limit` characters.

    The run is counted across token boundaries in the generated text (not the prompt, whose length is
    taken from the first call). A token split inside a multi-byte whitespace character counts as text.
    """

    def __init__(self, limit: int, table: TokenTable) -> None:
        self.limit = limit
        self.table = table.whitespace()
        self.prompt_len: int | None = None
        self.seen = 0
        self.runs = torch.zeros(0, dtype=torch.long)
        self._fitted: tuple[int, torch.device] | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prompt_len is None:
            self.prompt_len = input_ids.shape[1]
        self._fit(scores.shape[1], scores.device)
        self._advance(input_ids.to(scores.device))
        over = (self.runs[:, None] + self.lead[None, :] > self.limit) | self.always_over[None, :]
        return scores.masked_fill(over, float("-inf"))

    def _fit(self, width: int, device: torch.device) -> None:
        """Pad the tables to the scores' width and move them to their device, once."""
        if self._fitted != (width, device):
            self._fitted = (width, device)
            lead, trail, longest, keeps = self.table
            self.lead = _pad(lead, width, 0).to(device)
            self.trail = _pad(trail, width, 0).to(device)
            self.keeps = _pad(keeps, width, True).to(device)
            self.always_over = (_pad(longest, width, 0) > self.limit).to(device)
            self.runs = self.runs.to(device)

    def _advance(self, input_ids: torch.Tensor) -> None:
        """Update each row's trailing run with the tokens generated since the last call."""
        generated = input_ids.shape[1] - self.prompt_len
        if self.runs.shape[0] != input_ids.shape[0] or generated < self.seen:
            self.runs = torch.zeros(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
            self.seen = 0
        for pos in range(self.prompt_len + self.seen, input_ids.shape[1]):
            token = input_ids[:, pos].clamp(max=self.trail.shape[0] - 1)
            self.runs = self.trail[token] + self.runs * self.keeps[token]
        self.seen = generated


def max_whitespace_factory(params: list[str], tokenizer: Any) -> MaxWhitespace:
    """params: [N], the longest run of consecutive whitespace characters allowed."""
    if len(params) != 1:
        raise ValueError(f"max_whitespace takes one parameter, the longest whitespace run allowed; got {len(params)}")
    try:
        limit = int(params[0].strip())
    except ValueError:
        raise ValueError(f"max_whitespace needs a whole number, got {params[0]!r}") from None
    if limit < 0:
        raise ValueError(f"max_whitespace needs a number >= 0, got {limit}")
    return MaxWhitespace(limit, token_table(tokenizer))


# --- constraints as factories --------------------------------------------------------------------

_compilers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _constraint_factory(kind: str) -> Factory:
    """A factory that compiles a constraint of `kind` (cached per tokenizer) and returns a fresh matcher."""

    def factory(params: list[str], tokenizer: Any) -> Processor:
        from playground.constraints import Constraint, ConstraintCompiler

        if kind == "choice":
            constraint = Constraint.choice(list(params))
        elif len(params) != 1:
            raise ValueError(f"{kind} takes one parameter, the {_WHAT[kind]}; got {len(params)}")
        else:
            constraint = getattr(Constraint, kind)(params[0])
        with _lock:
            compiler = _compilers.get(tokenizer)
            if compiler is None:
                compiler = _compilers[tokenizer] = ConstraintCompiler(tokenizer)
        return compiler.compile(constraint).new_processor()

    return factory


_WHAT = {"json_schema": "JSON schema text", "regex": "pattern", "grammar": "Lark grammar text"}

_BUILTINS: list[tuple[str, Factory, str]] = [
    ("ban_strings", ban_strings_factory, "Forbid strings in the output, even when split across tokens. "
     "params: the strings (case-sensitive)."),
    ("max_whitespace", max_whitespace_factory, "Limit runs of consecutive whitespace (spaces, tabs, newlines), "
     "counted across tokens. params: [N], the longest run allowed."),
    ("json_schema", _constraint_factory("json_schema"), "Constrain the output to a JSON schema. params: [schema JSON]."),
    ("regex", _constraint_factory("regex"), "Constrain the output to fully match a regex. params: [pattern]."),
    ("choice", _constraint_factory("choice"), "Constrain the output to one of the choices. params: the choices."),
    ("grammar", _constraint_factory("grammar"), "Constrain the output to a Lark grammar. params: [grammar text]."),
]
for _name, _factory, _description in _BUILTINS:
    _register(_name, _factory, _description, replace=True, builtin=True)
