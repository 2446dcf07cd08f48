"""The one small contract that the local engine and every remote server implement."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, cast, runtime_checkable

from pydantic import BaseModel

from playground.errors import ParameterError
from playground.providers.loading import LoadingPolicy
from playground.types import (
    ChatMessage,
    GenerateParameters,
    GenerationResult,
    ModelInfo,
    NextTokenDistribution,
    TokenEvent,
)

if TYPE_CHECKING:
    from playground.decoding.engine import Engine
    from playground.decoding.heartbeat import Heartbeat

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
    local_engine: bool = False  # lends its engine (tokenizer, compiler, masks) and heartbeat: see EngineLender
    # the prompt's logprobs (TGI's decoder_input_details; completions' echo with logprobs): "always", "unstreamed"
    # (TGI refuses them on a stream), or None (an OpenAI-style server carries no such field)
    prompt_logprobs: Literal["always", "unstreamed"] | None = None

    def as_json(self) -> dict[str, object]:
        """For /info: plain JSON values."""
        return {**self.__dict__, "constraint_kinds": sorted(self.constraint_kinds)}


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

    def tokenize(self, model: str, text: str, params: GenerateParameters | None = None) -> list[SimpleToken]:
        """TGI's /tokenize: the text's tokens, the last `params.truncate` of them when set."""
        ...


class EngineLender(Provider, Protocol):
    """A provider whose capabilities say `local_engine`: its models decode in this process.

    It lends each model's engine to what needs the tokenizer and the masks (the debugger, /check, /reason,
    /inspect) and its heartbeat to /health. Callers reach it through `local_engine` and `stalled_s`.
    """

    heartbeat: Heartbeat

    def engine(self, model: str) -> Engine: ...

    def loaded_engines(self) -> list[Engine]: ...

    def known(self, name: str) -> str | None:
        """The id of the loaded model `name` names (its id, another name or spelling of it), else None."""
        ...


def local_engine(provider: Provider, model: str, what: str) -> Engine:
    """The engine behind `model`; a remote model has no masks to show, and the error says so by name."""
    if not provider.capabilities.local_engine:
        raise ParameterError(
            f"model {model!r} is served remotely: {what} needs a local model (provider {provider.provider_id!r}, "
            f"{provider.provider_type}, does not expose its tokenizer and masks)",
            field="model",
        )
    return cast(EngineLender, provider).engine(model)


def stalled_s(provider: Provider) -> float:
    """How long the provider's running work has not moved (0 for one that decodes elsewhere)."""
    if not provider.capabilities.local_engine:
        return 0.0
    return cast(EngineLender, provider).heartbeat.stalled_s()
