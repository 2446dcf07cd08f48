"""The local provider: models loaded in this process, decoded by playground.decoding.engine.

On a ZeroGPU Space the GPU is attached only while a `spaces.GPU`-decorated call runs, and Hugging Face's
decorator runs that call in a forked worker process, with its arguments and results pickled across.
So there, each request decodes alone inside its own decorated call (`Engine.stream(here=True)`): its
prefill, every step and its next-token view run on the lease's thread, never on the shared scheduler's
(whose thread would live outside every lease, and whose batch could not span the worker processes).
Batching across requests is given up there; a lease is per call anyway. The decorated calls take
names and request types, not engines, and bring failures back as values, so a 422 stays a 422.
"""

from __future__ import annotations

import logging
import pickle
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from playground import client_scope
from playground.debug import check
from playground.decoding.continuation import PrefixRefused
from playground.decoding.engine import Engine
from playground.decoding.heartbeat import Heartbeat
from playground.errors import ModelError, first_line
from playground.models import load_model
from playground.models.hub import hub_snapshot
from playground.options import LocalOptions
from playground.providers.base import ALL_KINDS, Capabilities, Inputs, SimpleToken
from playground.providers.loading import (
    LoadingPolicy,
    LoadingRefused,
    check_request,
    check_room,
    load_key,
    looks_like_path,
    operator_key,
)
from playground.providers.startup import Startup
from playground.space import gpu_decorator, leases_gpu
from playground.types import GenerateParameters, GenerationResult, ModelInfo, NextTokenDistribution, TokenEvent

log = logging.getLogger("playground.providers")


def make_local(options: LocalOptions | None = None, model: str | None = None) -> LocalProvider:
    """The one way to build a local provider, serving `model` when one is named."""
    options = options or LocalOptions()
    load = {"device": options.device, "dtype": options.dtype, "threads": options.threads}
    load["batch_weights"] = options.cpu_batch_weights
    load["gguf_kernels"] = options.cpu_gguf_kernels
    load["attention_kernel"] = options.cpu_attention_kernel
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
            "reasoning_delimiters": options.reasoning,
        },
    )
    if model is not None:
        local.add_model(model)
    return local


