"""The Playground widget's score and evaluation: every allowed answer ranked, and one constraint over many prompts.

Both return objects that draw themselves as the UI's charts in a notebook cell (`_repr_html_`, escaped HTML
from playground.render); the widget itself only shows the evaluation's progress bar (textContent).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from playground import render
from playground.debug.evaluation import MAX_EVAL_ROWS, EvalRow, failed_row, row_of, summary, to_csv, to_jsonl
from playground.debug.score import ScoreResult, score
from playground.errors import ParameterError, PlaygroundError
from playground.providers.base import Inputs, Provider, local_engine
from playground.types import GenerateParameters

PARALLEL = 4  # rows in flight at once: they decode together in the local model's batch


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
    """Every prompt under the same parameters, PARALLEL at a time; `progress(done, total)` after each row."""
    if not 1 <= len(prompts) <= MAX_EVAL_ROWS:
        raise ParameterError(f"prompts: 1 to {MAX_EVAL_ROWS}, got {len(prompts)}", field="prompts")
    answers = expected if expected is not None else [None] * len(prompts)
    if len(answers) != len(prompts):
        raise ParameterError("expected: one answer (or None) per prompt", field="expected")
    engine = local_engine(provider, model, "") if provider.capabilities.local_engine else None
    params = params.model_copy(update={"details": True, "best_of": None})

    def one(index: int) -> EvalRow:
        try:
            result = provider.generate(model, prompts[index], params)
            return row_of(index, prompts[index], result, answers[index], engine, params)
        except PlaygroundError as exc:
            return failed_row(index, prompts[index], answers[index], exc.message)

    rows: list[EvalRow] = []
    progress(0, len(prompts))
    with ThreadPoolExecutor(PARALLEL, thread_name_prefix="evaluate") as pool:
        for future in as_completed([pool.submit(one, i) for i in range(len(prompts))]):
            rows.append(future.result())
            progress(len(rows), len(prompts))
    return Evaluation(rows, len(prompts))


def progress_trait(done: int, total: int) -> dict[str, Any]:
    """What the widget's progress bar reads."""
    return {"done": done, "total": total}
