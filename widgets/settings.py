"""Widgets whose synced traits are their only settings: a misspelt one is an error, not a silent new attribute."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

import traitlets


class StrictSettings(traitlets.HasTraits):
    """traitlets drops an unknown constructor argument with a warning only, and `w.colr_by = "raw"` makes an attribute
    nothing reads: both are refused here, with the setting meant. Private names and what the class defines pass."""

    def _refuse_unknown(self, names: Iterable[str]) -> None:
        """Constructor arguments that are not settings."""
        unknown = sorted(set(names) - set(self.trait_names(sync=True)))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unknown settings: {', '.join(self._hinted(n) for n in unknown)}"
            )

    def _hinted(self, name: str) -> str:
        close = difflib.get_close_matches(name, self.trait_names(sync=True), n=1)
        return f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)

    def __setattr__(self, name: str, value: Any) -> None:
        known = name.startswith("_") or hasattr(type(self), name) or name in self.__dict__
        if not known and self.__dict__.get("_settled"):
            raise AttributeError(f"{type(self).__name__} has no setting {self._hinted(name)}")
        super().__setattr__(name, value)
