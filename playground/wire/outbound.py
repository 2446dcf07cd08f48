"""GenerateParameters -> each server's request body: OpenAI and vLLM chat, TGI /generate, and our own API.

The providers send these bodies and the Code tab prints them, so a snippet is exactly what a provider
would send. A parameter a dialect cannot carry is listed by `unsupported`, and a provider refuses it
by name rather than dropping it.
"""

from __future__ import annotations

from typing import Any

from playground.constraints import Constraint, jsonformat, segments
from playground.errors import UnsupportedConstraintError
from playground.types import GenerateParameters
from playground.wire.controls import BY_NAME, SAMPLING, Dialect, carried_by

# TGI's own GenerateParameters (its OpenAPI schema). Our other fields are extensions no remote server
# reads, so a new one is refused by every remote provider until a dialect here learns to carry it.
TGI_FIELDS = frozenset(
    "adapter_id best_of decoder_input_details details do_sample frequency_penalty grammar max_new_tokens "
    "repetition_penalty return_full_text seed stop temperature top_k top_n_tokens top_p truncate typical_p "
    "watermark".split()
)
EXTENSIONS = tuple(n for n in GenerateParameters.model_fields if n not in TGI_FIELDS and n not in BY_NAME)
_NOT_OPENAI = ("watermark", "truncate", "adapter_id", "decoder_input_details", "return_full_text", *EXTENSIONS)
# Extensions of ours that a dialect's chat body carries by the same name (OpenAI's own, vLLM's).
_VLLM_EXTENSIONS = (
    "presence_penalty",
    "logit_bias",
    "min_tokens",
    "stop_token_ids",
    "include_stop_str_in_output",
    "allowed_token_ids",
    "bad_words",
    "chat_template_kwargs",
    "add_generation_prompt",
)
CARRIED: dict[Dialect, tuple[str, ...]] = {
    "openai": ("presence_penalty", "logit_bias"),
    "vllm": _VLLM_EXTENSIONS,
    "chat": (*_VLLM_EXTENSIONS, "max_reasoning_tokens", "think_first", "fast_forward"),
}
# Fields of ours that a dialect's chat body carries under its own name: vLLM's truncate_prompt_tokens (-1 too).
RENAMED: dict[Dialect, dict[str, str]] = {
    "vllm": {"truncate": "truncate_prompt_tokens"},
    "chat": {"truncate": "truncate_prompt_tokens"},
}
# Non-sampling GenerateParameters fields each dialect has no field for.
_NOT_CARRIED: dict[Dialect, tuple[str, ...]] = {
    # our own chat route: processors and the engine by name (playground_chat_body)
    "chat": tuple(
        n
        for n in _NOT_OPENAI
        if n not in (*CARRIED["chat"], *RENAMED["chat"]) and n not in ("logits_processors", "constraint_engine")
    ),
    "openai": tuple(n for n in _NOT_OPENAI if n not in CARRIED["openai"]),
    "vllm": tuple(n for n in _NOT_OPENAI if n not in (*CARRIED["vllm"], *RENAMED["vllm"])),
    "tgi": EXTENSIONS,
}


def unsupported(dialect: Dialect) -> tuple[str, ...]:
    """GenerateParameters fields a dialect's body cannot carry."""
    return (*_NOT_CARRIED[dialect], *(c.name for c in SAMPLING if dialect not in c.dialects))


def sampling_fields(params: GenerateParameters, dialect: Dialect) -> dict[str, Any]:
    """TGI's parameter names -> OpenAI's; greedy is temperature 0, as OpenAI-style servers read it."""
    fields: dict[str, Any] = {}
    if params.max_new_tokens is not None:
        fields["max_tokens"] = params.max_new_tokens
    if not params.sampling:
        fields["temperature"] = 0.0
    for name in carried_by(dialect):
        value = getattr(params, name)
        if value is not None and not (name == "temperature" and not params.sampling):
            fields[name] = value
    for name in CARRIED.get(dialect, ()):
        value = getattr(params, name)
        if value is not None and value != GenerateParameters.model_fields[name].default:
            fields[name] = value
    for name, theirs in RENAMED.get(dialect, {}).items():
        if getattr(params, name):  # (truncate 0 is off)
            fields[theirs] = getattr(params, name)
    if params.seed is not None:
        fields["seed"] = params.seed
    if params.stop:
        fields["stop"] = list(params.stop)
    return fields


