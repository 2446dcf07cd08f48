"""Evaluate one constraint over many prompts: a row per prompt, a summary of how the constraint behaved.

A row is one finished generation reduced to what a summary needs (verdict, finish reason, mass kept,
forced and overridden tokens, speed) plus its tokens, so any row can open its full token panel. The first
refusal is the first token where the model's own first choice was refused, with the debugger's reason
(local models). Rows export as JSONL and CSV.
"""

from __future__ import annotations

import contextvars
import csv
import io
import json
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from statistics import fmean
from typing import Any

from pydantic import BaseModel, Field

from playground.debug.state import LocalEngine
from playground.debug.why import reasons_at
from playground.errors import ParameterError, PlaygroundError
from playground.types import ChatMessage, GeneratedToken, GenerateParameters, GenerationResult

MAX_EVAL_ROWS = 256
PARALLEL = 4  # rows in flight at once: on a local model they decode together in the batch
# What a spreadsheet reads as the start of a formula (OWASP, CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CSV_FIELDS = (
    "index",
    "prompt",
    "text",
    "valid",
    "finish_reason",
    "mass_kept_mean",
    "mass_kept_min",
    "forced",
    "overridden",
    "first_refusal",
    "expected",
    "agree",
    "error",
)


class FirstRefusal(BaseModel):
    """The first token where the constraint refused the model's own first choice."""

    position: int
    wanted: str = Field(description="The model's first choice there.")
    chosen: str = Field(description="The token the constrained decode took instead.")
    reason: str | None = Field(description="The debugger's reason for the refusal; None for remote models.")


class EvalRow(BaseModel):
    """One prompt's generation, summarised."""

    index: int
    prompt: str
    text: str = ""
    valid: bool | None = None
    validation: str = ""
    finish_reason: str | None = None
    mass_kept_mean: float | None = None
    mass_kept_min: float | None = None
    tokens_count: int = 0
    forced: int = 0
    overridden: int = 0
    first_refusal: FirstRefusal | None = None
    time_to_first_token_s: float | None = None
    tokens_per_s: float | None = None
    expected: str | None = None
    agree: bool | None = None
    error: str | None = None
    tokens: list[GeneratedToken] = Field(default_factory=list, description="Every token, for the token panel.")


def prompt_label(prompt: str | list[ChatMessage]) -> str:
    """A prompt as one line of a table: the text, or a chat's last message."""
    return prompt if isinstance(prompt, str) else prompt[-1].text()


def row_of(
    index: int,
    prompt: str | list[ChatMessage],
    result: GenerationResult,
    expected: str | None,
    engine: LocalEngine | None,
    params: GenerateParameters,
) -> EvalRow:
    """A finished generation as an evaluation row (the refusal reason asked of the local engine, if any).

    A thinking model's row is judged on its answer, as its verdict is: the text, the agreement and the figures leave
    the reasoning out (the constraint waits for the answer); its tokens keep it, for the token panel."""
    best = result.best
    answer = [t for t in best.tokens if t.segment != "reasoning"]
    kept = [t.mass_kept for t in answer if t.mass_kept is not None]
    text = best.answer
    return EvalRow(
        index=index,
        prompt=prompt_label(prompt),
        text=text,
        valid=best.validation.valid,
        validation=best.validation.message,
        finish_reason=best.finish_reason,
        mass_kept_mean=fmean(kept) if kept else None,
        mass_kept_min=min(kept) if kept else None,
        tokens_count=len(answer),
        forced=sum(t.forced for t in answer),
        overridden=sum(t.overridden for t in answer),
        first_refusal=_first_refusal(best.tokens, engine, params),
        time_to_first_token_s=result.timings.time_to_first_token_s,
        tokens_per_s=result.timings.tokens_per_s or None,  # 0: one token (or none), no decode rate
        expected=expected,
        agree=None if expected is None else text.strip() == expected.strip(),
        tokens=best.tokens,
    )


def failed_row(index: int, prompt: str | list[ChatMessage], expected: str | None, error: str) -> EvalRow:
    """A prompt whose generation failed (a too-long prompt, say): counted, never valid."""
    return EvalRow(index=index, prompt=prompt_label(prompt), expected=expected, error=error, valid=False)


def run_rows(
    generate: Callable[[str | list[ChatMessage], GenerateParameters], GenerationResult],
    prompts: list[str | list[ChatMessage]],
    expected: list[str | None] | None,
    params: GenerateParameters,
    engine: LocalEngine | None = None,
) -> Iterator[EvalRow]:
    """Each prompt's row as it finishes, PARALLEL at a time (the widget's and the UI's evaluations).

    Closing the iterator (a Stop) starts no further row; the rows running then finish."""
    if not 1 <= len(prompts) <= MAX_EVAL_ROWS:
        raise ParameterError(f"prompts: 1 to {MAX_EVAL_ROWS}, got {len(prompts)}", field="prompts")
    answers = expected if expected is not None else [None] * len(prompts)
    if len(answers) != len(prompts):
        raise ParameterError("expected: one answer (or none) per prompt", field="expected")
    params = params.model_copy(update={"details": True, "best_of": None})

    def one(index: int) -> EvalRow:
        try:
            result = generate(prompts[index], params)
            return row_of(index, prompts[index], result, answers[index], engine, params)
        except PlaygroundError as exc:
            return failed_row(index, prompts[index], answers[index], exc.message)

    pool = ThreadPoolExecutor(PARALLEL, thread_name_prefix="evaluate")
    try:  # each row in the caller's context (its client scope)
        futures = [pool.submit(contextvars.copy_context().run, one, i) for i in range(len(prompts))]
        for future in as_completed(futures):
            yield future.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _first_refusal(
    tokens: list[GeneratedToken], engine: LocalEngine | None, params: GenerateParameters
) -> FirstRefusal | None:
    for k, token in enumerate(tokens):
        if not token.overridden or token.segment == "reasoning":  # (no constraint inside the reasoning)
            continue
        wanted = token.raw_top_tokens[0]
        reason = None
        if engine is not None and params.grammar is not None:
            before = (t.text for t in tokens[:k] if not t.special and t.segment != "reasoning")
            prefix = (params.continue_from or "") + "".join(before)
            try:
                reason = reasons_at(engine, params.grammar, prefix, [wanted.id], params.constraint_engine).reasons[0]
                reason = reason.reason
            except PlaygroundError as exc:  # a prefix that re-tokenizes differently, a spent budget
                reason = f"(no reason: {exc})"
        return FirstRefusal(position=k, wanted=wanted.text, chosen=token.text, reason=reason)
    return None


