"""PEFT adapters (`adapter_id`): only those the operator allows, found and fetched outside the decode lock."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from playground.errors import ModelError, ParameterError, first_line
from playground.models.hub import looks_like_path


class Adapters:
    """The adapters one model may decode with; `allowed` None means any (library use), empty means none."""

    def __init__(self, model: Any, allowed: Collection[str] | None = None) -> None:
        self.model = model
        self.allowed = None if allowed is None else frozenset(allowed)
        self._folders: dict[str, str] = {}
        self._fits: dict[str, int] = {}
        self._resolving = threading.Lock()
        self._peft: Any = None

    def listed(self, adapter_id: str) -> str:
        """The adapter as the operator listed it: every spelling of a listed folder (`lora/`, `./lora`) is it."""
        if self.allowed is None or adapter_id in self.allowed:
            return adapter_id
        spelled = os.path.normpath(os.path.expanduser(adapter_id))
        found = next((a for a in self.allowed if os.path.normpath(os.path.expanduser(a)) == spelled), None)
        if found is None:
            shown = ", ".join(sorted(self.allowed)) or "none; the operator lists them with --adapters"
            raise ParameterError(
                f"adapter_id {adapter_id!r} is not allowed on this server (allowed: {shown})", field="adapter_id"
            )
        return found

    def fit(self, adapter_id: str) -> int:
        """How well a listed adapter fits this model, from files already here (never fetched), read once: 2 made for
        it (its `base_model_name_or_path`), 1 of its shapes, 0 neither or not here to read."""
        if adapter_id not in self._fits:
            self._fits[adapter_id] = _fit(self.model, adapter_id)
        return self._fits[adapter_id]

    def prepare(self, adapter_id: str | None) -> str | None:
        """Before the decode lock: the allowlist, `peft`, and the adapter's files (a folder, the cache or the hub).
        The adapter as listed."""
        if not adapter_id:
            return None
        adapter_id = self.listed(adapter_id)
        try:
            import peft  # noqa: F401
        except ImportError:
            raise ParameterError(
                f"adapter_id {adapter_id!r} needs the `peft` package, which is not installed on this server",
                field="adapter_id",
            ) from None
        with self._resolving:
            if adapter_id not in self._folders:
                self._folders[adapter_id] = _adapter_folder(adapter_id)
        return adapter_id

    @contextlib.contextmanager
    def use(self, adapter_id: str | None) -> Iterator[None]:
        """Under the decode lock: the adapter switched on (injected once, from local files), and off again after."""
        if not adapter_id:
            yield
            return
        adapter_id = self.prepare(adapter_id)
        peft_model = self._injected(adapter_id)
        peft_model.base_model.enable_adapter_layers()
        peft_model.set_adapter(adapter_id)
        try:
            yield
        finally:
            peft_model.base_model.disable_adapter_layers()

    def _injected(self, adapter_id: str) -> Any:
        import peft

        if self._peft is not None and adapter_id in self._peft.peft_config:
            return self._peft
        folder = self._folders[adapter_id]
        try:
            _check_fits(self.model, peft.utils.load_peft_weights(folder, device="cpu"))
            with _rolled_back(self.model, self._peft, adapter_id):
                if self._peft is None:
                    # Injects LoRA layers into the shared model in place; they are switched off between requests.
                    self._peft = peft.PeftModel.from_pretrained(self.model, folder, adapter_name=adapter_id)
                else:
                    self._peft.load_adapter(folder, adapter_name=adapter_id)
        except Exception as exc:  # noqa: BLE001 - whatever PEFT raises, the request is refused and the model kept
            message = exc.message if isinstance(exc, ParameterError) else first_line(exc)
            raise ParameterError(f"cannot load adapter {adapter_id!r}: {message}", field="adapter_id") from None
        return self._peft


# A LoRA weight's axis that meets its layer: (the weight's axis, the layer's attribute of that size).
_MEETS = {
    "lora_A": (1, "in_features"),
    "lora_B": (0, "out_features"),
    "lora_embedding_A": (1, "num_embeddings"),
    "lora_embedding_B": (0, "embedding_dim"),
}


def _check_fits(model: Any, weights: dict[str, Any]) -> None:
    """Refuse a LoRA made for another model before anything is injected: each of its weights must name a layer of
    this model and match its sizes (PEFT finds out only while loading, after injecting)."""
    modules = dict(model.named_modules())
    for key, tensor in weights.items():
        stem, _, part = key.removesuffix(".weight").rpartition(".")
        if part not in _MEETS:
            continue
        name = stem.removeprefix("base_model.model.")
        layer = modules.get(name)
        if layer is None:
            raise ParameterError(f"it has weights for {name!r}, a layer this model does not have")
        axis, wanted = _MEETS[part]
        expected = getattr(layer, wanted, None)
        if expected is not None and tensor.shape[axis] != expected:
            raise ParameterError(
                f"it was made for another model: its {part} for {name!r} has {tensor.shape[axis]} {wanted}, "
                f"this model's {expected}"
            )


def _fit(model: Any, adapter_id: str) -> int:
    folder = _folder_here(adapter_id)
    if folder is None:
        return 0
    try:
        import peft  # (optional on a server: without it no adapter is used, and none fits better than another)

        _check_fits(model, peft.utils.load_peft_weights(folder, device="cpu"))
        base = peft.PeftConfig.from_pretrained(folder).base_model_name_or_path or ""
    except Exception:  # noqa: BLE001 - made for another model, or unreadable: not this model's
        return 0
    same = base and os.path.normpath(os.path.expanduser(base)) == os.path.normpath(
        getattr(model, "name_or_path", "") or ""
    )
    return 2 if same else 1


def _folder_here(adapter_id: str) -> str | None:
    """The adapter's folder on this machine (a folder, or a hub id in the cache), without asking the hub."""
    if os.path.isdir(os.path.expanduser(adapter_id)):
        return os.path.expanduser(adapter_id)
    if looks_like_path(adapter_id):
        return None
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(adapter_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - not in the cache, or not a hub id
        return None


@contextlib.contextmanager
def _rolled_back(model: Any, peft_model: Any, adapter_id: str) -> Iterator[None]:
    """If loading fails halfway, the model as it was: PEFT injects an adapter's layers (randomly initialised) and
    registers its name before it loads the weights, so a failure would leave them in every later request."""
    modules = dict(model.named_modules())
    had_config = hasattr(model, "peft_config")
    try:
        yield
    except BaseException:
        if peft_model is not None:
            if adapter_id in peft_model.peft_config:
                peft_model.delete_adapter(adapter_id)
            peft_model.base_model.disable_adapter_layers()
        for name, module in modules.items():
            parent, _, child = name.rpartition(".")
            if name and getattr(modules[parent], child) is not module:
                setattr(modules[parent], child, module)
        if not had_config and hasattr(model, "peft_config"):
            del model.peft_config
        raise


def missing_folder(adapter_id: str) -> bool:
    """An adapter written as a path (`/x/lora`, `./lora`, `lora/`) where no folder is: never a hub id to look up."""
    return looks_like_path(adapter_id) and not os.path.isdir(os.path.expanduser(adapter_id))


def adapter_problem(adapter_id: str) -> str | None:
    """Why an adapter the operator lists can never load, from its name and this machine alone (the hub is not
    asked): a path to no folder, a folder without PEFT's adapter_config.json, a name that is no hub id."""
    if missing_folder(adapter_id):
        return "no such adapter folder"
    folder = os.path.expanduser(adapter_id)
    if os.path.isdir(folder):
        if not os.path.isfile(os.path.join(folder, "adapter_config.json")):
            return "no adapter_config.json in that folder (not a PEFT adapter)"
        return None
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(adapter_id)
    except HFValidationError as exc:
        return f"not a folder here, nor a hub id ({first_line(exc)})"
    return None


def _adapter_folder(adapter_id: str) -> str:
    """A local folder as it is; a hub id from the cache, or fetched once (fails fast offline)."""
    from playground.models.hub import hub_snapshot

    if missing_folder(adapter_id):
        raise ParameterError(f"cannot load adapter {adapter_id!r}: no such folder on this server", field="adapter_id")
    if os.path.isdir(os.path.expanduser(adapter_id)):
        return str(Path(adapter_id).expanduser().resolve())
    try:
        return hub_snapshot(adapter_id)
    except ModelError as exc:
        raise ParameterError(f"cannot load adapter {adapter_id!r}: {exc.message}", field="adapter_id") from None