def logprob_fields(params: GenerateParameters, top_n: int | None = None) -> dict[str, Any]:
    """Ask for logprobs when details or alternatives are wanted, or best_of ranks its candidates by their total logprob
    (`top_n`: the count after a server's limit)."""
    fields: dict[str, Any] = {}
    if params.details or params.top_n_tokens or (params.best_of or 1) > 1:
        fields["logprobs"] = True
    if params.top_n_tokens:
        fields["top_logprobs"] = top_n if top_n is not None else params.top_n_tokens
    return fields


def completion_logprob_fields(params: GenerateParameters, top_n: int | None = None) -> dict[str, Any]:
    """logprob_fields as the completions API takes them: `logprobs` is the number of alternatives (0: the chosen
    token's alone)."""
    fields = logprob_fields(params, top_n)
    return {"logprobs": fields.get("top_logprobs", 0)} if fields else {}


# --- constraints ------------------------------------------------------------------------------------

_STRUCTURED = {"json_schema": "json", "regex": "regex", "choice": "choice", "grammar": "grammar"}
_GUIDED = {kind: f"guided_{name}" for kind, name in _STRUCTURED.items()}


def refuse(who: str, constraint: Constraint, why: str) -> UnsupportedConstraintError:
    """The error for a constraint a server cannot enforce; `who` names the provider."""
    return UnsupportedConstraintError(f"{who} cannot enforce a {constraint.kind} constraint: {why}", field="grammar")


ANY_OBJECT = {"type": "object"}  # the schema json_object means


def open_said(constraint: Constraint) -> dict[str, Any]:
    """A schema asked open (strict: false) with `additionalProperties: true` said where it says nothing: vLLM's and
    TGI's engines close such objects (xgrammar's strict mode, Outlines' regexes), which would change the answer."""
    return constraint.schema if constraint.strict else jsonformat.closed(constraint.schema, other_keys=True)


def own_layout(constraint: Constraint, who: str, native: str | None = None) -> None:
    """A server lays JSON out its own way (`native`: the layout it writes, where that is one of ours): a whitespace
    asked for (guided_whitespace_pattern, structured_outputs' whitespace options) that differs is refused, not
    dropped. vLLM's per-request whitespace fields exist but its V1 engines read only the server's own settings."""
    layout = constraint.layout
    if constraint.kind == "json_schema" and layout not in (jsonformat.DEFAULT_LAYOUT, native):
        raise refuse(who, constraint, f"its JSON whitespace is the server's own (asked: {layout!r})")


def openai_response_format(constraint: Constraint, who: str, *, name: str = "output", strict: bool = True) -> dict:
    """OpenAI's response_format: JSON schemas only (a choice would need an object at the root), laid out the
    server's way."""
    if constraint.kind == "none":
        return {}
    if constraint.kind != "json_schema":
        raise refuse(who, constraint, "only json_schema (response_format) is enforced by the OpenAI API")
    own_layout(constraint, who)
    # a schema asked open (strict: false) goes as OpenAI's non-strict json_schema, whatever the provider's default
    return _response_format(constraint.schema, name, strict and constraint.strict)


def _response_format(schema: dict[str, Any], name: str, strict: bool) -> dict[str, Any]:
    if schema == ANY_OBJECT:  # json_object: OpenAI's strict mode would refuse an object without keys
        return {"response_format": {"type": "json_object"}}
    return {
        "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}
    }


