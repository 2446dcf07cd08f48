"""remote::openai and the chat-completions client that vLLM, TGI's chat route and HF's router share.

Plain OpenAI enforces only JSON schemas (`response_format` json_schema). A choice list is not sent as a
JSON enum: OpenAI's structured outputs need an object at the root, so the answer would be `{"x": ...}`,
not the choice itself; regex, choice and grammar are refused with UnsupportedConstraintError instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field

from playground.constraints import Constraint
from playground.errors import ParameterError, ProviderError, UnsupportedConstraintError
from playground.providers import mapping
from playground.providers.base import Capabilities, Inputs, SimpleToken
from playground.providers.remote import RemoteConfig, RemoteProvider
from playground.types import (
    GeneratedToken,
    GenerateParameters,
    GenerationResult,
    ModelInfo,
    NextTokenDistribution,
    Sequence,
    TokenEvent,
)
from playground.wire import outbound


class OpenAIConfig(RemoteConfig):
    """remote::openai: OpenAI itself by default, or any server that speaks its chat API."""

    base_url: str = "https://api.openai.com/v1"
    api_key_env: str | None = "OPENAI_API_KEY"
    strict: bool = Field(default=True, description="Send json_schema.strict (OpenAI then enforces the schema exactly).")


class OpenAICompatProvider(RemoteProvider):
    """A provider behind POST {base_url}/chat/completions (and {base_url}/completions for a plain prompt, where the
    server has it: `completions_path`) and GET {base_url}/models."""

    provider_type: ClassVar[str] = "remote::openai"
    config_class: ClassVar[type[RemoteConfig]] = OpenAIConfig
    capabilities: ClassVar[Capabilities] = Capabilities(constraint_kinds=frozenset({"json_schema"}))
    chat_path: ClassVar[str] = "chat/completions"
    models_path: ClassVar[str] = "models"
    # Where a plain prompt goes to be read as it is (TGI's /generate reads it so); None: there is no such route (OpenAI's
    # completions serve only legacy models), and it goes to the chat route as one user message.
    completions_path: ClassVar[str | None] = None

    # --- what differs between servers -------------------------------------------------------------

    def constraint_fields(self, constraint: Constraint) -> dict[str, Any]:
        """OpenAI's response_format; subclasses write their own server's field."""
        strict = getattr(self.config, "strict", True)
        return outbound.openai_response_format(constraint, self.who, name=constraint.name or "output", strict=strict)

    def continuation(self, inputs: Inputs, prefix: str) -> dict[str, Any]:
        """Messages that end where the next token is wanted; plain chat APIs can't resume an answer."""
        if prefix:
            raise ParameterError(
                f"{self.who} cannot continue a partial answer, so the "
                "next-token view is only available at the end of the prompt",
                field="prefix",
            )
        return {"messages": mapping.messages_json(inputs)}

    # --- Provider protocol ------------------------------------------------------------------------

    def served_models(self) -> list[str]:
        try:
            reply = self.client.get(self.models_path)
        except ProviderError as exc:
            if " answered HTTP 404" in exc.message and not self.config.base_url.rstrip("/").endswith("/v1"):
                exc.message += " (an OpenAI-compatible base_url ends in /v1, as `vllm serve` prints it)"
                exc.args = (exc.message,)
            raise
        with self.client.malformed("model list"):
            return [str(entry["id"]) for entry in reply.data["data"]]

    def info(self, model: str) -> ModelInfo:
        """The model's context as the server's model list reports it (vLLM's `max_model_len`), else the config's.
        With discovery off, a server without a model list (a chat-only endpoint) leaves the config's: its requests
        must not fail on a route they do not use, nor on a list no client could read (kept as the config's). A list it
        could not give for now (down, 5xx) is asked again."""
        if model in self._info:
            return self._info[model]
        try:
            reply = self.client.get(self.models_path)
        except ProviderError as exc:
            if self.config.discover_models:
                raise
            if exc.upstream not in (404, 405):  # not a missing route: the next request asks again
                return self.model_info(model)
            reply = None
        try:
            with self.client.malformed("model list"):
                listed = [] if reply is None else reply.data["data"]
                entry = next((e for e in listed if e["id"] == self.upstream(model)), {})
                found = self.model_info(model, max_total_tokens=entry.get("max_model_len"))
        except ProviderError:  # a list it answered but no client could read: an answer all the same, kept
            if self.config.discover_models:
                raise
            found = self.model_info(model)
        self._info[model] = found
        return found

    def route(self, inputs: Inputs) -> str:
        """The path a request for these inputs goes to: completions for a plain prompt where the server has them."""
        return self.completions_path if isinstance(inputs, str) and self.completions_path else self.chat_path

    def generate(self, model: str, inputs: Inputs, params: GenerateParameters) -> GenerationResult:
        body, constraint = self.payload(model, inputs, params, stream=False)
        start = time.perf_counter()
        reply = self.client.post(self.route(inputs), body)
        total = time.perf_counter() - start
        with self.client.malformed("chat completion" if self.route(inputs) == self.chat_path else "completion"):
            choices = sorted(reply.data["choices"], key=lambda c: int(c.get("index", 0)))
            usage = reply.data.get("usage") or {}
            single = usage.get("completion_tokens") if len(choices) == 1 else None
            sequences = [
                mapping.openai_sequence(
                    c,
                    mapping.message_text(c),
                    mapping.openai_tokens(c.get("logprobs"), params.top_n_tokens or 0),
                    usage_tokens=single,
                    params=params,
                    constraint=constraint,
                )
                for c in choices
            ]
            input_length = int(usage.get("prompt_tokens") or 0)
            return self.result(model, inputs, sequences, constraint, input_length=input_length, total_s=total)

    def stream(self, model: str, inputs: Inputs, params: GenerateParameters) -> Iterator[TokenEvent | GenerationResult]:
        body, constraint = self.payload(model, inputs, params, stream=True)
        state = _StreamState(time.perf_counter(), params.top_n_tokens or 0)
        for event in self.client.events(self.route(inputs), body):
            with self.client.malformed("stream chunk"):
                fresh = state.take(event)
            yield from fresh
        with self.client.malformed("stream"):
            sequences = state.sequences(self, params, constraint)
            input_length = int(state.usage.get("prompt_tokens") or 0)
            elapsed = time.perf_counter() - state.start
            timing = {"total_s": elapsed, "first_token_s": state.first_token_s}
            yield self.result(model, inputs, sequences, constraint, input_length=input_length, **timing)

    def next_token(
        self, model: str, inputs: Inputs, params: GenerateParameters, *, prefix: str = "", top_k: int = 20
    ) -> NextTokenDistribution:
        """From a greedy 1-token request's top_logprobs: the raw distribution, so no constraint allowed."""
        refuse_constrained_view(self, params)
        wanted = self.top_n(top_k, clamp=True)
        body: dict[str, Any] = {"model": self.upstream(model), "max_tokens": 1, "temperature": 0.0}
        plain = self.route(inputs) == self.completions_path
        if plain:  # the prompt as it is, the answer's start after it
            body.update(prompt=inputs + prefix, logprobs=wanted)
        else:
            body.update(logprobs=True, top_logprobs=wanted, **self.continuation(inputs, prefix))
        reply = self.client.post(self.route(inputs), body)
        with self.client.malformed("completion with logprobs" if plain else "chat completion with logprobs"):
            chosen = mapping.openai_tokens(reply.data["choices"][0]["logprobs"], wanted)[0]
            alternatives = chosen.top_tokens or [chosen]
            return mapping.distribution(prefix, alternatives)

    def tokenize(self, model: str, text: str, params: GenerateParameters | None = None) -> list[SimpleToken]:
        raise ParameterError(
            f"tokenize is not available on {self.who}: OpenAI-compatible chat servers expose no tokenizer",
            field="model",
        )

    # --- request assembly -------------------------------------------------------------------------

    def payload(
        self, model: str, inputs: Inputs, params: GenerateParameters, *, stream: bool
    ) -> tuple[dict[str, Any], Constraint]:
        """The request for these parameters (a completion for a plain prompt where `completions_path` is set, else a
        chat), with the constraint written in this server's field."""
        self.check_parameters(params)
        constraint = Constraint.from_grammar(params.grammar)
        top_n = self.top_n(params.top_n_tokens) if params.top_n_tokens else None
        plain = self.route(inputs) == self.completions_path
        body: dict[str, Any] = {
            "model": self.upstream(model),
            **({"prompt": inputs} if plain else {"messages": mapping.messages_json(inputs)}),
            **outbound.sampling_fields(params, self.dialect),
            **(outbound.completion_logprob_fields if plain else outbound.logprob_fields)(params, top_n),
        }
        if plain:  # no chat template reads a plain prompt: its options mean nothing there, as on a local model
            for name in ("chat_template_kwargs", "add_generation_prompt"):
                body.pop(name, None)
        if (params.best_of or 1) > 1:
            body["n"] = params.best_of
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(self.constraint_fields(constraint))
        return body, constraint


