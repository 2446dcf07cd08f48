"""remote::tgi: text-generation-inference. A plain prompt goes to /generate, messages to its chat route.

TGI's `grammar` knows json and regex: a choice list is sent as a regex alternation of the escaped
choices; a Lark grammar has no TGI counterpart and is refused. Our parameters are TGI's, so /generate
gets them nearly unchanged (`details` is always on: the finish reason only comes with it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field

from playground.constraints import Constraint
from playground.errors import ParameterError
from playground.providers import mapping
from playground.providers.base import Capabilities, Inputs, SimpleToken
from playground.providers.openai_compat import OpenAICompatProvider, refuse_constrained_view
from playground.providers.remote import RemoteConfig, RemoteProvider
from playground.types import GenerateParameters, GenerationResult, ModelInfo, NextTokenDistribution, Token, TokenEvent
from playground.types.base import FIT_CONTEXT
from playground.wire import outbound


class TGIConfig(RemoteConfig):
    """remote::tgi: base_url is the server's root (http://host:8080), not /v1."""

    max_top_n_tokens: int = Field(default=5, ge=0, description="TGI's --max-top-n-tokens (default 5).")


class TGIChat(OpenAICompatProvider):
    """TGI's /v1/chat/completions: `response_format` is TGI's GrammarType; one choice only."""

    provider_type: ClassVar[str] = "remote::tgi"
    capabilities: ClassVar[Capabilities] = Capabilities(
        constraint_kinds=frozenset({"json_schema", "regex", "choice"}), best_of=False
    )

    def constraint_fields(self, constraint: Constraint) -> dict[str, Any]:
        grammar = outbound.tgi_grammar(constraint, self.who)
        return {"response_format": grammar} if grammar else {}

    def check_parameters(self, params: GenerateParameters) -> None:
        super().check_parameters(params)
        if params.logit_bias:  # its spec's field is a list of numbers, marked UNUSED: a map is refused or ignored
            raise ParameterError(
                f"logit_bias is not supported by {self.who}: TGI's chat route does not use it",
                field="parameters.logit_bias",
            )
        if (params.best_of or 1) > 1:
            raise ParameterError(
                f"best_of > 1 with chat messages is not supported by provider {self.provider_id!r} (TGI's chat "
                "route returns one choice); send a plain prompt to use /generate",
                field="parameters.best_of",
            )


