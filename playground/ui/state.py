"""Per-user data (the form, the conversation, the last result) and turning it into library requests."""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model

from playground.errors import InvalidConstraintError, ParameterError, PlaygroundError
from playground.processors import params_from_text
from playground.render.chat import CONSTRAINT_KEY
from playground.types import ChatMessage, GeneratedToken, GenerateParameters, GenerationResult, ProcessorSpec
from playground.types.sizes import MAX_INPUT_CHARS, MAX_MESSAGES, nth_seed
from playground.ui.examples import SYSTEM_PROMPT
from playground.wire import inbound, tools
from playground.wire.controls import SAMPLING
from playground.wire.errors import parameter_error
from playground.wire.tool_formats import ToolFormat

if TYPE_CHECKING:
    from playground.options import LocalOptions

SESSION_FORMAT = "structured-playground-session"
SESSION_VERSION = 1


@dataclass(frozen=True)
class UISettings:
    """What the operator decides about the UI (on a Space: no local paths, no model loading)."""

    allow_model_loading: bool = True
    allow_local_paths: bool = True
    base_url: str = "http://127.0.0.1:7860"
    keyed: bool = (
        False  # the API wants a key (create_app sets it): the Code tab's snippets read it from the environment
    )
    local: LocalOptions | None = None  # how the models the UI loads are loaded (None: the defaults)
    title: str = "Structured Playground"


class _Controls(BaseModel):
    """Every control besides the sampling ones, which `Form` adds from the wire layer's table."""

    model_config = ConfigDict(extra="forbid")

    model: str = ""
    kind: str = "none"
    constraint_text: str = ""
    processor: str | None = None
    processor_params: str = ""
    system_prompt: str = SYSTEM_PROMPT
    max_new_tokens: int = 64
    do_sample: bool = False
    seed: int | None = None
    best_of: int = 1
    top_n_tokens: int = 5
    stop: str = ""
    truncate: int = 0
    watermark: bool = False
    adapter_id: str = ""
    constraint_engine: str = "auto"
    think_first: bool = False
    max_reasoning_tokens: int | None = None

    @classmethod
    def from_values(cls, values: list[Any] | tuple[Any, ...]) -> Form:
        """From component values in FIELDS order; gr.Number gives floats, blank numbers give None."""
        data = dict(zip(FIELDS, values, strict=True))
        for name in ("model", "constraint_text", "processor_params", "system_prompt", "stop", "adapter_id"):
            data[name] = data[name] or ""  # hidden components send None
        for name in ("max_new_tokens", "best_of", "top_n_tokens", "truncate", *INTEGER_CONTROLS):
            data[name] = int(data[name] or 0)
        data["seed"] = _whole(data["seed"], "seed")
        data["max_reasoning_tokens"] = _whole(data["max_reasoning_tokens"], "max_reasoning_tokens")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise parameter_error(exc) from None

    def values(self) -> list[Any]:
        """Component values in FIELDS order (for importing a session back into the controls)."""
        return [getattr(self, name) for name in FIELDS]


# One field per sampling control, at its neutral value ("off"); a new warper needs no edit here.
Form = create_model(
    "Form",
    __base__=_Controls,
    __doc__="Every control that shapes a request, in the order the layout passes them to handlers.",
    **{c.name: (int if c.integer else float, c.neutral) for c in SAMPLING},  # type: ignore[call-overload]
)
FIELDS: list[str] = list(Form.model_fields)
INTEGER_CONTROLS = tuple(c.name for c in SAMPLING if c.integer)


@dataclass(frozen=True)
class ModelPick:
    """The last model that loaded, so a failed pick puts the picker back on it (`reverting` while it does)."""

    good: str | None = None
    reverting: bool = False


class LastRequest(BaseModel):
    """What the last turn sent, so the next-token view and the code snippets can replay it."""

    model: str
    inputs: list[ChatMessage]
    params: GenerateParameters
    typed: list[ChatMessage] | None = None  # the tools kind's conversation before its tools were described in it


