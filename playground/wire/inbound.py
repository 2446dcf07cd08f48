"""Every request shape -> GenerateParameters: the TGI body, the OpenAI/vLLM chat body, the UI form, the widget.

The TGI body is GenerateParameters itself; the others are mapped here, so a new parameter is added
once (a row in `controls`) rather than once per surface.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import ValidationError, model_validator

from playground.constraints import Constraint
from playground.constraints.schema_check import check_schema
from playground.errors import ConstraintError, ParameterError
from playground.types import ChatCompletionRequest, ChatMessage, GenerateParameters, GrammarType, ProcessorSpec
from playground.types.chat import OpenAISampling, Request
from playground.types.sizes import MAX_SEED
from playground.wire import chat_fields, checks, tools
from playground.wire.controls import BY_NAME, carried_by, sampling_values
from playground.wire.errors import parameter_error
from playground.wire.tool_formats import ToolFormat


def parameters(values: Mapping[str, Any], *, prefix: Sequence[Any] = (), openai: bool = False) -> GenerateParameters:
    """GenerateParameters from mapped values; a range error names the caller's field, never a 500.

    `openai`: the values came in OpenAI's ranges, where frequency_penalty takes -2.0 (TGI's stops short of it)."""
    data = dict(values)
    floor = openai and data.get("frequency_penalty") == -2.0
    if floor:
        del data["frequency_penalty"]
    try:
        params = GenerateParameters.model_validate(data)
    except ValidationError as exc:
        raise parameter_error(exc, prefix=prefix) from None
    return params.model_copy(update={"frequency_penalty": -2.0}) if floor else params


def grammar_for(kind: str, text: str, fmt: ToolFormat | None = None) -> GrammarType | None:
    """The request's `grammar` for an editor's (kind, text); a bad constraint raises its typed error.

    `fmt`: the model's tool-call envelope, for the tools kind."""
    if kind in ("none", "processor"):
        return None
    if kind == "tools":
        return tools.ui_grammar(text, fmt)
    return Constraint.parse(kind, text).to_grammar()


# --- the UI form and the widget -------------------------------------------------------------------


def from_controls(
    values: Mapping[str, Any],
    *,
    grammar: GrammarType | None = None,
    processors: Sequence[ProcessorSpec | Mapping[str, Any]] = (),
) -> GenerateParameters:
    """Parameters from a form of controls (UI or widget): neutral values (temperature 1, top_k 0) mean unset.

    As in TGI, a warper that is set samples even when do_sample is off. best_of and max_new_tokens below 1 are
    refused by name, as the API refuses them (0 is no "unset" here).
    """
    for name in ("best_of", "max_new_tokens"):
        if values.get(name) is not None and values[name] < 1:
            raise ParameterError(f"{name}: must be at least 1, got {values[name]}", field=name)
    if (values.get("truncate") or 0) < 0:
        raise ParameterError(f"truncate: must be 0 (off) or more, got {values['truncate']}", field="truncate")
    data: dict[str, Any] = {
        "max_new_tokens": values.get("max_new_tokens"),
        "do_sample": bool(values.get("do_sample")),
        "seed": values.get("seed"),
        "best_of": values["best_of"] if (values.get("best_of") or 1) > 1 else None,
        "top_n_tokens": values.get("top_n_tokens") or None,
        "stop": [line for line in values.get("stop") or [] if line],
        "truncate": values.get("truncate") or None,
        "watermark": bool(values.get("watermark")),
        "adapter_id": (values.get("adapter_id") or "").strip() or None,
        "constraint_engine": values.get("constraint_engine") or "auto",
        "think_first": bool(values.get("think_first")),
        "max_reasoning_tokens": values.get("max_reasoning_tokens"),
        "details": True,
        "grammar": grammar,
        "logits_processors": list(processors),
        **sampling_values(values),
    }
    params = parameters({k: v for k, v in data.items() if v is not None})
    checks.check_best_of(params)  # said before anything is sent, whatever the provider checks
    return params


# --- the OpenAI / vLLM chat body ------------------------------------------------------------------


