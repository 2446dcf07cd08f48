"""PEFT adapters (`adapter_id`): only those the operator allows, found and fetched outside the decode lock."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from playground.errors import ModelError, ParameterError, first_line


class Adapters:
    """The adapters one model may decode with; `allowed` None means any (library use), empty means none."""

    def __init__(self, model: Any, allowed: Collection[str] | None = None) -> None:
        self.model = model
        self.allowed = None if allowed is None else frozenset(allowed)
        self._folders: dict[str, str] = {}
        self._resolving = threading.Lock()
        self._peft: Any = None

    def prepare(self, adapter_id: str | None) -> None:
        """Before the decode lock: the allowlist, `peft`, and the adapter's files (a folder, the cache or the hub)."""
        if not adapter_id:
            return
        if self.allowed is not None and adapter_id not in self.allowed:
            shown = ", ".join(sorted(self.allowed)) or "none; the operator lists them with --adapters"
            raise ParameterError(
                f"adapter_id {adapter_id!r} is not allowed on this server (allowed: {shown})", field="adapter_id"
            )
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

    @contextlib.contextmanager
    def use(self, adapter_id: str | None) -> Iterator[None]:
        """Under the decode lock: the adapter switched on (injected once, from local files), and off again after."""
        if not adapter_id:
            yield
            return
        self.prepare(adapter_id)
        peft_model = self._injected(adapter_id)
        peft_model.base_model.enable_adapter_layers()
        peft_model.set_adapter(adapter_id)
        try:
            yield
        finally:
            peft_model.base_model.disable_adapter_layers()

    def _injected(self, adapter_id: str) -> Any:
        import peft

        folder = self._folders[adapter_id]
        try:
            if self._peft is None:
                # Injects LoRA layers into the shared model in place; they are switched off between requests.
                self._peft = peft.PeftModel.from_pretrained(self.model, folder, adapter_name=adapter_id)
            elif adapter_id not in self._peft.peft_config:
                self._peft.load_adapter(folder, adapter_name=adapter_id)
        except (OSError, ValueError, KeyError) as exc:
            raise ParameterError(f"cannot load adapter {adapter_id!r}: {first_line(exc)}", field="adapter_id") from None
        return self._peft


def _adapter_folder(adapter_id: str) -> str:
    """A local folder as it is; a hub id from the cache, or fetched once (fails fast offline)."""
    from playground.models.hub import hub_snapshot

    if os.path.isdir(adapter_id):
        return str(Path(adapter_id).resolve())
    try:
        return hub_snapshot(adapter_id)
    except ModelError as exc:
        raise ParameterError(f"cannot load adapter {adapter_id!r}: {exc.message}", field="adapter_id") from None
