"""Handlers of the controls around the chat: constraint editor, model picker, code tab, session file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from playground import render
from playground.constraints import check_constraint
from playground.constraints.examples import EXAMPLES, find_example
from playground.errors import ModelError, PlaygroundError
from playground.processors import list_factories
from playground.providers.base import local_engine
from playground.providers.loading import looks_like_path
from playground.providers.registry import Registry
from playground.ui import snippets
from playground.ui.downloads import Downloads
from playground.ui.examples import PROCESSOR_PARAMS
from playground.ui.handlers import error_message, tool_format
from playground.ui.state import (
    ChatState,
    Form,
    UISettings,
    chat_inputs,
    drawn_seed,
    empty_constraint,
    export_session,
    import_session,
    params_of,
)
from playground.wire import tools

Progress = Callable[..., object]


# --- constraint editor ---------------------------------------------------------------------------


def constraint_status(kind: str, text: str | None) -> str:
    """The live check under the editor: the constraint's own error message, or that it is valid.

    It runs on every keystroke, so it never raises: whatever the checker trips over is the message.
    """
    if kind in ("none", "processor"):
        return ""
    if not (text or "").strip():
        return render.box("warn", f"✗ {empty_constraint(kind)}", elem_class="pg-constraint-bad")
    try:
        problem = tools.problem(text or "") if kind == "tools" else check_constraint(kind, text or "")
    except Exception as exc:  # noqa: BLE001 - a live check shows the problem instead of a Gradio error
        problem = error_message(exc)
    return render.constraint_status(kind, problem)


def example_for(kind: str, title: str | None) -> tuple[str, str]:
    """(constraint text, a message that fits it) for an example; empty for kinds without examples."""
    example = find_example(kind, title)
    return (example.text, example.message) if example else ("", "")


def suggested_message(current: str | None, example_message: str) -> str:
    """The chat input after picking an example: its message, unless the user typed something of their own."""
    current = current or ""
    if not current.strip() or current in {e.message for examples in EXAMPLES.values() for e in examples}:
        return example_message or current
    return current


def processor_choices() -> list[tuple[str, str]]:
    """Registered processors as (label, name) pairs for the dropdown."""
    return [(info.name + (" (built-in)" if info.builtin else ""), info.name) for info in list_factories()]


def processor_help(name: str | None) -> tuple[str, str]:
    """(description html, starting params) of a registered processor."""
    for info in list_factories():
        if info.name == name:
            text = info.description or "no description"
            return render.box("muted", text), PROCESSOR_PARAMS.get(info.name, "")
    return render.box("warn", "pick a registered processor"), ""


# --- models --------------------------------------------------------------------------------------


def model_choices(registry: Registry, current: str | None = None) -> list[tuple[str, str]]:
    """Every served model once, as (provider · model, model), grouped by provider.

    A model a local provider serves under two names (`embedded` and its id, a path and its id) is listed
    by one: `current` (the picker's), else the default model, else its id.
    """
    served = registry.models()
    if current and current not in {model for _, model in served}:
        try:  # the name picked is another spelling of a loaded model (listed once): the picker keeps showing it
            served = [*served, (registry.resolve(current)[0].provider_id, current)]
        except ModelError:
            pass
    names: dict[tuple[str, str], list[str]] = {}
    for provider_id, model in served:
        names.setdefault((provider_id, _model_id(registry, model)), []).append(model)
    preferred = (current, registry.default_model)
    choices = []
    for (provider_id, model_id), group in names.items():
        shown = next((name for name in (*preferred, model_id) if name in group), group[0])
        choices.append((f"{provider_id} · {shown}", shown))
    return choices


def _model_id(registry: Registry, name: str) -> str:
    """The id a local provider serves `name` as (neither a remote provider nor a model still loading is asked:
    that would be a request, or a wait)."""
    provider, _ = registry.resolve(name)
    loading = registry.startup is not None and not registry.startup.ready() and name == registry.startup.name
    if loading or not provider.capabilities.model_loading:  # asking a loading model would wait for it
        return name
    try:
        return provider.info(name).model_id
    except Exception:  # noqa: BLE001 - a model the provider cannot describe is listed by its own name
        return name


def model_status(registry: Registry, name: str) -> str:
    """What the picked model is and where it runs."""
    provider, model_id = registry.resolve(name)
    info = provider.info(model_id)
    where = f" on {info.device}" if info.device else ""
    kinds = ", ".join(sorted(provider.capabilities.constraint_kinds))
    text = (
        f"✓ {model_id}{where} · provider {info.provider_id} ({info.provider_type}) · "
        f"context {info.max_total_tokens} tokens · best_of ≤ {info.max_best_of} · enforces {kinds}"
    )
    return render.box("ok", text, elem_class="pg-model-ok")


def choose_model(registry: Registry, name: str, settings: UISettings, progress: Progress | None = None) -> str:
    """Use a served model, or load a hub id / local path into the local provider; returns the status."""
    name = (name or "").strip()
    if not name:
        raise ModelError("type a hub id or a local path, or pick a served model")
    if name in {model for _, model in registry.models()}:
        return model_status(registry, name)
    if not settings.allow_model_loading:
        raise ModelError(f"model {name!r} is not served here and loading other models is disabled")
    if not settings.allow_local_paths and looks_like_path(name):
        raise ModelError("local paths are disabled here; type a hub id")
    if progress is not None:
        progress(0.1, desc=f"loading {name} …")
    _load_local(registry, name, settings)
    if progress is not None:
        progress(1.0, desc=f"{name} ready")
    return model_status(registry, name)


def _load_local(registry: Registry, name: str, settings: UISettings) -> None:
    """Load into the registry's local provider (one is added when none is configured) and serve it."""
    from playground.options import LocalOptions
    from playground.providers.local import make_local

    local = next((p for p in registry.providers.values() if p.capabilities.model_loading), None)
    if local is None:
        local = make_local(settings.local or LocalOptions(adapters=()))
        registry.add_provider(local)
    registry.load(name, local.provider_id)


# --- code tab ------------------------------------------------------------------------------------


def code_snippets(registry: Registry, form: Form, state: ChatState, settings: UISettings) -> dict[str, str]:
    """Snippets for the current settings and the last request's conversation (or an example turn)."""
    fmt = tool_format(registry, form)
    params = params_of(form, fmt=fmt)
    used = drawn_seed(state.result)
    if params.seed is None and params.sampling and used is not None:
        params = params.model_copy(update={"seed": used})  # the seed the sampled turn drew, as the Share link pins it
    provider, model = registry.resolve(form.model)
    if state.request is not None:
        inputs, typed = state.request.inputs, state.request.typed
    else:  # none yet: the kind's example
        _, message = example_for(form.kind, None)
        system = tools.ui_system(form.kind, form.constraint_text, form.system_prompt, fmt)
        inputs = chat_inputs(system, state.messages, message or "Hello!")
        typed = chat_inputs(form.system_prompt, state.messages, message or "Hello!")
    opened = 0  # tokens of a reasoning start the chat turn writes first: /generate's prompt ends with them
    if provider.capabilities.local_engine:
        prompt, opened = local_engine(provider, model, "the /generate snippet").generate_prompt(inputs, params)
    elif state.result is not None and state.request is not None:
        prompt = state.result.prompt
    else:  # a remote model's template is its server's: /generate gets the last message as it was typed
        prompt = inputs[-1].content if isinstance(inputs[-1].content, str) else ""
    given = tools.from_text(form.constraint_text) if form.kind == "tools" else None
    return snippets.snippets(
        settings.base_url,
        model,
        inputs,
        prompt,
        params,
        given,
        typed if given is not None else None,
        opened,
        settings.keyed,
        chosen_seed=state.result.best.seed if state.result is not None and used == params.seed else None,
    )


# --- session -------------------------------------------------------------------------------------


def export_file(form: Form, state: ChatState, downloads: Downloads, client: str = "") -> str:
    """Write the session JSON to a file the browser downloads (`client`: whose export, for its share of the bound)."""
    return downloads.write({"playground-session.json": export_session(form, state)}, client)[0]


def import_file(path: str | None, current_mode: str = "constrained") -> tuple[Form, ChatState]:
    """Read a session file back: its settings and its conversation."""
    if not path:
        raise PlaygroundError("choose a session .json file to import")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaygroundError(f"cannot read the session file: {exc}") from None
    form, messages = import_session(text)
    return form, ChatState(messages=messages, mode=current_mode)
