"""The model registry: which provider serves which model."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from playground.errors import ModelError, ParameterError
from playground.providers.base import Provider, local_engine
from playground.providers.loading import DISABLED, LoadingPolicy, LoadingRefused

if TYPE_CHECKING:
    from playground.decoding.engine import Engine
    from playground.providers.startup import Startup


class Registry:
    """Maps model names to providers; the only shared state besides the loaded models, and locked."""

    def __init__(self, providers: list[Provider], default_model: str | None = None) -> None:
        self._lock = threading.Lock()
        self.providers: dict[str, Provider] = {}
        self._models: dict[str, str] = {}
        # What requests may load at run time; off unless the operator says otherwise.
        self.loading = LoadingPolicy()
        self.startup: Startup | None = None  # the operator's model loading in the background (a Space's cold start)
        for provider in providers:
            self.add_provider(provider)
        self.default_model = default_model or next(iter(self._models), None)

    def add_provider(self, provider: Provider) -> None:
        """Add a provider and every model it says it serves."""
        with self._lock:
            self.providers[provider.provider_id] = provider
        for model in provider.list_models():
            self.register_model(model, provider.provider_id)

    def register_model(self, model: str, provider_id: str) -> None:
        """Serve `model` through `provider_id`; refuses an unknown provider."""
        with self._lock:
            if provider_id not in self.providers:
                known = ", ".join(sorted(self.providers)) or "none"
                raise ModelError(f"unknown provider {provider_id!r} (configured: {known})")
            self._models[model] = provider_id

    def resolve(self, model: str | None) -> tuple[Provider, str]:
        """The provider and model id for a request's `model` (None or '' means the default)."""
        name = model or self.default_model
        with self._lock:
            provider_id = self._models.get(name) if name else None
        if provider_id is None:
            known = ", ".join(sorted(self._models)) or "none"
            raise ModelError(f"no provider serves model {name!r} (served: {known})")
        return self.providers[provider_id], name

    def load(self, model: str, provider_id: str) -> str:
        """The one rule for a request's load (the UI's model picker, POST /v1/models); returns the served name.

        A served model is answered as it is; otherwise the operator's policy decides, the provider loads it
        (a local one) or checks its server has it (a remote one), and it is served by the name returned
        and (a model loaded here, when that name is free) by the one asked for.
        """
        provider = self.providers.get(provider_id)
        if provider is None:
            known = ", ".join(sorted(self.providers)) or "none"
            raise ModelError(f"unknown provider {provider_id!r} (configured: {known})")
        if (provider_id, model) in self.models():
            return model
        if not self.loading.allow_requests:
            raise LoadingRefused(DISABLED)
        name = provider.add_model(model, self.loading)
        owners = {m: pid for pid, m in self.models()}
        if owners.get(name, provider_id) != provider_id:
            raise ParameterError(f"model {name!r} is already served by provider {owners[name]!r}", field="model")
        self.register_model(name, provider_id)
        if provider.capabilities.model_loading and owners.get(model, provider_id) == provider_id:
            self.register_model(model, provider_id)  # a loaded model answers to the name it was asked by
        return name

    def local_engine(self, model: str | None, what: str) -> Engine:
        """The local engine serving `model` (for `what`: the debugger, /check, /inspect); remote ones refuse by name."""
        provider, model_id = self.resolve(model)
        return local_engine(provider, model_id, what)

    def models(self) -> list[tuple[str, str]]:
        """(provider_id, model) pairs, grouped by provider."""
        with self._lock:
            return sorted((pid, model) for model, pid in self._models.items())