class ChatState(BaseModel):
    """One user's conversation and the last result; lives in gr.State, never in a global."""

    messages: list[dict[str, str]] = Field(default_factory=list)
    result: GenerationResult | None = None
    request: LastRequest | None = None
    mode: str = "constrained"
    markdown: bool = False
    tokens: list[GeneratedToken] = Field(default_factory=list, description="The answer's tokens on screen.")
    running: bool = False
    stop_requested: bool = False
    stop_after: int | None = Field(default=None, description="Tokens on the user's screen when they clicked Stop.")
    answered: bool = Field(
        default=False,
        description="The last turn ended with the whole answer: a Stop from a screen behind it may cut it.",
    )
    chart_asked: bool = Field(
        default=False,
        description="The user asked for a token's next-token chart since the turn started: the answer's own chart, "
        "drawn once the answer is on screen, does not replace it.",
    )
    _scope: str | None = PrivateAttr(default=None)

    def cache_scope(self) -> str:
        """This conversation as a client of the prefix cache (playground.client_scope): its own, made on first use."""
        if self._scope is None:
            self._scope = "ui:" + secrets.token_hex(12)
        return self._scope


def _whole(value: Any, field: str) -> int | None:
    """A text box's whole number (the seed, the reasoning budget); blank means none (a random seed, no budget).
    A text box, not a number box: Gradio's shows a blank number as 0 once rendered, and sends 0."""
    text = str(value if value is not None else "").strip()
    if not text:
        return None
    try:
        return int(text)  # exactly: a 63-bit seed went through a float and came back another seed
    except ValueError:
        pass
    try:
        number = float(text)  # "42.0", as a number box or an old link wrote it
    except ValueError:
        number = math.nan
    if not number.is_integer():
        raise ParameterError(f"{field} must be a whole number >= 0, got {text!r}", field=field)
    return int(number)


def processors_of(form: Form) -> list[ProcessorSpec]:
    """The custom processor chosen in the form, with its params one per line."""
    if form.kind != "processor":
        return []
    if not form.processor:
        raise ParameterError("pick a registered processor for the custom processor kind", field="logits_processors")
    return [ProcessorSpec(name=form.processor, params=params_from_text(form.processor, form.processor_params))]


def empty_constraint(kind: str) -> str:
    """What the status line and a send both say about a constraint editor left empty."""
    return f"the {kind} is empty: type one or pick an example"


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def stop_sequences(text: str) -> list[str]:
    """The stop box's sequences, one per line; `\\n`, `\\t`, `\\r` and `\\\\` in a line are a newline, a tab, a
    carriage return and a backslash (a newline, the commonest stop, cannot be a line of its own)."""
    return [re.sub(r"\\([ntr\\])", lambda m: _ESCAPES[m.group(1)], line) for line in text.splitlines()]


def params_of(form: Form, *, constrained: bool = True, fmt: ToolFormat | None = None) -> GenerateParameters:
    """TGI parameters from the form; neutral slider values (temperature 1, top_k 0, ...) mean unset.

    `fmt`: the model's tool-call envelope, for the tools kind (its template renders the tools)."""
    values = {**form.model_dump(), "stop": stop_sequences(form.stop)}
    if constrained:
        if form.kind not in ("none", "processor") and not (form.constraint_text or "").strip():
            raise InvalidConstraintError(empty_constraint(form.kind))
        grammar = inbound.grammar_for(form.kind, form.constraint_text, fmt)
        params = inbound.from_controls(values, grammar=grammar, processors=processors_of(form))
    else:
        params = inbound.from_controls(values)
    rendered = tools.ui_tools(form.kind, form.constraint_text, fmt)  # the same prompt with or without the constraint
    return params.model_copy(update={"tools": rendered}) if rendered else params


