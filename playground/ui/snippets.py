"""Code that reproduces the current request against this server: curl, openai, huggingface_hub, Outlines."""

from __future__ import annotations

import json
import shlex
import urllib.parse
from typing import Any

from playground.types import ChatMessage, GenerateParameters, GrammarType
from playground.wire import outbound
from playground.wire.controls import carried_by
from playground.wire.tools import ToolsConstraint

LANGUAGES = {
    "curl_generate": "shell",
    "curl_chat": "shell",
    "openai": "python",
    "huggingface_hub": "python",
    "outlines": "python",
}


def py(value: Any, indent: int = 0) -> str:
    """A Python literal for `value`, one item per line when it does not fit (dicts keep their order)."""
    flat = repr(value)
    if len(flat) + indent <= 88 or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        items = [f"{pad}{key!r}: {py(item, indent + 4)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + ",\n" + " " * indent + "}"
    items = [pad + py(item, indent + 4) for item in value]
    return "[\n" + ",\n".join(items) + ",\n" + " " * indent + "]"


def chat_messages(inputs: list[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.text()} for m in inputs]


def chat_body(
    model: str, inputs: list[ChatMessage], params: GenerateParameters, tools: ToolsConstraint | None = None
) -> dict[str, Any]:
    """The /v1/chat/completions body equivalent to the request, as the wire layer writes it. The tools kind's
    travel as OpenAI's `tools` and `tool_choice`: the server describes them (or its template renders them) and
    builds their constraint as the UI did, and answers with `tool_calls`."""
    if tools is None:
        return outbound.playground_chat_body(model, chat_messages(inputs), params)
    plain = params.model_copy(update={"grammar": None, "tools": None})
    return {
        **outbound.playground_chat_body(model, chat_messages(inputs), plain),
        **tools.model_dump(mode="json", exclude_none=True),
    }


# Chat body keys the openai SDK has no argument for: they travel in extra_body.
_EXTRA_BODY = {
    "structured_outputs",
    "logits_processors",
    "constraint_engine",
    "truncate_prompt_tokens",
    "tool_prompt",
    *(set(carried_by("chat")) - set(carried_by("openai"))),
    *(set(outbound.CARRIED["chat"]) - set(outbound.CARRIED["openai"])),
}


# Why an OpenAI-route answer can be shorter than the UI's: said at the top of those snippets when stops are set.
STOP_NOTE = "OpenAI's rule: the answer leaves out the stop sequence that ended it (the UI and /generate keep it)"


# Where the snippets read the API key from when the server has one (--api-key): never the key itself, which the
# page would show to anyone looking over the shoulder and a copied snippet would carry around.
KEY_VARIABLE = "PLAYGROUND_API_KEY"


def curl(url: str, body: dict[str, Any], keyed: bool = False) -> str:
    payload = json.dumps(body, indent=2, ensure_ascii=False)
    auth = f'  -H "Authorization: Bearer ${KEY_VARIABLE}" \\\n' if keyed else ""
    return f"curl -s {shlex.quote(url)} \\\n  -H 'Content-Type: application/json' \\\n{auth}  -d {shlex.quote(payload)}"


def _api_key(keyed: bool) -> tuple[str, str]:
    """(import line, the `api_key` argument's expression) of the Python snippets."""
    return ("import os\n", f"os.environ[{KEY_VARIABLE!r}]") if keyed else ("", "'-'")


def openai_snippet(base_url: str, body: dict[str, Any], keyed: bool = False) -> str:
    standard = {k: v for k, v in body.items() if k not in _EXTRA_BODY}
    extra = {k: v for k, v in body.items() if k in _EXTRA_BODY}
    args = ",\n".join(f"    {k}={py(v, 4)}" for k, v in standard.items())
    if extra:
        args += f",\n    extra_body={py(extra, 4)}"
    answer = (
        "message = completion.choices[0].message\nprint(message.tool_calls or message.content)\n"
        if "tools" in body
        else "print(completion.choices[0].message.content)\n"
    )
    imported, key = _api_key(keyed)
    return (
        f"{imported}from openai import OpenAI\n\n"
        f"client = OpenAI(base_url={py(base_url + '/v1')}, api_key={key})\n"
        f"completion = client.chat.completions.create(\n{args},\n)\n{answer}"
    )


def hf_snippet(base_url: str, prompt: str, params: GenerateParameters, model: str = "", keyed: bool = False) -> str:
    data = outbound.playground_tgi_parameters(params)
    extensions = [name for name in outbound.unsupported("tgi") if data.pop(name, None) is not None]
    args = ",\n".join(f"    {k}={py(v, 4)}" for k, v in data.items())
    note = (
        f"# {', '.join(extensions)}: not a text_generation argument; use the curl or openai snippet for them\n"
        if extensions
        else ""
    )
    imported, key = _api_key(keyed)
    keyword = f", api_key={key}" if keyed else ""
    return (
        f"{imported}from huggingface_hub import InferenceClient\n\n"
        f"client = InferenceClient(base_url={py(base_url + '/' + _model_query(model))}{keyword})\n{note}"
        f"output = client.text_generation(\n    {py(prompt)},\n{args},\n)\n"
        "print(output.generated_text)\n"
        "print(output.details.finish_reason, [t.text for t in output.details.tokens])\n"
    )


