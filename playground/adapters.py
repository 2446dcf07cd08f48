"""PEFT adapters (`adapter_id`): loaded into the shared model once, switched on only for their request."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from playground.errors import ParameterError


class Adapters:
    """LoRA adapters injected into one model; callers hold the model's lock while one is on."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._peft: Any = None

    @contextlib.contextmanager
    def use(self, adapter_id: str | None) -> Iterator[None]:
        """Decode with a PEFT adapter switched on (loaded once, then kept), and off again after."""
        if not adapter_id:
            yield
            return
        peft_model = self._load(adapter_id)
        peft_model.base_model.enable_adapter_layers()
        peft_model.set_adapter(adapter_id)
        try:
            yield
        finally:
            peft_model.base_model.disable_adapter_layers()

    def _load(self, adapter_id: str) -> Any:
        try:
            import peft
        except ImportError:
            raise ParameterError(
                f"adapter_id {adapter_id!r} needs the `peft` package, which is not installed on this server",
                field="adapter_id",
            ) from None
        try:
            if self._peft is None:
                # Injects LoRA layers into the shared model in place; they are switched off between requests.
                self._peft = peft.PeftModel.from_pretrained(self.model, adapter_id, adapter_name=adapter_id)
            elif adapter_id not in self._peft.peft_config:
                self._peft.load_adapter(adapter_id, adapter_name=adapter_id)
        except (OSError, ValueError, KeyError) as exc:
            raise ParameterError(
                f"cannot load adapter {adapter_id!r}: {str(exc).splitlines()[0]}", field="adapter_id"
            ) from None
        return self._peft