# OpenAI's response_format.json_schema (vLLM's too)
JSON_SCHEMA_KEYS = frozenset({"name", "description", "schema", "strict"})


class ChatResponseFormat(Request):
    """OpenAI's response_format, and TGI's `{type: json|json_object|regex|json_schema, value}` that
    huggingface_hub's InferenceClient sends."""

    type: Literal["text", "json_object", "json_schema", "json", "regex", "structural_tag"]
    json_schema: dict[str, Any] | None = None
    value: Any = None
    # vLLM's structural_tag: the legacy form (structures, triggers) or xgrammar's (format).
    structures: list[Any] | None = None
    triggers: list[Any] | None = None
    format: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _complete(self) -> ChatResponseFormat:
        if (
            self.type == "json_schema"
            and not (self.json_schema and "schema" in self.json_schema)
            and self.value is None
        ):
            raise ValueError("type 'json_schema' needs json_schema: {name, schema}")
        if (
            self.type == "json_schema"
            and self.json_schema is not None
            and not isinstance(self.json_schema.get("name"), str)
        ):
            # as OpenAI and vLLM refuse it: an app that runs here must not fail there
            raise ValueError("json_schema.name: required (a name for the schema, such as 'answer')")
        unknown = sorted(set(self.json_schema or ()) - JSON_SCHEMA_KEYS)
        if unknown:  # (a misspelt `strict` did nothing, as OpenAI's API refuses it)
            raise ValueError(
                f"json_schema.{unknown[0]}: unknown field (it takes {', '.join(sorted(JSON_SCHEMA_KEYS))})"
            )
        if self.type in ("json", "regex") and self.value is None:
            raise ValueError(f"type {self.type!r} needs a value")
        tag_fields = self.structures is not None or self.triggers is not None or self.format is not None
        if self.type == "structural_tag" and not tag_fields:
            raise ValueError("type 'structural_tag' needs structures and triggers, or format")
        if self.type != "structural_tag" and tag_fields:
            raise ValueError("structures, triggers and format belong to type 'structural_tag'")
        return self


class ChatRequest(ChatCompletionRequest):
    """The chat body we accept: OpenAI's, with vLLM's structured_outputs and TGI's response_format form."""

    response_format: ChatResponseFormat | None = None  # type: ignore[assignment]


def _response_format_grammar(fmt: ChatResponseFormat) -> dict[str, Any] | None:
    if fmt.type == "text":
        return None
    if fmt.type == "structural_tag":
        return {
            "type": "structural_tag",
            "value": fmt.model_dump(exclude_none=True, include={"structures", "triggers", "format"}),
        }
    if fmt.type == "regex":
        return {"type": "regex", "value": fmt.value}
    if fmt.type == "json_schema":
        if fmt.json_schema and "schema" in fmt.json_schema:  # only strict: false lets objects take undeclared keys
            strict, name = fmt.json_schema.get("strict"), fmt.json_schema.get("name")
            return {
                "type": "json_schema",  # TGI's {name, schema} form: the name goes on to servers that read it
                "value": {"schema": fmt.json_schema["schema"], **({"name": name} if isinstance(name, str) else {})},
                "strict": strict if isinstance(strict, bool) else None,
            }
        return {"type": "json_schema", "value": fmt.value}
    return {"type": "json", "value": fmt.value if fmt.value is not None else {"type": "object"}}


_SO_FIELDS = (
    ("json", "json_"),
    ("regex", "regex"),
    ("choice", "choice"),
    ("grammar", "grammar"),
    ("structural_tag", "structural_tag"),
)
_GUIDED_FIELDS = (
    ("guided_json", "json"),
    ("guided_regex", "regex"),
    ("guided_choice", "choice"),
    ("guided_grammar", "grammar"),
)


