"""The providers file (`--providers FILE`, YAML) -> a Registry of providers and the models they serve.

Start-up never stops for a provider that is down: its failure is reported and the models the file
declares for it are registered unchecked. It does stop for a file that is wrong (a typo, an unknown
provider, a model the provider's own listing says it does not serve, a name two providers claim).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Literal, get_args

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from playground import options
from playground.decoding.reasoning_formats import setting_problem
from playground.errors import ModelError, PlaygroundError, ProviderError, first_line
from playground.providers.base import Provider
from playground.providers.hf_inference import HFInferenceProvider
from playground.providers.openai_compat import OpenAICompatProvider
from playground.providers.registry import Registry
from playground.providers.remote import BadKeyError, RemoteProvider
from playground.providers.tgi import TGIProvider
from playground.providers.vllm import VLLMProvider
from playground.wire.errors import describe

log = logging.getLogger("playground.providers")

LOCAL_TYPE = "local::transformers"
REMOTE_TYPES: dict[str, type[RemoteProvider]] = {
    cls.provider_type: cls for cls in (OpenAICompatProvider, VLLMProvider, TGIProvider, HFInferenceProvider)
}
ProviderType = Literal["local::transformers", "remote::openai", "remote::vllm", "remote::tgi", "remote::hf-inference"]


class ProvidersFileError(PlaygroundError):
    """The providers file is missing, not YAML, or describes something impossible; start-up stops."""

    error_type = "config"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LocalConfig(_Strict):
    """`config:` of local::transformers: what playground.models.load_model takes."""

    model: str = Field(default="embedded", min_length=1)  # ("" was served as a model named "", as --model refuses it)
    device: str | None = None
    dtype: str | None = None
    trust_remote_code: bool = False
    reasoning: str | None = Field(
        default=None, description="Reasoning delimiters: auto, none, a known family or START,END (as --reasoning)."
    )

    @field_validator("device")
    @classmethod
    def _device(cls, value: str | None) -> str | None:  # as --device checks it: torch's error came after the load
        problem = options.device_problem(value)
        if problem:
            raise ValueError(f"{value!r}: {problem}")
        return value

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value: str | None) -> str | None:  # as --dtype checks it
        problem = options.dtype_problem(value)
        if problem:
            raise ValueError(f"{value!r}: {problem}")
        return value

    @field_validator("reasoning")
    @classmethod
    def _reasoning(cls, value: str | None) -> str | None:  # as --reasoning checks it, with the file's field named
        problem = setting_problem(value) if value is not None else None
        if problem:
            raise ValueError(f"{value!r}: {problem}")
        return value


class ProviderEntry(_Strict):
    provider_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    provider_type: ProviderType
    config: dict[str, Any] = Field(default_factory=dict)


class ModelEntry(_Strict):
    model_id: str = Field(min_length=1)
    provider_id: str


class ProvidersFile(_Strict):
    providers: list[ProviderEntry] = Field(min_length=1)
    models: list[ModelEntry] = Field(default_factory=list)
    default_model: str | None = None


LocalFactory = Callable[[LocalConfig], Provider]


def read_providers_file(path: str | Path) -> tuple[ProvidersFile, list[BaseModel]]:
    """The validated file and each provider's typed config; every mistake names the file and field."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ProvidersFileError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB; not a providers file")
        raw = yaml.load(data.decode("utf-8"), Loader=_UniqueKeysLoader)  # noqa: S506 - a SafeLoader
    except OSError as exc:
        raise ProvidersFileError(f"cannot read providers file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ProvidersFileError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except yaml.YAMLError as exc:
        raise ProvidersFileError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(raw, dict):
        raise ProvidersFileError(
            f"{path}: expected a mapping with `providers:` (and `models:`), got {type(raw).__name__}"
        )
    parsed = _validated(path, ProvidersFile, raw, ())
    configs = [
        _validated(path, _config_class(entry), entry.config, ("providers", i, "config"))
        for i, entry in enumerate(parsed.providers)
    ]
    _check_references(path, parsed)
    return parsed, configs


def build_registry(path: str | Path, *, local_factory: LocalFactory) -> tuple[Registry, list[str]]:
    """The registry and the problems found at start (unreachable providers, missing API keys)."""
    parsed, configs = read_providers_file(path)
    declared: dict[str, list[str]] = {}
    for entry in parsed.models:
        declared.setdefault(entry.provider_id, []).append(entry.model_id)
    registry = Registry([])
    problems: list[str] = []
    reachable: dict[str, bool] = {}
    remotes: dict[str, RemoteProvider] = {}
    for entry, config in zip(parsed.providers, configs):
        provider, remote = _make_provider(entry, config, declared.get(entry.provider_id, []), local_factory, path)
        if remote is not None:
            remotes[entry.provider_id] = remote
            if remote.key_problem:
                problems.append(f"provider {entry.provider_id!r}: {remote.key_problem}")
        reachable[entry.provider_id] = _add(registry, provider, path, problems)
        if remote is not None and remote.config.model and not reachable[entry.provider_id]:
            # `config.model` is declared like a `models:` entry: registered unchecked while the server is down
            _register_load_name(registry, entry.provider_id, remote.name(remote.config.model), path)
        if isinstance(config, LocalConfig):
            _register_load_name(registry, entry.provider_id, config.model, path)
    for i, entry in enumerate(parsed.models):
        _register_declared(registry, entry, i, path, reachable[entry.provider_id], remotes.get(entry.provider_id))
    registry.default_model = _default_model(registry, parsed, path)
    return registry, problems


def load_registry(path: str | Path, *, local_factory: LocalFactory) -> Registry:
    """build_registry, with each start-up problem logged as a warning (the app keeps serving)."""
    registry, problems = build_registry(path, local_factory=local_factory)
    for problem in problems:
        log.warning("providers: %s", problem)
    return registry


# --- helpers --------------------------------------------------------------------------------------


def _config_class(entry: ProviderEntry) -> type[BaseModel]:
    return LocalConfig if entry.provider_type == LOCAL_TYPE else REMOTE_TYPES[entry.provider_type].config_class


def _make_provider(
    entry: ProviderEntry, config: BaseModel, declared: list[str], local_factory: LocalFactory, path: Path
) -> tuple[Provider, RemoteProvider | None]:
    """The registry's factory: the provider an entry names, and its remote side when it has one. A local model
    that cannot load is said with the file and the entry that name it (the message named the model alone)."""
    if entry.provider_type == LOCAL_TYPE:
        assert isinstance(config, LocalConfig)
        try:
            provider = local_factory(config)
        except PlaygroundError as exc:  # (its kind kept: a model that cannot load is no mistake in the file)
            exc.message = f"{path}: provider {entry.provider_id!r}: {exc.message}"
            exc.args = (exc.message,)
            raise
        except (OSError, ValueError, RuntimeError, ImportError) as exc:
            raise ModelError(
                f"{path}: provider {entry.provider_id!r}: cannot load model {config.model!r}: "
                f"{type(exc).__name__}: {first_line(exc)}"
            ) from None
        provider.provider_id = entry.provider_id
        return provider, None
    try:
        remote = REMOTE_TYPES[entry.provider_type](entry.provider_id, config, declared=declared)  # type: ignore[arg-type]
    except BadKeyError as exc:
        raise ProvidersFileError(f"{path}: provider {entry.provider_id!r}: {exc}") from None
    return remote, remote


def _add(registry: Registry, provider: Provider, path: Path, problems: list[str]) -> bool:
    """Add a provider and the models it lists; False when it could not be asked (it stays configured)."""
    before = _owners(registry)
    try:
        registry.add_provider(provider)
    except ProviderError as exc:
        problems.append(f"{exc.message}; the models the file declares for it are registered unchecked")
        return False
    for model, owner in _owners(registry).items():
        if owner == provider.provider_id and before.get(model, owner) != owner:
            raise ProvidersFileError(
                f"{path}: model {model!r} is served by both {before[model]!r} and {owner!r}; "
                f"set model_prefix in the config of one of them"
            )
    return True


def _register_load_name(registry: Registry, provider_id: str, name: str, path: Path) -> None:
    """Requests may name a local model the way the file does (`model: embedded` -> model "embedded")."""
    owner = _owners(registry).get(name, provider_id)
    if owner != provider_id:
        raise ProvidersFileError(f"{path}: model {name!r} is served by both {owner!r} and {provider_id!r}")
    registry.register_model(name, provider_id)


def _register_declared(
    registry: Registry, entry: ModelEntry, index: int, path: Path, reachable: bool, remote: RemoteProvider | None
) -> None:
    """A `models:` entry: registered when its provider lists it, or when the provider can't be asked."""
    name = remote.name(entry.model_id) if remote else entry.model_id
    owners = _owners(registry)
    if owners.get(name, entry.provider_id) != entry.provider_id:
        raise ProvidersFileError(f"{path}: models[{index}]: {name!r} is already served by provider {owners[name]!r}")
    listed = [remote.upstream(m) if remote else m for m, p in owners.items() if p == entry.provider_id]
    unchecked = remote is not None and (not reachable or not remote.config.discover_models)
    if name in owners or unchecked or (remote is not None and remote.serves(entry.model_id, listed)):
        registry.register_model(name, entry.provider_id)
        return
    shown = ", ".join(listed[:20]) or "none"
    raise ProvidersFileError(
        f"{path}: models[{index}]: provider {entry.provider_id!r} does not serve model {entry.model_id!r} "
        f"(it serves: {shown})"
    )


def _default_model(registry: Registry, parsed: ProvidersFile, path: Path) -> str | None:
    """The file's default_model; null: its first local model, or None when it has none (the command line's
    --model is then the local model, and the default: a remote one is never picked in silence)."""
    served = [m for _, m in registry.models()]
    if parsed.default_model is None:
        local = [p for p in registry.providers.values() if p.capabilities.decodes_here]
        return local[0].list_models()[0] if local and local[0].list_models() else None
    if parsed.default_model not in served:
        raise ProvidersFileError(f"{path}: default_model {parsed.default_model!r} is not served by any provider")
    return parsed.default_model


def _owners(registry: Registry) -> dict[str, str]:
    return {model: provider_id for provider_id, model in registry.models()}


def _check_references(path: Path, parsed: ProvidersFile) -> None:
    ids = [entry.provider_id for entry in parsed.providers]
    duplicate = next((pid for pid in ids if ids.count(pid) > 1), None)
    if duplicate:
        raise ProvidersFileError(f"{path}: provider_id {duplicate!r} is used by more than one provider")
    for i, entry in enumerate(parsed.models):
        if entry.provider_id not in ids:
            raise ProvidersFileError(
                f"{path}: models[{i}].provider_id: unknown provider {entry.provider_id!r} (configured: {', '.join(ids)})"
            )


def _validated(path: Path, cls: type[BaseModel], data: Any, where: tuple[Any, ...]) -> Any:
    try:
        return cls.model_validate(data if data is not None else {})
    except pydantic.ValidationError as exc:
        raise ProvidersFileError(f"{path}: " + "; ".join(_describe(cls, where, e) for e in exc.errors())) from None


def _describe(cls: type[BaseModel], where: tuple[Any, ...], error: Any) -> str:
    owner = _owner(cls, error["loc"])
    hint = f"allowed: {', '.join(owner.model_fields)}" if owner is not None else ""
    return describe({**error, "loc": (*where, *error["loc"])}, unknown_hint=hint, whole="(top level)")


def _owner(cls: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose field the last part of `loc` names (`providers[0].models`: a provider entry's), if one is."""
    for part in loc[:-1]:
        if isinstance(part, int):  # an item of a list: the list's own model
            continue
        field = cls.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        models = [a for a in (annotation, *get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not models:
            return None
        cls = models[0]
    return cls


MAX_FILE_BYTES = 2**20  # (/dev/zero was read until memory ran out)


class _UniqueKeysLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key said twice in one mapping (the last one won without a word: a second
    `providers:` block dropped the first one's providers)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged by the loader, later keys win
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if not isinstance(key, Hashable):  # (the loader names an unhashable key itself)
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"found the key {key!r} twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's own words and the line and column where it stopped."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    context = getattr(exc, "context", None)
    return f"{problem}{where}" + (f" ({context})" if context else "")
