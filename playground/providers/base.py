"""The one small contract that the local engine and every remote server implement."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from playground.providers.loading import LoadingPolicy
from playground.types import (
    ChatMessage,
    GenerateParameters,
    GenerationResult,
    NextTokenDistribution,
    TokenEvent,
)

Inputs = str | list[ChatMessage]
ALL_KINDS = frozenset({"json_schema", "regex", "choice", "grammar"})


@dataclass(frozen=True)
class Capabilities:
    """What a provider can do: callers branch on these, never on a provider's name or class."""

    streaming: bool = True  # token events as they are decoded
    raw_logprobs: bool = False  # the model's own distribution next to the constrained one
    next_token_view: Literal["constrained", "unconstrained"] | None = "unconstrained"
    constraint_kinds: frozenset[str] = ALL_KINDS  # the kinds it enforces (others are refused, by name)
    best_of: bool = True  # several candidates in one request
    model_loading: bool = False  # loads a model by name at run time (hub id, folder, .gguf)
    decodes_here: bool = False  # decoding runs in this process: a stream that stops frees the CPU

    def as_json(self) -> dict[str, object]:
        """For /info: plain JSON values."""
        return {**self.__dict__, "constraint_kinds": sorted(self.constraint_kinds)}


class ModelInfo(BaseModel):
    """What /info reports about one served model."""

    model_id: str
    provider_id: str
    provider_type: str
    max_input_tokens: int
    max_total_tokens: int
    max_best_of: int = 4
    max_stop_sequences: int = 4
    max_top_n_tokens: int = 20
    model_sha: str | None = None
    device: str | None = None
    compile_limits: dict[str, float | int] | None = None  # local engines: timeout_s, memory_mb, workers
    prefix_cache: dict[str, int | str] | None = None  # local engines: budget, bytes held (coarse), scope "client"
    batch: dict[str, int] | None = None  # local engines: scheduler.usage() and batch_weights_mb


class SimpleToken(BaseModel):
    """TGI's SimpleToken, for /tokenize."""

    id: int
    text: str
    start: int
    stop: int


@runtime_checkable
class Provider(Protocol):
    """A source of generations. Remote providers write the constraint into their request."""

    provider_id: str
    provider_type: str
    capabilities: Capabilities

    def list_models(self) -> list[str]: ...

    def add_model(self, model: str, policy: LoadingPolicy | None = None) -> str:
        """Serve `model` from now on (load it, or check the server has it); returns the name it is served by.

        `policy` is given for a request's load (the UI's picker, POST /v1/models): the operator's rules for
        what requests may load. None is the operator's own load (--model, the providers file).
        """
        ...

    def info(self, model: str) -> ModelInfo: ...

    def generate(self, model: str, inputs: Inputs, params: GenerateParameters) -> GenerationResult: ...

    def stream(
        self, model: str, inputs: Inputs, params: GenerateParameters
    ) -> Iterator[TokenEvent | GenerationResult]: ...

    def next_token(
        self, model: str, inputs: Inputs, params: GenerateParameters, *, prefix: str = "", top_k: int = 20
    ) -> NextTokenDistribution: ...

    def tokenize(self, model: str, text: str) -> list[SimpleToken]: ...