def _output_type(grammar: GrammarType | None) -> tuple[str, str]:
    """(import line, expression) of the Outlines output type for a constraint."""
    if grammar is None or grammar.type == "structural_tag":  # Outlines has no structural tag: the body carries it
        return "", "None"
    if grammar.type == "json":
        return "from outlines.types import JsonSchema\n", f"JsonSchema({py(grammar.value, 4)})"
    if grammar.type == "regex":
        return "from outlines.types import Regex\n", f"Regex({py(grammar.value)})"
    if grammar.type == "choice":
        return "from outlines.types import Choice\n", f"Choice({py(list(grammar.value))})"
    return "from outlines.types import CFG\n", f"CFG({py(grammar.value)})"


# Chat body fields Outlines sets itself (model, messages, the constraint) or has no use for.
_NOT_OUTLINES_KWARGS = {"model", "messages", "response_format", "structured_outputs", "logprobs", "top_logprobs"}


def outlines_snippet(base_url: str, body: dict[str, Any], grammar: GrammarType | None, keyed: bool = False) -> str:
    imports, output_type = _output_type(grammar)
    kept = {"response_format"} if grammar is not None and grammar.type == "structural_tag" else set()
    kwargs = {k: v for k, v in body.items() if (k not in _NOT_OUTLINES_KWARGS or k in kept) and k not in _EXTRA_BODY}
    extra = {k: v for k, v in body.items() if k in _EXTRA_BODY and k != "structured_outputs"}
    if extra:
        kwargs["extra_body"] = extra
    args = "".join(f"    {k}={py(v, 4)},\n" for k, v in kwargs.items())
    imported, key = _api_key(keyed)
    return (
        f"{imported}import openai\nimport outlines\nfrom outlines.inputs import Chat\n"
        f"{imports}\n"
        f"client = openai.OpenAI(base_url={py(base_url + '/v1')}, api_key={key})\n"
        f"model = outlines.from_vllm(client, {py(body['model'])})\n"
        f"chat = Chat({py(body['messages'])})\n"
        f"answer = model(\n    chat,\n    {output_type},\n{args})\n"
        "print(answer)\n"
    )


# The Outlines tab for the tools kind on a model whose template writes calls in its own envelope.
OUTLINES_NO_TOOLS = (
    "# Outlines' models answer with text and send no `tools`, which this model's chat template needs to write its\n"
    "# calls: the openai snippet sends them and gets the calls back.\n"
)


def snippets(
    base_url: str,
    model: str,
    inputs: list[ChatMessage],
    prompt: str,
    params: GenerateParameters,
    tools: ToolsConstraint | None = None,
    typed: list[ChatMessage] | None = None,
    opened: int = 0,
    keyed: bool = False,
    chosen_seed: int | None = None,
) -> dict[str, str]:
    """Every snippet for one request; `prompt` is the templated text /generate takes, ending with the `opened`
    tokens of a reasoning start that the chat turn writes first. The tools kind's `tools` go in the chat
    snippets' bodies, beside `typed`: the conversation before the UI described the tools in it. `keyed`: the
    server wants an API key, which the snippets read from $PLAYGROUND_API_KEY. `chosen_seed`: with best_of, the
    seed of the candidate the turn chose (candidate k runs the request's seed + k: sizes.nth_seed), which the chat
    snippets send to give that answer without best_of."""
    base = base_url.rstrip("/")
    chat_params = params
    if (params.best_of or 1) > 1 and chosen_seed is not None:
        chat_params = params.model_copy(update={"seed": chosen_seed})
    body = chat_body(model, typed or inputs, chat_params, tools)
    text_body = chat_body(model, inputs, chat_params)  # what Outlines sends: the constraint, on the described messages
    tgi_params, generate_note = _generate_parameters(params, opened)
    tgi_body = {"inputs": prompt, "parameters": tgi_params}
    note = f"# {STOP_NOTE}\n" if params.stop else ""
    set_fields = params.model_dump(exclude_defaults=True, exclude_none=True)
    dropped = [name for name in outbound.unsupported("chat") if name in set_fields]
    if (params.best_of or 1) > 1:  # the candidates and their ranking are TGI's: the chat routes have no best_of
        dropped.append("best_of")
    if dropped:
        note += f"# {', '.join(dropped)}: not a /v1/chat/completions field; the curl /generate snippet carries them\n"
    if chat_params is not params:
        note += (
            f"# seed {chosen_seed}: the chosen candidate's (candidate k runs seed + k, wrapped below 2**63), "
            "so this gives the same answer\n"
        )
    return {
        "curl_generate": generate_note + curl(f"{base}/generate{_model_query(model)}", tgi_body, keyed),
        "curl_chat": note + curl(f"{base}/v1/chat/completions", body, keyed),
        "openai": note + openai_snippet(base, body, keyed),
        "huggingface_hub": hf_snippet(base, prompt, params, model, keyed),
        "outlines": OUTLINES_NO_TOOLS
        if tools is not None and params.tools
        else note + outlines_snippet(base, text_body, params.grammar, keyed),
    }


def _generate_parameters(params: GenerateParameters, opened: int) -> tuple[dict[str, Any], str]:
    """/generate's parameters, and a note when its prompt holds a reasoning start the chat turn wrote (and
    counted in its budget): the budget here is what is left of the turn's."""
    data = outbound.playground_tgi_parameters(params)
    if not opened:
        return data, ""
    note = "# the prompt ends with the reasoning's start, which a chat turn writes as its first token(s)"
    if params.max_reasoning_tokens is None:
        return data, note + "\n"
    data["max_reasoning_tokens"] = max(0, params.max_reasoning_tokens - opened)
    return data, f"{note}: its budget counts them, so max_reasoning_tokens is {opened} less here\n"


def _model_query(model: str) -> str:
    """TGI's routes decode on the server's default model: the query that names the picked one (TGI's body has none)."""
    return f"?model={urllib.parse.quote(model, safe='/:')}" if model else ""
