"""A provider that implements only the Provider protocol: the server and UI handlers run on it without a model.

It answers a scripted text, one token per character, and records every call, so a test can assert
exactly what a surface asked for (the parameters, the messages) without decoding anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from playground.constraints import Constraint
from playground.errors import ModelError, UnsupportedConstraintError
from playground.providers.base import Capabilities, Inputs, SimpleToken
from playground.providers.loading import LoadingPolicy
from playground.types import (
    GeneratedToken,
    GenerateParameters,
    GenerationResult,
    ModelInfo,
    NextTokenCandidate,
    NextTokenDistribution,
    Sequence,
    TokenEvent,
)


@dataclass
class Call:
    """One call a surface made: which method, for which model, with what."""

    method: str
    model: str
    inputs: Inputs | None = None
    params: GenerateParameters | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class FakeProvider:
    """Serves `models`; every generation answers `answer` (or raises `error`), judged by its constraint."""

    provider_type = "fake"

    def __init__(
        self,
        answer: str = "yes",
        *,
        provider_id: str = "fake",
        models: tuple[str, ...] = ("fake-model",),
        capabilities: Capabilities | None = None,
        error: Exception | None = None,
        addable: tuple[str, ...] = (),
    ) -> None:
        self.provider_id = provider_id
        self.answer = answer
        self.capabilities = capabilities or Capabilities(next_token_view="constrained")
        self.error = error
        self.models = list(models)
        self.addable = set(addable)
        self.calls: list[Call] = []

    def list_models(self) -> list[str]:
        return list(self.models)

    def add_model(self, model: str, policy: LoadingPolicy | None = None) -> str:
        if model not in self.models and model not in self.addable:
            raise ModelError(f"provider {self.provider_id!r} cannot serve {model!r}")
        self.models.append(model)
        return model

    def info(self, model: str) -> ModelInfo:
        self._check(model)
        return ModelInfo(
            model_id=model,
            provider_id=self.provider_id,
            provider_type=self.provider_type,
            max_input_tokens=1023,
            max_total_tokens=1024,
        )

    def generate(self, model: str, inputs: Inputs, params: GenerateParameters) -> GenerationResult:
        self.calls.append(Call("generate", model, inputs, params))
        return self._result(model, inputs, params)

    def stream(self, model: str, inputs: Inputs, params: GenerateParameters) -> Iterator[TokenEvent | GenerationResult]:
        self.calls.append(Call("stream", model, inputs, params))
        result = self._result(model, inputs, params)
        for token in result.best.tokens:
            yield TokenEvent(index=0, token=token)
        yield result

    def next_token(
        self, model: str, inputs: Inputs, params: GenerateParameters, *, prefix: str = "", top_k: int = 20
    ) -> NextTokenDistribution:
        self.calls.append(Call("next_token", model, inputs, params, {"prefix": prefix, "top_k": top_k}))
        self._check(model)
        if self.capabilities.next_token_view is None:
            raise UnsupportedConstraintError(f"provider {self.provider_id!r} has no next-token view")
        following = self.answer[len(prefix) : len(prefix) + 1] or "<eos>"
        candidates = [
            NextTokenCandidate(id=1, text=following, raw_logprob=-0.5, logprob=0.0, allowed=True),
            NextTokenCandidate(id=2, text="<b>no</b>", raw_logprob=-1.0, logprob=None, allowed=False),
        ]
        return NextTokenDistribution(prefix=prefix, candidates=candidates, mass_kept=0.6, allowed_count=1, vocab_size=2)

    def tokenize(self, model: str, text: str, params: GenerateParameters | None = None) -> list[SimpleToken]:
        kept = params.truncate if params is not None and params.truncate else len(text)
        return [SimpleToken(id=ord(c), text=c, start=i, stop=i + 1) for i, c in enumerate(text)][-kept:]

    # --- helpers ------------------------------------------------------------------------------------

    def _check(self, model: str) -> None:
        if model not in self.models:
            raise ModelError(f"model {model!r} is not served by provider {self.provider_id!r}")

    def _result(self, model: str, inputs: Inputs, params: GenerateParameters) -> GenerationResult:
        self._check(model)
        if self.error is not None:
            raise self.error
        constraint = Constraint.from_grammar(params.grammar)
        tokens = [GeneratedToken(id=ord(c), text=c, logprob=-0.1, raw_logprob=-0.2) for c in self.answer]
        best = Sequence(
            generated_text=self.answer,
            finish_reason="eos_token",
            generated_tokens=len(tokens),
            tokens=tokens,
            seed=params.seed,
            total_logprob=-0.1 * len(tokens),
            validation=constraint.validate(self.answer),
        )
        prompt = inputs if isinstance(inputs, str) else "\n".join(m.text() for m in inputs)
        return GenerationResult(
            model_id=model,
            provider_id=self.provider_id,
            prompt=prompt,
            input_length=len(prompt),
            best=best,
            constraint_kind=constraint.kind,
        )
