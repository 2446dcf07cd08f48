"""Evaluation rows in and out: prompts from pasted lines, JSONL and CSV; rows exported as CSV and JSONL."""

from __future__ import annotations

import json

from playground.debug.evaluation import EvalRow, read_prompts, to_csv, to_jsonl


def test_prompts_read_from_lines_jsonl_and_csv_and_rows_export() -> None:
    assert read_prompts("a\n\nb\n") == (["a", "b"], [None, None])
    jsonl = '{"prompt": "a", "expected": "red"}\n{"prompt": "b"}\n'
    assert read_prompts(jsonl, "set.jsonl") == (["a", "b"], ["red", None])
    assert read_prompts("prompt,expected\na,red\nb,\n", "set.csv") == (["a", "b"], ["red", None])
    rows = [EvalRow(index=0, prompt="a, b", text="red", valid=True, expected="red", agree=True)]
    assert to_csv(rows).splitlines()[1].startswith('0,"a, b",red,True')
    assert json.loads(to_jsonl(rows))["agree"] is True