def refuse_constrained_view(provider: RemoteProvider, params: GenerateParameters) -> None:
    """Remote servers report one distribution; which tokens a constraint allows is not knowable from it."""
    constraint = Constraint.from_grammar(params.grammar)
    if constraint.kind != "none":
        raise UnsupportedConstraintError(
            f"{provider.who} reports only the model's top alternatives, not which ones a {constraint.kind} "
            "constraint allows: clear the constraint to see the unconstrained next-token distribution, "
            "or use a local model",
            field="grammar",
        )


class _StreamState:
    """Chat-completion chunks accumulated per choice index, turned into token events as they come."""

    def __init__(self, start: float, top_n: int = 0) -> None:
        self.start = start
        self.top_n = top_n  # the alternatives asked for (the completions API's may hold one more: the chosen)
        self.first_token_s = 0.0
        self.texts: dict[int, list[str]] = {}
        self.tokens: dict[int, list[GeneratedToken]] = {}
        self.finals: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}

    def take(self, chunk: dict[str, Any]) -> list[TokenEvent]:
        """Record one chunk; return its new tokens as events (one per logprobs entry, else per delta)."""
        self.usage = chunk.get("usage") or self.usage
        events: list[TokenEvent] = []
        for choice in chunk.get("choices") or []:
            index = int(choice.get("index", 0))
            content = (choice.get("delta") or {}).get("content") or choice.get("text") or ""  # (chat, completions)
            self.texts.setdefault(index, []).append(content)
            fresh = mapping.openai_tokens(choice.get("logprobs"), self.top_n)
            if not fresh and content:
                fresh = [GeneratedToken(id=mapping.text_id(content), text=content)]
            self.tokens.setdefault(index, []).extend(fresh)
            if choice.get("finish_reason"):
                self.finals[index] = choice
            events.extend(TokenEvent(index=index, token=t) for t in fresh)
        if events and not self.first_token_s:
            self.first_token_s = time.perf_counter() - self.start
        return events

    def sequences(self, provider: RemoteProvider, params: GenerateParameters, constraint: Constraint) -> list[Sequence]:
        if not self.texts:
            raise ValueError("the stream ended without any choice")
        unfinished = sorted(set(self.texts) - set(self.finals))
        if unfinished:
            raise provider.client.fail(f"the stream ended before choice {unfinished[0]} finished (no finish_reason)")
        single = self.usage.get("completion_tokens") if len(self.texts) == 1 else None
        return [
            mapping.openai_sequence(
                self.finals[i],
                "".join(self.texts[i]),
                self.tokens[i],
                usage_tokens=single,
                params=params,
                constraint=constraint,
            )
            for i in sorted(self.texts)
        ]
