"""What every remote provider shares: its config, its HTTP client, model names, and parameter checks."""

from __future__ import annotations

import os
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from playground.constraints import Constraint
from playground.errors import ModelError, ParameterError
from playground.providers import mapping
from playground.providers.base import Capabilities, Inputs
from playground.providers.http import RemoteClient
from playground.providers.loading import LoadingPolicy
from playground.types import GenerateParameters, GenerationResult, ModelInfo, Sequence
from playground.types.base import FIT_CONTEXT
from playground.types.sizes import MAX_TOP_N_TOKENS
from playground.wire import checks, outbound


class RemoteConfig(BaseModel):
    """The `config:` of a remote provider in the providers file; a typo is an error, not a no-op."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(
        description="http:// or https:// and a host (a server that can never be asked stops start-up)."
    )
    api_key_env: str | None = Field(default=None, description="Name of the environment variable holding the API key.")
    timeout_s: float = Field(default=60.0, gt=0, le=86_400)  # (past the clock's range a huge one crashed start-up)
    model: str | None = Field(
        default=None, description="A model this provider serves, registered like a `models:` entry."
    )
    model_prefix: str = Field(default="", description="Prepended to this provider's model names in the playground.")
    discover_models: bool = Field(
        default=True, description="Ask the server which models it serves (else: declared only)."
    )
    max_total_tokens: int = Field(
        default=4096, gt=1, description="Context size to show when the server does not report it."
    )
    max_top_n_tokens: int = Field(
        default=MAX_TOP_N_TOKENS, ge=0, description="Most alternatives per token the server returns."
    )

    @field_validator("base_url")
    @classmethod
    def _a_url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// URL with a host: {value!r}")
        try:
            parts.port  # noqa: B018 - read for its check: a port that is no number, or past 65535
            httpx.URL(value.strip())
        except (ValueError, httpx.InvalidURL) as exc:
            raise ValueError(f"not a URL the server can be asked at: {value!r} ({exc})") from None
        return value.strip()


class BadKeyError(ValueError):
    """The API key a provider's api_key_env holds cannot go in an HTTP header."""


class RemoteProvider:
    """Base of the remote providers: names, the HTTP client, and refusing what the server can't honour."""

    provider_type: ClassVar[str] = "remote"
    config_class: ClassVar[type[RemoteConfig]] = RemoteConfig
    # The wire dialect of the server's body: fields it cannot carry are refused, never dropped.
    dialect: ClassVar[str] = "openai"
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, provider_id: str, config: RemoteConfig, *, declared: list[str] | None = None) -> None:
        self.provider_id = provider_id
        self.config = config
        key = os.environ.get(config.api_key_env, "").strip() if config.api_key_env else None
        if key and not (key.isascii() and key.isprintable() and " " not in key):
            # (httpx refused the header and its message quoted the key: in the log and in clients' 502s)
            raise BadKeyError(
                f"the API key in {config.api_key_env} (api_key_env) holds a character an HTTP header cannot carry "
                "(a space, a control or a non-ASCII character)"
            )
        self.key_problem = (
            f"environment variable {config.api_key_env} (api_key_env) is not set; requests go without an API key"
            if config.api_key_env and not key
            else None
        )
        self.client = RemoteClient(provider_id, config.base_url, api_key=key, timeout_s=config.timeout_s)
        names = [config.model, *(declared or [])]
        self.declared: list[str] = list(dict.fromkeys(n for n in names if n))
        self._info: dict[str, ModelInfo] = {}

    @property
    def who(self) -> str:
        """How errors name this provider."""
        return f"provider {self.provider_id!r} ({self.provider_type})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.provider_id!r}, {self.config.base_url!r})"

    # --- model names ------------------------------------------------------------------------------

    def name(self, served: str) -> str:
        """The playground's name for a model the server calls `served`."""
        return self.config.model_prefix + served

    def upstream(self, model: str) -> str:
        """The server's name for the playground's `model`."""
        prefix = self.config.model_prefix
        return model[len(prefix) :] if prefix and model.startswith(prefix) else model

    def served_models(self) -> list[str]:
        """Ask the server which models it serves (its own names)."""
        raise NotImplementedError

    def list_models(self) -> list[str]:
        """Discovered from the server, or the declared models when discovery is off."""
        served = self.served_models() if self.config.discover_models else self.declared
        return [self.name(m) for m in served]

    def serves(self, served: str, listed: list[str]) -> bool:
        """Whether a server name is among the server's listed models."""
        return served in listed

    def add_model(self, model: str, policy: LoadingPolicy | None = None) -> str:
        """Accept a model at run time (named with or without the prefix); returns the playground's name for it.

        Nothing is loaded here, so the loading policy has nothing to decide.
        """
        return self.declare(self.upstream(model))

    def declare(self, served: str) -> str:
        """Accept a model by the server's name, checking the server serves it when it can be asked."""
        if self.config.discover_models:
            listed = self.served_models()
            if not self.serves(served, listed):
                shown = ", ".join(listed[:20]) or "none"
                raise ModelError(f"provider {self.provider_id!r} does not serve model {served!r} (it serves: {shown})")
        if served not in self.declared:
            self.declared.append(served)
        return self.name(served)

    # --- requests ---------------------------------------------------------------------------------

    def check_parameters(self, params: GenerateParameters) -> None:
        """Refuse, by name, any parameter this server would silently ignore."""
        for name in outbound.unsupported(self.dialect):
            value = getattr(params, name)
            if value != GenerateParameters.model_fields[name].get_default(call_default_factory=True):
                raise ParameterError(
                    f"{name} is not supported by {self.who}",
                    field=f"parameters.{name}",
                )
        if params.truncate == FIT_CONTEXT and self.dialect not in outbound.RENAMED:  # TGI's truncate is a count
            raise ParameterError(
                f"truncate -1 (as many of the prompt's last tokens as the context holds) is not supported by "
                f"{self.who}: give a number of tokens",
                field="parameters.truncate",
            )
        checks.check_best_of(params)

    def result(
        self, model: str, inputs: Inputs, sequences: list[Sequence], constraint: Constraint, **timing: Any
    ) -> GenerationResult:
        """The result every surface renders, named as this provider's."""
        return mapping.result(
            model=model,
            provider_id=self.provider_id,
            provider_type=self.provider_type,
            inputs=inputs,
            sequences=sequences,
            constraint=constraint,
            **timing,
        )

    def top_n(self, wanted: int, *, clamp: bool = False) -> int:
        """How many alternatives to ask for; beyond the server's limit is an error unless clamped."""
        limit = self.config.max_top_n_tokens
        if wanted > limit and not clamp:
            raise ParameterError(
                f"top_n_tokens={wanted} exceeds the limit of provider {self.provider_id!r} ({limit})",
                field="parameters.top_n_tokens",
            )
        return min(wanted, limit)

    def model_info(self, model: str, **reported: Any) -> ModelInfo:
        """ModelInfo from what the server reported, with the config's context size where it said nothing."""
        total = int(reported.pop("max_total_tokens", None) or self.config.max_total_tokens)
        fields = {k: v for k, v in reported.items() if v is not None}
        return ModelInfo(
            model_id=model,
            provider_id=self.provider_id,
            provider_type=self.provider_type,
            max_total_tokens=total,
            max_input_tokens=int(fields.pop("max_input_tokens", total - 1)),
            max_top_n_tokens=self.config.max_top_n_tokens,
            **fields,
        )

    def close(self) -> None:
        self.client.close()