def constraint_of(req: ChatCompletionRequest) -> dict[str, Any] | None:
    """The grammar a chat request asks for; asking in two places at once is an error naming both."""
    found: list[tuple[str, dict[str, Any] | None]] = []
    if req.response_format is not None and req.response_format.type != "text":
        found.append(("response_format", _response_format_grammar(req.response_format)))  # type: ignore[arg-type]
    so = req.structured_outputs
    if so is not None and so.json_object:
        found.append(("structured_outputs", {"type": "json", "value": {"type": "object"}}))
    elif so is not None and so.constraints:
        kind, value = next((k, getattr(so, a)) for k, a in _SO_FIELDS if getattr(so, a) is not None)
        found.append(("structured_outputs", {"type": kind, "value": value}))
    for field, kind in _GUIDED_FIELDS:
        value = getattr(req, field)
        if value is not None:
            found.append((field, {"type": kind, "value": value}))
    tgi_grammar = getattr(req, "grammar", None)  # TGI's own field, on /v1/completions (huggingface.js sends it)
    if tgi_grammar is not None:
        found.append(("grammar", tgi_grammar.model_dump(exclude_none=True)))
    if len(found) > 1:
        names = ", ".join(name for name, _ in found)
        raise ParameterError(f"{names}: give one constraint, not several", field=found[1][0])
    if so is not None and not so.constraints and not found:
        raise ParameterError(
            "structured_outputs: its options apply to a constraint: give one of json, regex, choice, grammar, "
            "structural_tag, json_object (here or as response_format)",
            field="structured_outputs",
        )
    grammar = found[0][1] if found else None
    whitespace = _whitespace(req)
    if grammar is not None and whitespace is not None and grammar["type"] in ("json", "json_schema"):
        grammar = {**grammar, "whitespace": whitespace}
    return grammar


def _checked_format(req: ChatCompletionRequest) -> dict[str, Any] | None:
    """`constraint_of`; a JSON schema a forced call leaves unused is still checked (OpenAI refuses an invalid one
    whatever the tool choice), its errors naming its own field."""
    other = constraint_of(req)
    if other is None or tools.mode(req) not in ("required", "named"):
        return other
    value = other.get("value")
    if other.get("type") == "json_schema" and isinstance(value, dict):  # TGI's {name, schema} form
        value = value.get("schema")
    if other.get("type") in ("json", "json_schema") and isinstance(value, dict):
        try:
            check_schema(value)
        except ConstraintError as exc:
            exc.field = exc.field or _own_constraint_field(req)
            raise
    return other


def constraint_field(req: OpenAISampling) -> str | None:
    """The field a request's constraint came in (`constraint_of`), which its errors name as their `param`: the tools
    when tool_choice forces a call (a named tool's parameters), else the request's own constraint field."""
    how = tools.mode(req) if isinstance(req, ChatCompletionRequest) else None
    if how == "named":
        named = tools.named_function(req)  # type: ignore[arg-type]
        return f"tools[{[t.function.name for t in req.tools or []].index(named)}].function.parameters"  # type: ignore[attr-defined]
    if how == "required":
        return "tools"
    # auto: a grammar of text or a call, beside the request's own constraint if any (what a remote may not enforce)
    return _own_constraint_field(req) or ("tool_choice" if how == "auto" else None)


def _own_constraint_field(req: OpenAISampling) -> str | None:
    """The field the request's own constraint came in (`constraint_of`'s order)."""
    if getattr(req, "response_format", None) is not None and req.response_format.type != "text":  # type: ignore[attr-defined]
        return "response_format"
    if req.structured_outputs is not None and req.structured_outputs.constraints:  # (options alone: not its field)
        return "structured_outputs"
    guided = next((field for field, _ in _GUIDED_FIELDS if getattr(req, field) is not None), None)
    return guided or ("grammar" if getattr(req, "grammar", None) is not None else None)


def _whitespace(req: ChatCompletionRequest) -> str | None:
    """vLLM's and Outlines' JSON whitespace options as our layout: a pattern, or compact for no free whitespace."""
    so = req.structured_outputs
    if so is not None and so.whitespace_pattern is not None:  # "" too: no whitespace, as Outlines reads it
        return so.whitespace_pattern
    if so is not None and so.disable_any_whitespace:
        return "compact"
    pattern = req.guided_whitespace_pattern
    return pattern if isinstance(pattern, str) else None


