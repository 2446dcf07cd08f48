"""Evaluation rows in and out: prompts from pasted lines, JSONL and CSV; rows exported as CSV and JSONL."""

from __future__ import annotations

import csv
import io
import json

import pytest

from playground.debug.evaluation import EvalRow, FirstRefusal, read_prompts, to_csv, to_jsonl
from playground.errors import ParameterError


def test_prompts_read_from_lines_jsonl_and_csv_and_rows_export() -> None:
    assert read_prompts("a\n\nb\n") == (["a", "b"], [None, None])
    jsonl = '{"prompt": "a", "expected": "red"}\n{"prompt": "b"}\n'
    assert read_prompts(jsonl, "set.jsonl") == (["a", "b"], ["red", None])
    assert read_prompts("prompt,expected\na,red\nb,\n", "set.csv") == (["a", "b"], ["red", None])
    refusal = FirstRefusal(position=2, wanted="blue", chosen="red", reason="not in the choices")
    rows = [EvalRow(index=0, prompt="a, b", text="red", valid=True, expected="red", agree=True, first_refusal=refusal)]
    assert to_csv(rows).splitlines()[1].startswith('0,"a, b",red,True')
    # the JSONL's rows are /evaluate's (its summary's `rows`): the refusal whole, the timings; the CSV flattens
    assert json.loads(to_jsonl(rows)) == rows[0].model_dump(mode="json", exclude={"tokens"})
    assert json.loads(to_jsonl(rows))["first_refusal"]["wanted"] == "blue"


def test_charts_escape_every_text_from_models_and_users() -> None:
    from playground.debug.evaluation import FirstRefusal, summary
    from playground.render import evaluation_html, score_html

    bad = "<script>x</script>"
    refusal = FirstRefusal(position=0, wanted=bad, chosen="a", reason=bad)
    rows = [EvalRow(index=0, prompt=bad, text=bad, valid=False, mass_kept_mean=0.5, first_refusal=refusal)]
    page = evaluation_html(summary(rows, 1), [r.model_dump() for r in rows])
    assert "<script>" not in page and "&lt;script&gt;" in page and "masked" in page  # the invalid row in red
    free = [EvalRow(index=0, prompt="a", text="x", valid=None)]  # no constraint: unchecked, not failed (it was red)
    assert "masked" not in evaluation_html(summary(free, 1), [r.model_dump() for r in free])
    alternative = {"text": bad, "raw_logprob": -1.0, "probability": 1.0, "method": "canonical"}
    chart = score_html({"alternatives": [alternative], "source": bad})
    assert "<script>" not in chart and "100.0%" in chart


def test_the_valid_rate_counts_rows_with_a_verdict_and_errors_only() -> None:
    """A row with no constraint (valid None) is no invalid row; before, such runs reported a valid rate of 0."""
    from playground.debug.evaluation import summary

    free = [EvalRow(index=0, prompt="a", text="x", valid=None, tokens_per_s=None)]
    assert summary(free, 1)["valid_rate"] is None and summary(free, 1)["tokens_per_s"] is None
    mixed = [
        EvalRow(index=0, prompt="a", text="x", valid=True, tokens_per_s=10.0),
        EvalRow(index=1, prompt="b", error="prompt too long"),
        EvalRow(index=2, prompt="c", text="y", valid=None, tokens_per_s=None),  # could not check; one token
    ]
    figures = summary(mixed, 3)
    assert (figures["valid_rate"], figures["tokens_per_s"]) == (0.5, 10.0)


def test_pasted_json_looking_lines_are_prompts_and_files_are_read_as_excel_writes_them() -> None:
    """A pasted line starting with `{` made the box JSONL (a JSONDecodeError, "model failure"); Excel's UTF-8 CSV
    starts with a byte-order mark, which hid the `prompt` column."""
    assert read_prompts('{"a": 1} Is this JSON?\nIs ice hot?') == (
        ['{"a": 1} Is this JSON?', "Is ice hot?"],
        [None, None],
    )
    assert read_prompts('{"prompt": "a"}\n{"prompt": "b", "expected": "x"}') == (["a", "b"], [None, "x"])
    assert read_prompts("\ufeffprompt,expected\nIs fire hot?,yes\n", "set.csv") == (["Is fire hot?"], ["yes"])
    with pytest.raises(ParameterError, match="JSONL line 2 is not JSON"):
        read_prompts('{"prompt": "a"}\n{oops', "set.jsonl")
    with pytest.raises(ParameterError, match="the CSV needs a `prompt` column"):
        read_prompts("question\nx\n", "set.csv")


def test_the_csv_writes_formula_looking_text_as_text_and_keeps_numbers_and_the_jsonl() -> None:
    """Prompts, expected values and model text went into the CSV raw: `=HYPERLINK(...)` ran when it was opened."""
    starts = ["=1+1", "+1", "-cmd", "@SUM(A1)", "\tx", "\ry"]
    refusal = FirstRefusal(position=0, wanted="a", chosen="b", reason="=reason")
    rows = [
        EvalRow(index=i, prompt=p, text=p, expected=p, mass_kept_mean=-0.5, first_refusal=refusal)
        for i, p in enumerate(starts)
    ]
    read = list(csv.DictReader(io.StringIO(to_csv(rows))))
    for cells, text in zip(read, starts):
        assert cells["prompt"] == cells["text"] == cells["expected"] == "'" + text
        assert cells["first_refusal"] == "'=reason" and cells["mass_kept_mean"] == "-0.5"
    safe = list(csv.DictReader(io.StringIO(to_csv([EvalRow(index=0, prompt="a=b", text="1-2")]))))[0]
    assert (safe["prompt"], safe["text"]) == ("a=b", "1-2")
    assert [json.loads(line)["prompt"] for line in to_jsonl(rows).splitlines()] == starts
