"""TokenView: any generation result (local or from a provider) as coloured tokens in a notebook."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from playground import render
from playground.providers import mapping
from playground.types import GenerationResult
from widgets.settings import StrictSettings

STATIC = Path(__file__).resolve().parent / "static"
_HELPERS_IMPORT = re.compile(r'^import \{[^}]*\} from "\./helpers\.js";\n', re.MULTILINE)


def esm(name: str) -> str:
    """A widget's module with helpers.js inlined where it imports it: anywidget runs one file from a blob URL."""
    source = (STATIC / name).read_text(encoding="utf-8")
    helpers = (STATIC / "helpers.js").read_text(encoding="utf-8")
    bundled, count = _HELPERS_IMPORT.subn(lambda _match: helpers, source)
    if count != 1:
        raise RuntimeError(f"widgets/static/{name} must import ./helpers.js exactly once, on one line")
    return bundled


def result_payload(result: GenerationResult | dict[str, Any] | list[Any] | None) -> dict[str, Any]:
    """The result as strict JSON (masked -inf logprobs become null), tokens marked `overridden`. A dict or list is
    an answer's JSON: a GenerationResult's, or a /generate, chat completion or completion answer."""
    if result is None:
        return {}
    if not isinstance(result, GenerationResult):
        result = mapping.answer_result(result)
    payload = json.loads(result.model_dump_json())
    sequences = [result.best, *result.best_of_sequences]
    dumped = [payload["best"], *payload["best_of_sequences"]]
    for seq, seq_json in zip(sequences, dumped):
        for token, token_json in zip(seq.tokens, seq_json["tokens"]):
            token_json["overridden"] = token.overridden
    return payload


class TokenView(StrictSettings, anywidget.AnyWidget):
    """Shows tokens coloured by probability; hover or click one for its alternatives raw and constrained."""

    _esm = esm("token_view.js")
    _css = STATIC / "widgets.css"

    result = traitlets.Dict().tag(sync=True)
    colour_by = traitlets.Enum(["constrained", "raw"], default_value="constrained").tag(sync=True)
    selected = traitlets.Int(-1).tag(sync=True)

    def __init__(self, result: GenerationResult | dict[str, Any] | list[Any] | None = None, **kwargs: Any) -> None:
        self._refuse_unknown(kwargs)
        super().__init__(result=result_payload(result), **kwargs)
        self._settled = True

    def update(self, result: GenerationResult | dict[str, Any] | list[Any] | None) -> None:
        """Show another result (None clears the view)."""
        self.selected = -1
        self.result = result_payload(result)

    @property
    def generation_result(self) -> GenerationResult | None:
        """The shown result as the library's type, so a notebook can keep working with it."""
        return GenerationResult.model_validate(self.result) if self.result else None

    def _repr_html_(self) -> str:
        """Static HTML for viewers that don't run widget JavaScript (nbviewer, GitHub, exported HTML)."""
        if not self.result:
            return render.page(render.box("muted", "no result yet"))
        return render.result_html(GenerationResult.model_validate(self.result), self.colour_by)