class TGIProvider(RemoteProvider):
    """A TGI server (or another playground, which speaks the same routes)."""

    provider_type: ClassVar[str] = "remote::tgi"
    config_class: ClassVar[type[RemoteConfig]] = TGIConfig
    dialect: ClassVar[str] = "tgi"
    capabilities: ClassVar[Capabilities] = Capabilities(
        constraint_kinds=frozenset({"json_schema", "regex", "choice"}), prompt_logprobs="unstreamed"
    )

    def __init__(self, provider_id: str, config: RemoteConfig, *, declared: list[str] | None = None) -> None:
        super().__init__(provider_id, config, declared=declared)
        chat_config = config.model_copy(update={"base_url": config.base_url.rstrip("/") + "/v1"})
        self.chat = TGIChat(provider_id, chat_config)

    def served_models(self) -> list[str]:
        reply = self.client.get("info")
        with self.client.malformed("/info"):
            return [str(reply.data["model_id"])]

    def info(self, model: str) -> ModelInfo:
        if model not in self._info:
            reply = self.client.get("info")
            with self.client.malformed("/info"):
                data = reply.data
                self._info[model] = self.model_info(
                    model,
                    max_total_tokens=data["max_total_tokens"],
                    max_input_tokens=data.get("max_input_tokens") or data.get("max_input_length"),
                    max_best_of=data.get("max_best_of"),
                    max_stop_sequences=data.get("max_stop_sequences"),
                    model_sha=data.get("model_sha"),
                )
        return self._info[model]

    def generate(self, model: str, inputs: Inputs, params: GenerateParameters) -> GenerationResult:
        if not isinstance(inputs, str):
            return self.chat.generate(model, inputs, params)
        body, constraint = self.payload(inputs, params)
        start = time.perf_counter()
        reply = self.client.post("generate", body)
        total = time.perf_counter() - start
        with self.client.malformed("/generate answer"):
            details = reply.data["details"]
            best = mapping.tgi_sequence(
                reply.data["generated_text"], details, mapping.tgi_tokens(details), params=params, constraint=constraint
            )
            others = [
                mapping.tgi_sequence(
                    s["generated_text"], s, mapping.tgi_tokens(s), params=params, constraint=constraint
                )
                for s in details.get("best_of_sequences") or []
            ]
            prefill = mapping.prefill_tokens(details)
            length = int(reply.headers.get("x-prompt-tokens") or len(prefill))
            ranked = {"prefill": prefill, "server_ranked": True}
            result = self.result(
                model, inputs, [best, *others], constraint, input_length=length, total_s=total, **ranked
            )
        if params.seed is not None and (params.best_of or 1) > 1:  # outbound.tgi_parameters left it out
            result.warnings.append(
                f"seed: {self.who} refuses a seed with best_of > 1, so it was not sent: each candidate drew its own "
                "(each one's seed is in its details)"
            )
        return result

    def stream(self, model: str, inputs: Inputs, params: GenerateParameters) -> Iterator[TokenEvent | GenerationResult]:
        if not isinstance(inputs, str):
            yield from self.chat.stream(model, inputs, params)
            return
        body, constraint = self.payload(inputs, params)
        start, first, tokens, final = time.perf_counter(), 0.0, [], None
        for event in self.client.events("generate_stream", body):
            with self.client.malformed("stream event"):
                token = mapping.tgi_token(event["token"], event.get("top_tokens"))
                final = event if event.get("details") is not None else final
            tokens.append(token)
            first = first or time.perf_counter() - start
            # TGI's own `index` is the token's position; its last event carries the details
            yield TokenEvent(index=0, token=token, last=event.get("details") is not None)
        if final is None:
            raise self.client.fail("the stream ended without its final details (finish reason)")
        with self.client.malformed("final stream event"):
            details = final["details"]
            sequence = mapping.tgi_sequence(
                final["generated_text"], details, tokens, params=params, constraint=constraint
            )
            length, elapsed = int(details.get("input_length") or 0), time.perf_counter() - start
            timing = {"total_s": elapsed, "first_token_s": first, "server_ranked": True}
            yield self.result(model, inputs, [sequence], constraint, input_length=length, **timing)

    def next_token(
        self, model: str, inputs: Inputs, params: GenerateParameters, *, prefix: str = "", top_k: int = 20
    ) -> NextTokenDistribution:
        """A greedy 1-token /generate with top_n_tokens: TGI's real token ids, unconstrained."""
        if not isinstance(inputs, str):
            return self.chat.next_token(model, inputs, params, prefix=prefix, top_k=top_k)
        refuse_constrained_view(self, params)
        wanted = self.top_n(top_k, clamp=True)
        body = {"inputs": inputs + prefix, "parameters": {"max_new_tokens": 1, "details": True, "top_n_tokens": wanted}}
        reply = self.client.post("generate", body)
        with self.client.malformed("/generate answer with top_n_tokens"):
            details = reply.data["details"]
            tops = details.get("top_tokens") or [[]]
            alternatives = [Token.model_validate(t) for t in tops[0]] or [Token.model_validate(details["tokens"][0])]
            return mapping.distribution(prefix, alternatives)

    def tokenize(self, model: str, text: str, params: GenerateParameters | None = None) -> list[SimpleToken]:
        if params is not None and params.truncate == FIT_CONTEXT:  # (as generate refuses it: TGI's is a count)
            raise ParameterError(
                f"truncate -1 is not supported by {self.who}: give a number of tokens", field="truncate"
            )
        truncate = {"parameters": {"truncate": params.truncate}} if params is not None and params.truncate else {}
        reply = self.client.post("tokenize", {"inputs": text, **truncate})
        with self.client.malformed("/tokenize answer"):
            return [SimpleToken.model_validate(t) for t in reply.data]

    def payload(self, prompt: str, params: GenerateParameters) -> tuple[dict[str, Any], Constraint]:
        """TGI's GenerateRequest: our parameters are TGI's, plus the constraint as `grammar`."""
        self.check_parameters(params)
        constraint = Constraint.from_grammar(params.grammar)
        if params.top_n_tokens:
            self.top_n(params.top_n_tokens)
        parameters = outbound.tgi_parameters(params, outbound.tgi_grammar(constraint, self.who))
        return {"inputs": prompt, "parameters": parameters}, constraint

    def close(self) -> None:
        super().close()
        self.chat.close()