class LocalProvider:
    """Serves engines by model id; more models can be loaded at run time (the UI's model picker)."""

    provider_type = "local::transformers"
    capabilities = Capabilities(
        raw_logprobs=True,
        next_token_view="constrained",
        constraint_kinds=ALL_KINDS | {"structural_tag"},
        model_loading=True,
        decodes_here=True,
        local_engine=True,
        prompt_logprobs="always",
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
        self.startup: Startup | None = None  # the operator's model loading in the background, if it is
        # On a ZeroGPU Space the GPU is attached only inside spaces.GPU-decorated calls; elsewhere identity.
        gpu = gpu_decorator()
        self.leased = leases_gpu(gpu)  # each call decodes alone, inside its lease (the module's docstring)
        self._generate = gpu(self._generate_on_device)
        self._stream = gpu(self._stream_on_device)
        self._next_token = gpu(self._next_token_on_device)

    def list_models(self) -> list[str]:
        with self._lock:
            models = list(self._engines)
        if self.startup is not None and not self.startup.ready():
            models.append(self.startup.name)  # served by that name already: requests wait for it
        return models

    def loaded_engines(self) -> list[Engine]:
        """The engines loaded now (none waited for)."""
        with self._lock:
            return list(self._engines.values())

    def engine(self, model: str) -> Engine:
        """The engine serving `model` (its id or the name it was loaded by); the model loading in the
        background is waited for (up to LOADING_WAIT_S)."""
        known = self.known(model)
        with self._lock:
            engine = self._engines.get(known or model)
        if engine is None and self.startup is not None and model == self.startup.name:
            self.startup.wait()
            return self.engine(model)
        if engine is None:
            raise ModelError(f"model {model!r} is not loaded by provider {self.provider_id!r}")
        return engine

    def load_in_background(self, name: str, then: Callable[[str], None]) -> Startup:
        """The operator's model, to load on a thread of its own once `start()`ed (it answers to `name` meanwhile);
        `then(model_id)` after."""
        self.startup = Startup(name, lambda: then(self.add_model(name)))
        return self.startup

    def add_model(self, name: str, policy: LoadingPolicy | None = None) -> str:
        """Load a model by hub id, folder, .gguf path or 'embedded'; returns its model id.

        Without a policy it is the operator's load; with one, a request's (see _load_for_request).
        """
        if policy is not None:
            return self._load_for_request(name, policy)
        return self._load(name, operator_key(name), hub_only=False)

    def _load_for_request(self, name: str, policy: LoadingPolicy) -> str:
        """A request's load: the operator's policy first, one copy per model, hub ids only from the hub.

        A failure says the same for every path, so a request cannot learn what exists on this machine.
        """
        known = self.known(name)
        if known is not None:
            return known
        check_request(policy, name)
        key = load_key(name)
        hub_only = key != "embedded" and not looks_like_path(name)
        try:
            return self._load(name, key, hub_only=hub_only, policy=policy)
        except LoadingRefused:
            raise
        except Exception as exc:  # a folder of garbage, a file that is no model: one answer for all, the log says why
            if hub_only and isinstance(exc, ModelError):
                raise
            log.warning("loading %r for a request failed: %s", name, first_line(exc))
        raise ModelError(f"cannot load model {name!r}: not a model folder or .gguf file this server can load")

    def known(self, name: str) -> str | None:
        """The id of the loaded model `name` names: its id, the operator's name for it, or any spelling of its folder
        or file (found by its key, not kept per spelling: a request's spellings are without number)."""
        with self._lock:
            found = self._aliases.get(name) or (name if name in self._engines else None)
        if found is None and looks_like_path(name):
            with self._lock:
                found = self._aliases.get(load_key(name))
        return found

    def _load(self, name: str, key: str, *, hub_only: bool, policy: LoadingPolicy | None = None) -> str:
        """Load once per key; a request's load (a policy) never runs a folder's own code, whatever
        --trust-remote-code says: that flag is the operator's trust in the operator's models."""
        with self._loading:
            known = self.known(key)
            if known is not None:
                if policy is None:  # the operator's name for a model: requests may use it too
                    with self._lock:
                        self._aliases[name] = known
                return known
            if policy is not None:
                check_room(policy, len(self.list_models()))
            options = self.load_options if policy is None else {**self.load_options, "trust_remote_code": False}
            loaded = self._loader(hub_snapshot(key) if hub_only else key, **options)
            if hub_only:
                loaded.model_id = loaded.source = key
            with self._lock:
                taken = self._engines.get(loaded.model_id)
            if taken is not None and taken.loaded.source != loaded.source:
                loaded.model_id = loaded.source  # two GGUF files named alike: the second goes by its whole path
            engine = Engine(loaded, **self.engine_options)
            with self._lock:
                self._engines.setdefault(engine.model_id, engine)
                self._aliases[key] = engine.model_id
                if policy is None:
                    self._aliases[name] = engine.model_id
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
            batch={
                **engine.scheduler.usage(),
                "batch_weights_mb": engine.loaded.batch_weights_mb,
                "gguf_blocks_mb": engine.loaded.gguf_blocks_mb,
            },
            reasoning=engine.reasoning.public() if engine.reasoning else None,
            tool_format=engine.tool_format,
        )

    def generate(self, model: str, inputs: Inputs, params: GenerateParameters) -> GenerationResult:
        self.engine(model)  # an unknown model fails here, before any lease
        return _unwrap(self._generate(model, inputs, params, client_scope.current()))

    def stream(self, model: str, inputs: Inputs, params: GenerateParameters) -> Iterator[TokenEvent | GenerationResult]:
        self.engine(model)
        return self._unwrap_stream(self._stream(model, inputs, params, client_scope.current()))

    def next_token(
        self, model: str, inputs: Inputs, params: GenerateParameters, *, prefix: str = "", top_k: int = 20
    ) -> NextTokenDistribution:
        self.engine(model)
        return _unwrap(self._next_token(model, inputs, params, prefix, top_k, client_scope.current()))

    @staticmethod
    def _unwrap_stream(events: Iterator[Any]) -> Iterator[TokenEvent | GenerationResult]:
        try:
            for event in events:
                yield _unwrap(event)
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def _generate_on_device(self, model: str, inputs: Inputs, params: GenerateParameters, scope: str) -> Any:
        def run() -> GenerationResult:
            engine = self.engine(model)
            with client_scope.scoped(scope), self.heartbeat.working(), _worded(engine):
                result = engine.generate(inputs, params, here=self.leased)
            result.provider_id = self.provider_id
            return result

        return self._guarded(run)

    def _stream_on_device(self, model: str, inputs: Inputs, params: GenerateParameters, scope: str) -> Iterator[Any]:
        client_scope.enter(scope)  # this generator's own context, wherever it runs
        try:
            engine = self.engine(model)
            with self.heartbeat.working() as beat, _worded(engine):
                for event in engine.stream(inputs, params, here=self.leased):
                    beat()
                    if isinstance(event, GenerationResult):
                        event.provider_id = self.provider_id
                    yield event
        except Exception as exc:
            if not self.leased:
                raise
            yield Failed(exc)

    def _next_token_on_device(
        self, model: str, inputs: Inputs, params: GenerateParameters, prefix: str, top_k: int, scope: str
    ) -> Any:
        def run() -> NextTokenDistribution:
            engine = self.engine(model)
            with client_scope.scoped(scope), self.heartbeat.working(), _worded(engine):
                return engine.next_token_distribution(inputs, params, prefix=prefix, top_k=top_k)

        return self._guarded(run)

    def _guarded(self, run: Callable[[], Any]) -> Any:
        """In a lease, a failure comes back as a value (see Failed); elsewhere it is raised as usual."""
        if not self.leased:
            return run()
        try:
            return run()
        except Exception as exc:  # noqa: BLE001 - re-raised by _unwrap on the caller's side of the lease
            return Failed(exc)

    def tokenize(self, model: str, text: str, params: GenerateParameters | None = None) -> list[SimpleToken]:
        return [SimpleToken(**t) for t in self.engine(model).tokenize(text, params=params)]


@contextmanager
def _worded(engine: Engine) -> Iterator[None]:
    """A continue_from (or /next_token's prefix) the constraint refuses comes back with the debugger's reason in
    words."""
    try:
        yield
    except PrefixRefused as refused:
        raise check.worded(engine, refused) from None


class Failed:
    """A failure inside a GPU lease, brought back as a value: the real `spaces.GPU` turns a raised error into a
    generic one, so the API would answer 500 where the request deserved a 422. An error that cannot be
    pickled (it holds a lock, an engine) crosses as a RuntimeError of its text."""

    def __init__(self, error: Exception) -> None:
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:  # noqa: BLE001 - it cannot cross a process boundary
            error = RuntimeError(first_line(error))
        self.error = error


def _unwrap(value: Any) -> Any:
    if isinstance(value, Failed):
        raise value.error
    return value
