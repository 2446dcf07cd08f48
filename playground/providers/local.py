"""The local provider: models loaded in this process, decoded by playground.decoding.engine."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from playground.debug import check
from playground.decoding.continuation import PrefixRefused
from playground.decoding.engine import Engine
from playground.decoding.heartbeat import Heartbeat
from playground.errors import ModelError, first_line
from playground.models import load_model
from playground.models.hub import hub_snapshot
from playground.options import LocalOptions
from playground.providers.base import Capabilities, Inputs, SimpleToken
from playground.providers.loading import (
    LoadingPolicy,
    LoadingRefused,
    check_request,
    check_room,
    load_key,
    looks_like_path,
)
from playground.space import gpu_decorator
from playground.types import GenerateParameters, GenerationResult, ModelInfo, NextTokenDistribution, TokenEvent

log = logging.getLogger("playground.providers")


def make_local(options: LocalOptions | None = None, model: str | None = None) -> LocalProvider:
    """The one way to build a local provider, serving `model` when one is named."""
    options = options or LocalOptions()
    load = {"device": options.device, "dtype": options.dtype, "threads": options.threads}
    load["batch_weights"] = options.cpu_batch_weights
    local = LocalProvider(
        load_options={**load, "trust_remote_code": options.trust_remote_code},
        engine_options={
            "compile_timeout_s": options.compile_timeout,
            "compile_memory_mb": options.compile_memory,
            "compile_workers": options.compile_workers,
            "default_max_new_tokens": options.max_new_tokens,
            "adapters": options.adapters,
            "prefix_cache_tokens": options.prefix_cache_tokens,
            "max_batch_rows": options.max_batch_size,
        },
    )
    if model is not None:
        local.add_model(model)
    return local


class LocalProvider:
    """Serves engines by model id; more models can be loaded at run time (the UI's model picker)."""

    provider_type = "local::transformers"
    capabilities = Capabilities(
        raw_logprobs=True, next_token_view="constrained", model_loading=True, decodes_here=True, local_engine=True
    )

    def __init__(
        self,
        engines: list[Engine] | None = None,
        *,
        provider_id: str = "local",
        load_options: dict[str, Any] | None = None,
        engine_options: dict[str, Any] | None = None,
        loader: Callable[..., Any] = load_model,
    ) -> None:
        self.provider_id = provider_id
        self.load_options = load_options or {}
        self.engine_options = engine_options or {}
        self._loader = loader
        self._engines: dict[str, Engine] = {e.model_id: e for e in engines or []}
        self._aliases: dict[str, str] = {}
        self._lock = threading.Lock()
        self._loading = threading.Lock()  # one load at a time: two requests for one model load it once
        self.heartbeat = Heartbeat()
        # On a ZeroGPU Space the GPU is attached only inside spaces.GPU-decorated calls; elsewhere identity.
        gpu = gpu_decorator()
        self._generate = gpu(self._generate_on_device)
        self._stream = gpu(self._stream_on_device)
        self._next_token = gpu(self._next_token_on_device)

    def list_models(self) -> list[str]:
        with self._lock:
            return list(self._engines)

    def engine(self, model: str) -> Engine:
        """The engine serving `model` (its id or the name it was loaded by)."""
        with self._lock:
            name = self._aliases.get(model, model)
            engine = self._engines.get(name)
        if engine is None:
            raise ModelError(f"model {model!r} is not loaded by provider {self.provider_id!r}")
        return engine

    def add_model(self, name: str, policy: LoadingPolicy | None = None) -> str:
        """Load a model by hub id, folder, .gguf path or 'embedded'; returns its model id.

        Without a policy it is the operator's load; with one, a request's (see _load_for_request).
        """
        if policy is not None:
            return self._load_for_request(name, policy)
        return self._load(name, load_key(name, allow_local_paths=True), hub_only=False)

    def _load_for_request(self, name: str, policy: LoadingPolicy) -> str:
        """A request's load: the operator's policy first, one copy per model, hub ids only from the hub.

        A failure says the same for every path, so a request cannot learn what exists on this machine.
        """
        known = self._known(name)
        if known is not None:
            return known
        check_request(policy, name)
        key = load_key(name, allow_local_paths=policy.allow_local_paths)
        hub_only = key != "embedded" and (not policy.allow_local_paths or not looks_like_path(key))
        try:
            return self._load(name, key, hub_only=hub_only, policy=policy)
        except LoadingRefused:
            raise
        except ModelError:
            if hub_only:
                raise
        except Exception as exc:  # a folder of garbage, a file that is no model: one answer for all
            log.warning("loading %r for a request failed: %s", name, first_line(exc))
        raise ModelError(f"cannot load model {name!r}: not a model folder or .gguf file this server can load")

    def _known(self, name: str) -> str | None:
        with self._lock:
            return self._aliases.get(name) or (name if name in self._engines else None)

    def _load(self, name: str, key: str, *, hub_only: bool, policy: LoadingPolicy | None = None) -> str:
        with self._loading:
            known = self._known(key)
            if known is not None:
                with self._lock:
                    self._aliases[name] = known
                return known
            if policy is not None:
                check_room(policy, len(self.list_models()))
            loaded = self._loader(hub_snapshot(key) if hub_only else key, **self.load_options)
            if hub_only:
                loaded.model_id = loaded.source = key
            engine = Engine(loaded, **self.engine_options)
            with self._lock:
                self._engines.setdefault(engine.model_id, engine)
                self._aliases[name] = self._aliases[key] = engine.model_id
        return engine.model_id

    def info(self, model: str) -> ModelInfo:
        engine = self.engine(model)
        return ModelInfo(
            model_id=engine.model_id,
            provider_id=self.provider_id,
            provider_type=self.provider_type,
            max_input_tokens=engine.max_input_tokens,
            max_total_tokens=engine.max_total_tokens,
            max_best_of=engine.max_best_of,
            max_top_n_tokens=engine.max_top_n_tokens,
            device=engine.loaded.device,
            compile_limits=engine.compiler.limits.as_dict(),
            prefix_cache=engine.prefix_cache.public_usage(),
            batch={**engine.scheduler.usage(), "batch_weights_mb": engine.loaded.batch_weights_mb},
            tool_format=engine.tool_format,
        )

    def generate(self, model: str, inputs: Inputs, params: GenerateParameters) -> GenerationResult:
        return self._generate(self.engine(model), inputs, params)

    def stream(self, model: str, inputs: Inputs, params: GenerateParameters) -> Iterator[TokenEvent | GenerationResult]:
        return self._stream(self.engine(model), inputs, params)

    def next_token(
        self, model: str, inputs: Inputs, params: GenerateParameters, *, prefix: str = "", top_k: int = 20
    ) -> NextTokenDistribution:
        return self._next_token(self.engine(model), inputs, params, prefix, top_k)

    def _generate_on_device(self, engine: Engine, inputs: Inputs, params: GenerateParameters) -> GenerationResult:
        with self.heartbeat.working(), _worded(engine):
            result = engine.generate(inputs, params)
        result.provider_id = self.provider_id
        return result

    def _stream_on_device(
        self, engine: Engine, inputs: Inputs, params: GenerateParameters
    ) -> Iterator[TokenEvent | GenerationResult]:
        with self.heartbeat.working() as beat, _worded(engine):
            for event in engine.stream(inputs, params):
                beat()
                if isinstance(event, GenerationResult):
                    event.provider_id = self.provider_id
                yield event

    def _next_token_on_device(
        self, engine: Engine, inputs: Inputs, params: GenerateParameters, prefix: str, top_k: int
    ) -> NextTokenDistribution:
        with self.heartbeat.working():
            return engine.next_token_distribution(inputs, params, prefix=prefix, top_k=top_k)

    def tokenize(self, model: str, text: str) -> list[SimpleToken]:
        return [SimpleToken(**t) for t in self.engine(model).tokenize(text)]


@contextmanager
def _worded(engine: Engine) -> Iterator[None]:
    """A continue_from the constraint refuses comes back with the debugger's reason in words."""
    try:
        yield
    except PrefixRefused as refused:
        raise check.worded(engine, refused) from None