def tgi_grammar(constraint: Constraint, who: str) -> dict[str, Any] | None:
    """TGI's GrammarType: json, or regex (a choice list becomes an alternation of the escaped choices)."""
    if constraint.kind == "none":
        return None
    if constraint.kind == "json_schema":
        own_layout(constraint, who, native="compact")  # (Outlines' default whitespace, `[ ]?`, is our compact)
        return {"type": "json", "value": open_said(constraint)}
    if constraint.kind in ("regex", "choice"):
        return {"type": "regex", "value": constraint.engine_input()}
    raise refuse(who, constraint, "TGI's grammar parameter knows only json and regex")


def vllm_structured(constraint: Constraint, *, guided: bool = False, who: str = "vLLM") -> dict[str, Any]:
    """vLLM's structured_outputs (>= 0.10.2) or the older guided_* fields; every kind, sent as text (a schema asked
    open said open)."""
    if constraint.kind == "none":
        return {}
    if constraint.kind == "structural_tag":  # vLLM takes it as a response_format (xgrammar's `format` form)
        if guided:
            raise refuse("a vLLM server before 0.10.2", constraint, "its guided_* fields have no structural tag")
        return {"response_format": segments.to_xgrammar(constraint.schema)}
    value: Any = open_said(constraint) if constraint.kind == "json_schema" else constraint.value
    if constraint.kind == "choice":
        value = list(value)
    own_layout(constraint, who, native="free")  # (xgrammar's any whitespace, its default)
    if guided:
        return {_GUIDED[constraint.kind]: value}
    return {"structured_outputs": {_STRUCTURED[constraint.kind]: value}}


def playground_constraint(constraint: Constraint) -> dict[str, Any]:
    """Our chat route: OpenAI's response_format for a schema (any SDK sends it), vLLM's field for the rest."""
    if constraint.kind == "json_schema":  # its whitespace in the schema's x-guidance options, which we read back
        layout = constraint.layout
        schema = (
            constraint.schema
            if layout == jsonformat.DEFAULT_LAYOUT
            else jsonformat.with_layout(constraint.schema, layout)
        )
        return _response_format(schema, constraint.name or "answer", constraint.strict)
    return vllm_structured(constraint)


# --- whole bodies ----------------------------------------------------------------------------------


def playground_chat_body(model: str, messages: list[dict[str, Any]], params: GenerateParameters) -> dict[str, Any]:
    """The /v1/chat/completions body of this playground for the request (OpenAI names, our extensions)."""
    body: dict[str, Any] = {"model": model, "messages": messages, **sampling_fields(params, "chat")}
    if params.top_n_tokens:
        body.update(logprob_fields(params))
    body.update(playground_constraint(Constraint.from_grammar(params.grammar)))
    if params.logits_processors:
        body["logits_processors"] = [spec.model_dump() for spec in params.logits_processors]
    if params.constraint_engine != "auto":
        body["constraint_engine"] = params.constraint_engine
    return body


def playground_tgi_parameters(params: GenerateParameters) -> dict[str, Any]:
    """This playground's /generate `parameters`, without defaults, so the body shows only what was chosen."""
    data = params.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    data["details"] = True
    return data


def tgi_parameters(params: GenerateParameters, grammar: dict[str, Any] | None) -> dict[str, Any]:
    """A TGI server's GenerateParameters: ours without the extensions, `details` on (the finish reason needs it)."""
    # return_full_text stays here: our answer adds the prompt (convert.py), and the text judged is the answer alone
    parameters = params.model_dump(exclude={"grammar", "return_full_text", *unsupported("tgi")}, exclude_none=True)
    parameters["details"] = True
    if not parameters.get("stop"):
        parameters.pop("stop", None)
    if (params.best_of or 1) > 1:
        # TGI refuses a seed with best_of > 1; each candidate's own seed comes back in its details.
        parameters.pop("seed", None)
    if grammar:
        parameters["grammar"] = grammar
    return parameters
