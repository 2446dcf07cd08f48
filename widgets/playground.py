"""Playground: constrained generation inside a notebook, on a local model or any configured provider."""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict
from typing import Any

import anywidget
import traitlets
from pydantic import ValidationError

from playground import render
from playground.constraints import backends, check_constraint
from playground.constraints.examples import EXAMPLES
from playground.errors import ParameterError, PlaygroundError
from playground.providers.base import Inputs, Provider
from playground.providers.registry import Registry
from playground.render.debugger import check_summary
from playground.types import ChatMessage, GenerateParameters, GenerationResult, NextTokenDistribution
from playground.wire import inbound
from playground.wire.controls import SAMPLING, spec
from playground.wire.errors import validation_message
from widgets import debugger, evaluation
from widgets.settings import StrictSettings
from widgets.token_view import STATIC, esm, result_payload

log = logging.getLogger(__name__)

KINDS = ["none", "json_schema", "regex", "choice", "grammar"]
_providers: dict[str, tuple[Provider, str]] = {}
_providers_lock = threading.Lock()


def local_provider(model: str = "embedded") -> tuple[Provider, str]:
    """A LocalProvider serving `model` and its model id, loaded once per process so widgets share the weights."""
    with _providers_lock:
        if model not in _providers:
            from playground.providers.local import make_local

            provider = make_local()
            _providers[model] = (provider, provider.add_model(model))
        return _providers[model]


def build_parameters(state: dict[str, Any]) -> GenerateParameters:
    """GenerateParameters from the widget's state; a value out of range names its field."""
    grammar = inbound.grammar_for(state["constraint_kind"], state["constraint_text"])
    return inbound.from_controls(state, grammar=grammar, processors=state["logits_processors"])


def build_inputs(mode: str, prompt: str, system_prompt: str, messages: list[dict[str, Any]]) -> Inputs:
    """A plain prompt, or the chat so far plus the new user message (after an optional system prompt). In chat, no
    new message answers the conversation again: its last answer is regenerated (`regenerating`)."""
    history = messages[:-1] if mode == "chat" and regenerating(prompt, messages) else messages
    if not prompt.strip() and not (mode == "chat" and history):
        raise ParameterError("the prompt is empty: type something to send", field="prompt")
    if mode == "prompt":
        return prompt
    chat = [ChatMessage(role="system", content=system_prompt)] if system_prompt.strip() else []
    for index, message in enumerate(history):
        try:
            chat.append(ChatMessage.model_validate(message))
        except ValidationError as exc:
            errors = [{**e, "loc": ("messages", index, *e["loc"])} for e in exc.errors(include_url=False)]
            raise ParameterError(validation_message(errors), field="messages") from None
    if prompt.strip():
        chat.append(ChatMessage(role="user", content=prompt))
    return chat


def regenerating(prompt: str, messages: list[dict[str, Any]]) -> bool:
    """Run again in chat with no new message: the last answer is asked for again, from the conversation before it."""
    return not prompt.strip() and bool(messages) and messages[-1].get("role") == "assistant"


def _engine_choices() -> list[str]:
    """The constraint engines a run may name: auto, or one this machine has."""
    return ["auto", *backends.names()]


# One synced trait per sampling control of the wire layer's table, at its neutral value ("off").
_SamplingTraits = type(
    "_SamplingTraits",
    (StrictSettings, anywidget.AnyWidget),
    {
        c.name: (traitlets.Int(int(c.neutral)) if c.integer else traitlets.Float(c.neutral)).tag(sync=True)
        for c in SAMPLING
    },
)


