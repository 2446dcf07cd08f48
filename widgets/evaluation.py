"""The Playground widget's score and evaluation: every allowed answer ranked, and one constraint over many prompts.

Both return objects that draw themselves as the UI's charts in a notebook cell (`_repr_html_`, escaped HTML
from playground.render); the widget itself only shows the evaluation's progress bar (textContent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playground import render
from playground.debug.evaluation import EvalRow, run_rows, summary, to_csv, to_jsonl
from playground.debug.score import ScoreResult, score
from playground.providers.base import Inputs, Provider, local_engine
from playground.types import GenerateParameters


class Scored:
    """A score result that draws itself as the ranked bar chart."""

    def __init__(self, result: ScoreResult) -> None:
        self.result = result

    def _repr_html_(self) -> str:
        return render.page(render.score_html(self.result.model_dump()))


class Evaluation:
    """An evaluation's rows and summary; draws its charts, exports JSONL and CSV."""

    def __init__(self, rows: list[EvalRow], total: int) -> None:
        self.rows = sorted(rows, key=lambda r: r.index)
        self.summary = summary(self.rows, total)

    def to_jsonl(self) -> str:
        return to_jsonl(self.rows)

    def to_csv(self) -> str:
        return to_csv(self.rows)

    def _repr_html_(self) -> str:
        return render.page(render.evaluation_html(self.summary, [r.model_dump() for r in self.rows]))


def score_on(provider: Provider, model: str, inputs: Inputs, params: GenerateParameters) -> Scored:
    """Every answer the constraint allows after `inputs`, ranked (local models: the scores need the weights)."""
    return Scored(score(local_engine(provider, model, "scoring alternatives"), inputs, params))


def evaluate_on(
    provider: Provider,
    model: str,
    prompts: list[Inputs],
    params: GenerateParameters,
    expected: list[str | None] | None = None,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> Evaluation:
    """Every prompt under the same parameters; `progress(done, total)` before the first row and after each."""
    engine = local_engine(provider, model, "") if provider.capabilities.local_engine else None
    rows: list[EvalRow] = []
    progress(0, len(prompts))
    for row in run_rows(lambda p, ps: provider.generate(model, p, ps), prompts, expected, params, engine):
        rows.append(row)
        progress(len(rows), len(prompts))
    return Evaluation(rows, len(prompts))


def progress_trait(done: int, total: int) -> dict[str, Any]:
    """What the widget's progress bar reads."""
    return {"done": done, "total": total}
