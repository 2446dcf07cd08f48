"""The one small contract that the local engine and every remote server implement."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from playground.types import (
    ChatMessage,
    GenerateParameters,
    GenerationResult,
    NextTokenDistribution,
    TokenEvent,
)

Inputs = str | list[ChatMessage]


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

    def list_models(self) -> list[str]: ...

    def info(self, model: str) -> ModelInfo: ...

    def generate(self, model: str, inputs: Inputs, params: GenerateParameters) -> GenerationResult: ...

    def stream(
        self, model: str, inputs: Inputs, params: GenerateParameters
    ) -> Iterator[TokenEvent | GenerationResult]: ...

    def next_token(
        self, model: str, inputs: Inputs, params: GenerateParameters, *, prefix: str = "", top_k: int = 20
    ) -> NextTokenDistribution: ...

    def tokenize(self, model: str, text: str) -> list[SimpleToken]: ...