class Playground(_SamplingTraits):
    """Pick a constraint, write a prompt or chat, run, and inspect every token of the answer."""

    _esm = esm("playground.js")
    _css = STATIC / "widgets.css"
    _token_view_esm = traitlets.Unicode(esm("token_view.js")).tag(sync=True)

    models = traitlets.List(traitlets.Unicode()).tag(sync=True)
    model = traitlets.Unicode("").tag(sync=True)
    mode = traitlets.Enum(["prompt", "chat"], default_value="chat").tag(sync=True)
    prompt = traitlets.Unicode("").tag(sync=True)
    system_prompt = traitlets.Unicode("").tag(sync=True)
    messages = traitlets.List(traitlets.Dict()).tag(sync=True)
    constraint_kind = traitlets.Enum(KINDS, default_value="none").tag(sync=True)
    constraint_text = traitlets.Unicode("").tag(sync=True)
    constraint_problem = traitlets.Unicode("").tag(sync=True)
    examples = traitlets.Dict().tag(sync=True)
    max_new_tokens = traitlets.Int(40).tag(sync=True)
    do_sample = traitlets.Bool(False).tag(sync=True)
    sampling_controls = traitlets.List([spec(c) for c in SAMPLING]).tag(sync=True)
    seed = traitlets.Int(None, allow_none=True).tag(sync=True)
    best_of = traitlets.Int(1).tag(sync=True)
    top_n_tokens = traitlets.Int(5).tag(sync=True)
    stop = traitlets.List(traitlets.Unicode()).tag(sync=True)
    logits_processors = traitlets.List(traitlets.Dict()).tag(sync=True)
    processor_choices = traitlets.List(traitlets.List(traitlets.Unicode())).tag(sync=True)
    constraint_engine = traitlets.Unicode("auto").tag(sync=True)  # auto, or an engine of `engines`
    engines = traitlets.List(traitlets.Unicode()).tag(sync=True)
    run_requested = traitlets.Int(0).tag(sync=True)
    running = traitlets.Bool(False).tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    result_json = traitlets.Dict().tag(sync=True)
    next_token = traitlets.Dict().tag(sync=True)
    next_token_position = traitlets.Int(-1).tag(sync=True)
    # which best_of candidate the position is in: 0 the answer, k the k-th other, most likely first (as shown)
    next_token_sequence = traitlets.Int(0).tag(sync=True)
    check_text = traitlets.Unicode("").tag(sync=True)
    check_requested = traitlets.Int(0).tag(sync=True)
    check_result = traitlets.Dict().tag(sync=True)
    branches = traitlets.List(traitlets.Dict()).tag(sync=True)
    evaluation_progress = traitlets.Dict().tag(sync=True)

    def __init__(
        self,
        model: str | None = None,
        *,
        provider: Provider | None = None,
        registry: Registry | None = None,
        **traits: Any,
    ) -> None:
        self._registry = registry
        self._provider, model_id, models = self._connect(model, provider, registry)
        self.result: GenerationResult | None = None
        self.distribution: NextTokenDistribution | None = None
        self._last_inputs: Inputs | None = None
        self._last_params: GenerateParameters | None = None
        self._moving = False
        self._shown: tuple[int, int] | None = None  # (candidate, position) of the distribution shown
        self._refuse_unknown(traits)
        super().__init__(models=models, model=model_id, **traits)
        self.engines = _engine_choices()
        self.examples = _examples()
        self.processor_choices = _processor_choices()
        self.constraint_problem = self._problem()
        self._settled = True

    @staticmethod
    def _connect(
        model: str | None, provider: Provider | None, registry: Registry | None
    ) -> tuple[Provider, str, list[str]]:
        """Resolve where generations come from: a registry, one provider, or a local model by name."""
        if registry is not None:  # no model named, and no default (a file without a local model): the first one
            served = [name for _, name in registry.models()]
            chosen, model_id = registry.resolve(model or registry.default_model or (served[0] if served else None))
            return chosen, model_id, [name for _, name in registry.models()]
        if provider is not None:
            served = provider.list_models()
            model_id = model or (served[0] if served else "")
            return provider, model_id, served or [model_id]
        local, model_id = local_provider(model or "embedded")
        return local, model_id, [model_id]

    @traitlets.observe("model")
    def _switch_model(self, change: dict[str, Any]) -> None:
        """A model picked in the widget is resolved again through the registry (the chat is kept)."""
        if self._registry is None or change["old"] == change["new"]:
            return
        try:
            self._provider, _ = self._registry.resolve(change["new"])
            self.error = ""
        except PlaygroundError as exc:
            self.error = render.error_text(exc)

    def _served(self) -> Provider:
        """The current model's provider: a model picked since, that the registry does not serve, is refused here by
        name (ModelError), not sent to the provider of the one before."""
        if self._registry is not None:
            self._provider, _ = self._registry.resolve(self.model)
        return self._provider

    @traitlets.validate("constraint_engine")
    def _known_engine(self, proposal: dict[str, Any]) -> str:
        """An engine this machine lacks is refused when set, not only at the next constrained run."""
        engines = _engine_choices()
        if proposal["value"] not in engines:
            raise traitlets.TraitError(f"constraint_engine {proposal['value']!r} is not one of {', '.join(engines)}")
        return proposal["value"]

    @traitlets.observe("constraint_kind", "constraint_text")
    def _check_constraint(self, _change: dict[str, Any]) -> None:
        """Check the constraint as it is typed, so a bad one is flagged before anything runs; a tested instance's
        verdict was about the constraint before, and goes."""
        self.constraint_problem = self._problem()
        self.check_result = {}

    def _problem(self) -> str:
        if self.constraint_kind == "none":
            return ""
        return check_constraint(self.constraint_kind, self.constraint_text) or ""

    @traitlets.observe("run_requested")
    def _on_run_requested(self, _change: dict[str, Any]) -> None:
        """The run button in the browser increments `run_requested`; its errors show in the widget only."""
        self.run(raise_errors=False)

    @traitlets.observe("check_requested")
    def _on_check_requested(self, _change: dict[str, Any]) -> None:
        """The check button in the browser; a failure shows in the widget."""
        self.error = ""
        try:
            self.check(self.check_text)
        except Exception as exc:  # noqa: BLE001 - the widget is an edge: every failure is shown in it
            self.check_result = {}
            self._fail(exc)

    @traitlets.observe("next_token_position", "next_token_sequence")
    def _on_position(self, _change: dict[str, Any]) -> None:
        """A clicked token asks for the distribution the model saw at that position of its candidate (the browser
        sets both traits at once: the second notice finds the view already there)."""
        if not self._moving and self._shown != (self.next_token_sequence, self.next_token_position):
            self._distribution_at(self.next_token_position)

    def _state(self) -> dict[str, Any]:
        names = (
            "max_new_tokens",
            "do_sample",
            *(c.name for c in SAMPLING),
            "seed",
            "best_of",
            "top_n_tokens",
            "stop",
            "constraint_kind",
            "constraint_text",
            "constraint_engine",
            "logits_processors",
        )
        return {name: getattr(self, name) for name in names}

    def run(self, *, raise_errors: bool = True) -> GenerationResult | None:
        """Generate with the current settings; a failure shows in the widget and is raised (None if not raise_errors)."""
        self.error = ""
        self.running = True
        try:
            params = build_parameters(self._state())
            inputs = build_inputs(self.mode, self.prompt, self.system_prompt, self.messages)
            result = self._served().generate(self.model, inputs, params)
            self._last_inputs, self._last_params = inputs, params
            self.result = result
            self.result_json = result_payload(result)
            self._remember_turn(result)
        except Exception as exc:  # noqa: BLE001 - the widget is an edge: every failure is shown in it
            self._fail(exc)
            if raise_errors:
                raise
            return None
        finally:
            self.running = False
        self._at_position(-1)
        return result

    def _at_position(self, position: int) -> None:
        """Move the next-token view to `position` of the answer (-1: its start) and recompute it."""
        self._moving = True
        try:
            self.next_token_sequence, self.next_token_position = 0, position
        finally:
            self._moving = False
        self._distribution_at(position)

    def _distribution_at(self, position: int) -> None:
        """The distribution the model saw before token `position` of the candidate shown; a failure is shown, not
        raised."""
        if self.result is None or self._last_inputs is None or self._last_params is None:
            return
        self._shown = (self.next_token_sequence, position)
        others = sorted(self.result.best_of_sequences or [], key=lambda s: s.total_logprob, reverse=True)
        candidates = [self.result.best, *others]
        tokens = candidates[min(max(0, self.next_token_sequence), len(candidates) - 1)].tokens[: max(0, position)]
        try:
            self._show_distribution("".join(token.text for token in tokens))
        except PlaygroundError as exc:
            # e.g. a remote provider that can't give a constrained distribution: the answer itself is fine
            self.distribution = None
            self.next_token = {"unavailable": exc.message}
        except Exception as exc:  # noqa: BLE001 - the widget is an edge: every failure is shown in it
            self._fail(exc)

    def _remember_turn(self, result: GenerationResult) -> None:
        """In chat mode the exchange joins the conversation and the input box is cleared; a regenerated answer
        replaces the last one; an answer to a conversation that ends with the user's message follows it."""
        if self.mode != "chat":
            return
        answer = {"role": "assistant", "content": result.generated_text}
        if self.prompt.strip():
            self.messages = [*self.messages, {"role": "user", "content": self.prompt}, answer]
            self.prompt = ""
        elif regenerating(self.prompt, self.messages):
            self.messages = [*self.messages[:-1], answer]
        else:
            self.messages = [*self.messages, answer]

    def _show_distribution(self, prefix: str) -> None:
        """The next-token distribution after `prefix` of the answer, raw against constrained."""
        assert self._last_inputs is not None and self._last_params is not None
        self.distribution = self._provider.next_token(
            self.model, self._last_inputs, self._last_params, prefix=prefix, top_k=12
        )
        self.next_token = debugger.with_reasons(
            self._provider, self.model, self._last_params, prefix, self.distribution
        )

    def _fail(self, exc: Exception) -> None:
        """Show the failure inside the widget; unexpected ones also go to the log with their traceback."""
        if not isinstance(exc, PlaygroundError):
            log.exception("playground widget run failed")
        self.error = render.error_text(exc)

    def check(self, text: str) -> debugger.CheckResult:
        """Test an instance under the current constraint: the first refused token and why, and the verdict."""
        grammar = inbound.grammar_for(self.constraint_kind, self.constraint_text)
        result = debugger.check(self._served(), self.model, grammar, text, "auto")
        self.check_result = {**result.model_dump(mode="json"), "summary": check_summary(result)}
        return result

    def branch(self, position: int, text: str) -> GenerationResult:
        """Continue the last answer from token `position` with `text` forced there; kept in `branches` (show one with
        `TokenView(result)`)."""
        if self.result is None or self._last_inputs is None or self._last_params is None:
            raise ParameterError("run once first: a branch continues the last answer")
        result = debugger.branch(
            self._provider, self.model, self._last_inputs, self._last_params, self.result, position, text
        )
        self.branches = [*self.branches, {"position": position, "text": text, "result": result_payload(result)}]
        return result

    def score(self) -> evaluation.Scored:
        """Every answer the current constraint allows after the current prompt (or the last run's), ranked;
        the result draws itself as the ranked bar chart."""
        if self.prompt.strip() or self._last_inputs is None:
            inputs = build_inputs(self.mode, self.prompt, self.system_prompt, self.messages)
        else:
            inputs = self._last_inputs
        return evaluation.score_on(self._served(), self.model, inputs, build_parameters(self._state()))

    def evaluate(self, prompts: list[str], expected: list[str | None] | None = None) -> evaluation.Evaluation:
        """The current constraint and settings over many prompts (chat mode: each one user message after the
        system prompt), with a progress bar; the result draws its charts and exports JSONL and CSV."""
        if isinstance(prompts, str):  # (it ran one prompt per character)
            raise ParameterError("prompts: a list of prompts, not one string", field="prompts")
        inputs = [build_inputs(self.mode, p, self.system_prompt, []) for p in prompts]

        def progress(done: int, total: int) -> None:
            self.evaluation_progress = evaluation.progress_trait(done, total)

        return evaluation.evaluate_on(
            self._served(), self.model, inputs, build_parameters(self._state()), expected, progress
        )

    def clear(self) -> None:
        """Forget the conversation, the last answer and what was asked of it (a check, branches, an evaluation)."""
        self.messages = []
        self.check_result = {}
        self.branches = []
        self.evaluation_progress = {}
        self.result = None
        self._last_inputs = self._last_params = None
        self.distribution = None
        self.result_json = {}
        self.next_token = {}
        self.error = ""

    def _repr_html_(self) -> str:
        """Static HTML where widgets don't run: the last answer, or the error."""
        if self.error:
            return render.page(render.error_box(self.error))
        if self.result is None:
            return render.page(render.box("muted", "Playground: no answer yet"))
        return render.result_html(self.result)


def _examples() -> dict[str, list[dict[str, str]]]:
    """The library's ready examples per kind the widget can select, the ones the UI's example picker offers."""
    return {kind: [asdict(example) for example in items] for kind, items in EXAMPLES.items() if kind in KINDS}


def _processor_choices() -> list[list[str]]:
    """[name, description, how its params box is read] of every registered logits processor (built-in and from
    plugins): "one text" (a grammar, a schema), or a parameter per line."""
    from playground.processors import list_factories

    return [[info.name, info.description, "one text" if info.one_text else "lines"] for info in list_factories()]
