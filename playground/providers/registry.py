"""The model registry: which provider serves which model."""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, cast

from playground.errors import ModelError, ParameterError, ProviderError, UnknownModelError
from playground.providers.base import EngineLender, Provider, local_engine
from playground.providers.loading import DISABLED, LoadingPolicy, LoadingRefused

if TYPE_CHECKING:
    from playground.decoding.engine import Engine
    from playground.providers.startup import Startup

# A provider that could not list its models (down at start: a vLLM still loading its weights) is asked again, at
# most this often, when a request names a model nobody serves.
RELIST_S = 10.0


class Registry:
    """Maps model names to providers; the only shared state besides the loaded models, and locked."""

    def __init__(self, providers: list[Provider], default_model: str | None = None) -> None:
        self._lock = threading.Lock()
        self.providers: dict[str, Provider] = {}
        self._models: dict[str, str] = {}
        self._unlisted: dict[str, float] = {}  # provider id -> when it was last asked for its models, in vain
        # What requests may load at run time; off unless the operator says otherwise.
        self.loading = LoadingPolicy()
        self.startup: Startup | None = None  # the operator's model loading in the background (a Space's cold start)
        self._pending: collections.Counter[str] = collections.Counter()  # names a request's load is loading now
        for provider in providers:
            self.add_provider(provider)
        self.default_model = default_model or next(iter(self._models), None)

    def add_provider(self, provider: Provider) -> None:
        """Add a provider and every model it says it serves; one that cannot say (ProviderError, raised) is asked
        again when a request names a model nobody serves (`resolve`)."""
        with self._lock:
            self.providers[provider.provider_id] = provider
        try:
            models = provider.list_models()
        except ProviderError:
            with self._lock:
                self._unlisted[provider.provider_id] = time.monotonic()
            raise
        for model in models:
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
        if provider_id is None and name:
            provider_id = self._loaded_as(name)
        if provider_id is None and self._pending[name]:
            raise ModelError(f"model {name!r} is still loading: send again once it is served")
        if provider_id is None:
            known = ", ".join([*sorted(self._models), *(adapter for *_, adapter in self.adapters())]) or "none"
            if not name:
                raise ModelError(f"no model named, and no default model: name one of {known}")
            asking = self._list_again()
            later = (
                f"; the models of {asking} are not listed yet (down at start), asked again: retry shortly"
                if asking
                else ""
            )
            raise UnknownModelError(f"no provider serves model {name!r} (served: {known}){later}")
        return self.providers[provider_id], name

    def _loaded_as(self, name: str) -> str | None:
        """The local provider that loaded `name` under another (listed) name: a spelling of its folder."""
        return next(
            (
                provider.provider_id
                for provider in self.providers.values()
                if provider.capabilities.local_engine and cast(EngineLender, provider).known(name) is not None
            ),
            None,
        )

    def _list_again(self) -> str:
        """Ask the providers that could not list their models again (each at most every RELIST_S), on a thread of
        its own: a remote may take its whole timeout, and requests are resolved on the event loop. Their names."""
        now = time.monotonic()
        with self._lock:
            due = [pid for pid, asked in self._unlisted.items() if now - asked >= RELIST_S]
            self._unlisted.update((pid, now) for pid in due)
            waiting = ", ".join(repr(pid) for pid in sorted(self._unlisted))
        if due:
            threading.Thread(target=self._list, args=(due,), name="relist-models", daemon=True).start()
        return waiting

    def _list(self, provider_ids: list[str]) -> None:
        for provider_id in provider_ids:
            try:
                models = self.providers[provider_id].list_models()
            except ProviderError:
                continue  # still down: asked again later
            with self._lock:
                for model in models:
                    self._models.setdefault(model, provider_id)  # (a name served meanwhile keeps its provider)
                self._unlisted.pop(provider_id, None)

    def load(self, model: str, provider_id: str) -> str:
        """The one rule for a request's load (the UI's model picker, POST /v1/models); returns the served name.

        A served model is answered as it is; otherwise the operator's policy decides, the provider loads it
        (a local one) or checks its server has it (a remote one), and it is listed by the name returned: a model
        loaded here answers to every spelling of its folder too (`resolve`), each listed once, not per spelling.
        """
        provider = self.providers.get(provider_id)
        if provider is not None and (provider_id, model) in self.models():
            return model
        if not self.loading.allow_requests:  # the same 403 whatever the request names, providers included
            raise LoadingRefused(DISABLED)
        if provider is None:
            known = ", ".join(sorted(self.providers)) or "none"
            raise ModelError(f"unknown provider {provider_id!r} (configured: {known})")
        with self._lock:
            self._pending[model] += 1
        try:
            name = provider.add_model(model, self.loading)
        finally:
            with self._lock:
                self._pending[model] -= 1
                if self._pending[model] <= 0:
                    del self._pending[model]
        owners = {m: pid for pid, m in self.models()}
        if owners.get(name, provider_id) != provider_id:
            raise ParameterError(f"model {name!r} is already served by provider {owners[name]!r}", field="model")
        self.register_model(name, provider_id)
        return name

    def adapter(self, name: str) -> tuple[Provider, str, str] | None:
        """A request's `model` that names an adapter a local model lists (`--adapters`), as vLLM serves a LoRA by its
        name and TGI's chat reads `model` as `adapter_id`: (provider, the model it belongs to, the adapter as listed)."""
        listing = []
        for provider, engine in self._lent_engines():
            try:
                listed = engine.adapters.listed(name)
            except ParameterError:
                continue
            listing.append((provider, engine))
        if not listing:
            return None
        provider, engine = _owner(listing, listed)
        return provider, engine.model_id, listed

    def adapters(self) -> list[tuple[str, str, str]]:
        """(provider_id, model, adapter) for each adapter a loaded local model lists (`--adapters`), once, under the
        model it belongs to (as vLLM lists a LoRA with its base model as parent)."""
        listing: dict[str, list[tuple[Provider, Engine]]] = {}
        for provider, engine in self._lent_engines():
            for adapter in sorted(engine.adapters.allowed):
                listing.setdefault(adapter, []).append((provider, engine))
        owners = {adapter: _owner(lenders, adapter) for adapter, lenders in listing.items()}
        return [(provider.provider_id, engine.model_id, adapter) for adapter, (provider, engine) in owners.items()]

    def _lent_engines(self) -> list[tuple[Provider, Engine]]:
        """The loaded local engines that list adapters (not a library's, which takes any), the default model's first."""
        lenders = [cast(EngineLender, p) for p in self.providers.values() if p.capabilities.local_engine]
        default = {lender.known(self.default_model) for lender in lenders} if self.default_model else set()
        lent = [(lender, e) for lender in lenders for e in lender.loaded_engines() if e.adapters.allowed]
        return sorted(lent, key=lambda pair: pair[1].model_id not in default)

    def local_engine(self, model: str | None, what: str) -> Engine:
        """The local engine serving `model` (for `what`: the debugger, /check, /inspect); remote ones refuse by name."""
        provider, model_id = self.resolve(model)
        return local_engine(provider, model_id, what)

    def context_lengths(self) -> dict[str, int]:
        """Each loaded local model's context (vLLM's max_model_len in /v1/models), by the names it is served as; a
        model still loading or served remotely is left out (its provider would have to be asked)."""
        engines = {
            (lender.provider_id, engine.model_id): engine
            for lender in (cast(EngineLender, p) for p in self.providers.values() if p.capabilities.local_engine)
            for engine in lender.loaded_engines()
        }
        lengths = {}
        for pid, model in self.models():
            lender = cast(EngineLender, self.providers[pid])
            engine = engines.get((pid, lender.known(model) or model)) if lender.capabilities.local_engine else None
            if engine is not None:
                lengths[model] = lengths[engine.model_id] = engine.max_total_tokens
        return lengths

    def models(self) -> list[tuple[str, str]]:
        """(provider_id, model) pairs, grouped by provider."""
        with self._lock:
            return sorted((pid, model) for model, pid in self._models.items())


def _owner(lenders: list[tuple[Provider, Engine]], adapter: str) -> tuple[Provider, Engine]:
    """The model an adapter belongs to: the one it was made for, else one of its shapes, else the first (the
    default model where it lists the adapter)."""
    if len(lenders) == 1:  # the usual case, one model listing it: nothing to read
        return lenders[0]
    return max(lenders, key=lambda pair: pair[1].adapters.fit(adapter))
