"""Verdicts are bounded in time and memory, and the EOS gate never holds the batch for one.

jsonschema re-validates a shared `$ref` wherever it is reached: `allOf`/`anyOf` of two refs to the level
below, 18 levels deep, is 2^18 evaluations of a 1 KB schema. On the old code these verdicts ran for tens
of seconds (under the model lock, at every step of the EOS gate) and answered True.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch

from playground.constraints import Constraint, schema_check
from playground.decoding.chooser import TokenChooser
from playground.types import GenerateParameters


def _doubling(levels: int, keyword: str) -> dict:
    defs = {"d0": {"type": "integer"}}
    for k in range(1, levels + 1):
        defs[f"d{k}"] = {keyword: [{"$ref": f"#/$defs/d{k - 1}"}, {"$ref": f"#/$defs/d{k - 1}"}]}
    return {"$defs": defs, "$ref": f"#/$defs/d{levels}"}


def test_an_exponential_schema_gets_could_not_check_not_a_freeze() -> None:
    constraint = Constraint.json_schema(_doubling(18, "allOf"))  # compiles and checks at once: it is small
    verdict = constraint.validate("5")
    assert verdict.valid is None and "too costly" in verdict.message


def test_anyof_branches_are_bounded_in_memory_too() -> None:
    # A time budget no machine reaches first: the errors' bytes must end this verdict, however slow the host.
    verdict = schema_check.validate(_doubling(18, "anyOf"), json.dumps("x" * 2000), budget_s=3600)
    assert verdict.valid is None and "MB" in verdict.message


def test_a_large_instance_of_a_plain_schema_still_gets_its_verdict() -> None:
    schema = {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}
    items = [{"n": i} for i in range(5000)]
    assert schema_check.validate(schema, json.dumps(items)).valid is True
    items[-1]["n"] = -1
    assert schema_check.validate(schema, json.dumps(items)).valid is False


def test_the_eos_gate_stops_for_a_row_whose_verdict_is_too_costly_and_says_so() -> None:
    runner = SimpleNamespace(
        vocab_size=8,
        token_text=str,
        special_ids=set(),
        device=torch.device("cpu"),
        eos_ids={0},
        text_joins=False,
    )
    constraint = Constraint.json_schema(_doubling(16, "allOf"))
    chooser = TokenChooser(runner, GenerateParameters(), [lambda ids, s: s], constraint, prompt_length=1)
    step = chooser.step(torch.tensor([[1]]), torch.zeros(8), "5")
    assert torch.isfinite(step.final_scores[0])  # undecided within the step's budget: EOS stays allowed
    assert chooser.gate_stopped and "gate stopped" in chooser.warnings[0]
    chooser.step(torch.tensor([[1, 2]]), torch.zeros(8), "55")  # and the row pays no more verdicts
    assert len(chooser.warnings) == 1