def chat_inputs(system_prompt: str, messages: list[dict[str, str]], user_text: str | None = None) -> list[ChatMessage]:
    """The conversation as chat messages: system prompt first, the new user message last."""
    inputs = [ChatMessage(role="system", content=system_prompt)] if system_prompt.strip() else []
    inputs += [ChatMessage(role=m["role"], content=m["content"]) for m in messages]
    if user_text is not None:
        inputs.append(ChatMessage(role="user", content=user_text))
    return inputs


def export_session(form: Form, state: ChatState) -> str:
    """The conversation and settings as JSON text that import_session reads back."""
    data = {
        "format": SESSION_FORMAT,
        "version": SESSION_VERSION,
        "settings": form.model_dump(),
        "messages": state.messages,
    }
    return json.dumps(data, indent=2, ensure_ascii=False)


def import_session(text: str) -> tuple[Form, list[dict[str, str]]]:
    """Settings and messages from an exported session; any problem is named in the error."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlaygroundError(f"session file is not JSON: {exc}") from None
    except RecursionError:  # `[[[[...]]]]` past Python's recursion limit: a file, a link or an autosave alike
        raise PlaygroundError("session file is nested too deeply to read: not a session file") from None
    if not isinstance(data, dict) or data.get("format") != SESSION_FORMAT:
        raise PlaygroundError(f'not a session file: expected "format": "{SESSION_FORMAT}"')
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise PlaygroundError(
            f"session settings must be an object of settings by name, got {json.dumps(settings)[:40]}"
        )
    try:
        form = Form.model_validate(settings)
    except ValidationError as exc:
        error = parameter_error(exc)
        raise PlaygroundError(f"session settings: {error.message}") from None
    for name, value in form.model_dump().items():  # (a system prompt or constraint of megabytes: no Send could use it)
        if isinstance(value, str) and len(value) > MAX_INPUT_CHARS:
            raise PlaygroundError(f"session setting {name} has {len(value)} characters; at most {MAX_INPUT_CHARS}")
    messages = data.get("messages", [])
    if not isinstance(messages, list) or not all(_is_message(m) for m in messages):
        raise PlaygroundError('session messages must be a list of {"role": "user"|"assistant", "content": str}')
    # a chat's limits, before the page is sent any of it: on what a Retry would send, and the last answers (not
    # sent again: a chat the page made may end with one past the limits the request that made it kept) within as much
    sent = list(messages)
    while sent and sent[-1]["role"] == "assistant":
        sent.pop()
    if len(sent) > MAX_MESSAGES:
        raise PlaygroundError(f"session has {len(sent)} messages to send; a chat takes at most {MAX_MESSAGES}")
    for part, what in ((sent, "messages"), (messages[len(sent) :], "last answers")):
        total = sum(len(m["content"]) for m in part)
        if total > MAX_INPUT_CHARS:
            raise PlaygroundError(f"session {what} hold {total} characters; a chat takes at most {MAX_INPUT_CHARS}")
    return form, [_message(m) for m in messages]


def _message(item: dict[str, Any]) -> dict[str, str]:
    """A stored message: role and content, and the constraint kind an answer was generated under."""
    message = {"role": item["role"], "content": item["content"]}
    if isinstance(item.get(CONSTRAINT_KEY), str):
        message[CONSTRAINT_KEY] = item[CONSTRAINT_KEY]
    return message


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") in ("user", "assistant") and isinstance(item.get("content"), str)


def drawn_seed(result: GenerationResult | None) -> int | None:
    """The seed a turn's request drew (its seed box blank): with best_of, candidate k ran seed base+k, so the base is
    the candidates' first seed in that order (wrapping past the largest), not the winner's."""
    if result is None:
        return None
    candidates = (result.best, *result.best_of_sequences, *result.failed_candidates)
    seeds = {s.seed for s in candidates if s.seed is not None}
    for base in sorted(seeds):
        if {nth_seed(base, k) for k in range(len(seeds))} == seeds:
            return base
    return result.best.seed