def base_seed(req: OpenAISampling) -> int:
    """Choice i is sampled with seed base+i, so each choice is reproducible on its own; -1 is no seed (vLLM's reading:
    clients send it for "random"), another negative seed (OpenAI's is any int64) is taken modulo 2**63, the range of
    TGI's seeds here."""
    if req.seed is None or req.seed == -1:
        return random.randrange(2**31)
    return req.seed % (MAX_SEED + 1)


def final_message(req: ChatCompletionRequest) -> str | None:
    """With continue_final_message, the final assistant message the answer continues (vLLM's semantics)."""
    if not req.continue_final_message:
        return None
    last = req.messages[-1]
    if last.role != "assistant":
        raise ParameterError(
            f"continue_final_message: the final message must be the assistant's, got {last.role!r}",
            field="continue_final_message",
        )
    return last.text()


def prompt_messages(req: ChatCompletionRequest, fmt: ToolFormat | None = None) -> list[ChatMessage]:
    """The messages the chat template renders: without the final one when the answer continues it."""
    return tools.with_tools(req, req.messages[:-1] if req.continue_final_message else req.messages, fmt)


# OpenAI's reasoning_effort as a reasoning budget (max_reasoning_tokens, when both are given, wins).
# "max": the model's own length, as without one.
EFFORT_BUDGETS = {"none": 0, "minimal": 0, "low": 256, "medium": 1024, "high": 4096, "xhigh": 16384, "max": None}


def openai_values(req: OpenAISampling) -> dict[str, Any]:
    """The fields chat and completions share, as GenerateParameters values: temperature 0 is greedy (no warper),
    unset is OpenAI's default 1; zero penalties and vLLM's top_k 0 or -1 mean off."""
    greedy = req.temperature == 0
    sampling = {name: getattr(req, name) for name in carried_by("chat") if not (greedy and BY_NAME[name].warper)}
    return {
        "do_sample": not greedy,
        **{name: value for name, value in sampling.items() if value},
        "top_k": req.top_k if req.top_k and req.top_k > 0 and not greedy else None,
        "repetition_penalty": req.repetition_penalty,
        "presence_penalty": req.presence_penalty or None,
        "logit_bias": req.logit_bias or None,
        "min_tokens": req.min_tokens,
        "stop_token_ids": req.stop_token_ids or None,
        "allowed_token_ids": req.allowed_token_ids or None,
        "bad_words": req.bad_words or None,
        "stop": [req.stop] if isinstance(req.stop, str) else list(req.stop or []),
        "logits_processors": [spec.model_dump() for spec in req.logits_processors],
        "constraint_engine": req.constraint_engine,
        "fast_forward": req.fast_forward,
        "include_stop_str_in_output": req.include_stop_str_in_output or None,
        "return_token_ids": req.return_token_ids or None,
    }


def chat_parameters(req: ChatCompletionRequest, seed: int, fmt: ToolFormat | None = None) -> GenerateParameters:
    """One choice's GenerateParameters; `fmt`: the envelope the model's chat template writes tool calls in."""
    chat_fields.check(req)
    max_new = req.max_completion_tokens or req.max_tokens
    values: dict[str, Any] = {
        **openai_values(req),
        "details": True,
        "min_tokens": max_new if req.ignore_eos else req.min_tokens,
        "max_new_tokens": max_new,
        "seed": seed,
        "top_n_tokens": req.top_logprobs if req.logprobs and req.top_logprobs else None,
        "decoder_input_details": req.prompt_logprobs is not None or None,
        "truncate": req.truncate_prompt_tokens,
        "grammar": tools.grammar(req, _checked_format(req), fmt),
        "tools": tools.template_tools(req, fmt),
        "continue_from": final_message(req),
        "add_generation_prompt": req.add_generation_prompt or bool(req.continue_final_message),
        "chat_template_kwargs": req.chat_template_kwargs,
        "max_reasoning_tokens": req.max_reasoning_tokens
        if req.max_reasoning_tokens is not None
        else EFFORT_BUDGETS.get(req.reasoning_effort or ""),
        "think_first": req.think_first or None,
    }
    return parameters({k: v for k, v in values.items() if v is not None}, openai=True)