def summary(rows: list[EvalRow], total: int, cancelled: bool = False) -> dict[str, Any]:
    """valid_rate, finish reasons, mass kept, forced share, overrides, speed, refusal reasons, agreement."""
    done = [r for r in rows if r.error is None]
    kept = [r.mass_kept_mean for r in done if r.mass_kept_mean is not None]
    mins = [r.mass_kept_min for r in done if r.mass_kept_min is not None]
    tokens = sum(r.tokens_count for r in done)
    judged = [r for r in rows if r.agree is not None]
    verdicts = [r for r in rows if r.valid is not None or r.error is not None]  # an error counts as invalid
    speeds = [r.tokens_per_s for r in done if r.tokens_per_s is not None]
    reasons = Counter(r.first_refusal.reason or "(no reason)" for r in done if r.first_refusal)
    return {
        "rows": len(rows),
        "total": total,
        "cancelled": cancelled,
        "errors": len(rows) - len(done),
        "valid_rate": sum(r.valid is True for r in verdicts) / len(verdicts) if verdicts else None,
        "finish_reasons": dict(Counter(r.finish_reason or "error" for r in rows)),
        "mass_kept_mean": fmean(kept) if kept else None,
        "mass_kept_min": min(mins) if mins else None,
        "forced_share": sum(r.forced for r in done) / tokens if tokens else None,
        "override_count": sum(r.overridden for r in done),
        "mean_time_to_first_token_s": fmean(r.time_to_first_token_s or 0.0 for r in done) if done else None,
        "tokens_per_s": fmean(speeds) if speeds else None,
        "refusal_reasons": dict(reasons.most_common()),
        "agreement": sum(r.agree is True for r in judged) / len(judged) if judged else None,
    }


def to_jsonl(rows: list[EvalRow]) -> str:
    """One JSON object per row, as /evaluate's summary lists its rows (every field but the tokens): a file from
    the UI or the widget reads as one from the API."""
    return "".join(json.dumps(row.model_dump(mode="json", exclude={"tokens"})) + "\n" for row in rows)


def to_csv(rows: list[EvalRow]) -> str:
    """The rows as CSV, one per prompt; a text cell a spreadsheet would run as a formula is written as text."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for row in rows:
        writer.writerow({name: _text_cell(value) for name, value in _flat(row).items()})
    return out.getvalue()


def _text_cell(value: Any) -> Any:
    """Prompts, expected values and model text are anyone's: `=HYPERLINK(...)` would run when the CSV is opened.
    OWASP's defence: such a text cell starts with `'`; numbers stay numbers (and the JSONL keeps every text)."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def _flat(row: EvalRow) -> dict[str, Any]:
    values = row.model_dump(include=set(CSV_FIELDS))
    values["first_refusal"] = row.first_refusal.reason if row.first_refusal else None
    return values


def read_prompts(text: str, filename: str = "") -> tuple[list[str], list[str | None]]:
    """Prompts (and expected answers) from pasted lines, a JSONL file or a CSV file with a `prompt` column.

    Pasted text is JSONL when every line is a `{"prompt": ...}` object (what an upload puts in the box), else one
    prompt per line, JSON-looking or not. A file's byte-order mark (Excel's "CSV UTF-8") is no part of it."""
    text = text.removeprefix("\ufeff")
    if filename.endswith(".jsonl") or (not filename and _jsonl(text)):
        items = [_json_line(line, n) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        if not all(isinstance(i, dict) and isinstance(i.get("prompt"), str) for i in items):
            raise ParameterError('each JSONL line must be an object with a "prompt" string', field="prompts")
        return [i["prompt"] for i in items], [_opt(i.get("expected")) for i in items]
    if filename.endswith(".csv"):
        reader = csv.DictReader(io.StringIO(text))
        if "prompt" not in (reader.fieldnames or []):
            raise ParameterError("the CSV needs a `prompt` column (and may have `expected`)", field="prompts")
        items = list(reader)
        return [i["prompt"] for i in items], [_opt(i.get("expected")) for i in items]
    lines = [line for line in text.splitlines() if line.strip()]
    return lines, [None] * len(lines)


def _jsonl(text: str) -> bool:
    try:
        items = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError:
        return False
    return bool(items) and all(isinstance(i, dict) and "prompt" in i for i in items)


def _json_line(line: str, number: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise ParameterError(f"JSONL line {number} is not JSON: {exc}", field="prompts") from None


def _opt(value: Any) -> str | None:
    return None if value in (None, "") else str(value)
