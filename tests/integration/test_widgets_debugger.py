"""The Playground widget's debugger on the embedded model: reasons on the chart, checks, branches, fields."""

from __future__ import annotations

import json

import pytest

from playground.errors import ParameterError
from playground.providers.local import LocalProvider
from tests.support import PET_SCHEMA
from widgets.playground import Playground


@pytest.fixture
def widget(engine) -> Playground:
    w = Playground(
        provider=LocalProvider([engine]), constraint_kind="json_schema", constraint_text=json.dumps(PET_SCHEMA)
    )
    w.max_new_tokens = 30
    w.prompt = "A pet as JSON."
    return w


def test_fields_reasons_check_and_branch(widget: Playground) -> None:
    result = widget.run()
    answer = json.loads(result.generated_text)
    assert {f["path"] for f in widget.result_json["best"]["fields"]} == set(answer)
    widget.next_token_position = 1
    refused = [c for c in widget.next_token["candidates"] if not c["allowed"]]
    assert refused and all(c["reason"] for c in refused)

    checked = widget.check('{"kind": "cow"}')
    assert not checked.accepted and checked.first_refused.reason.startswith("kind must be one of")
    assert widget.check_result["first_refused"]["reason"] == checked.first_refused.reason

    branch = widget.branch(len(result.best.tokens) - 3, "")
    assert branch.best.continued_from and branch.best.validation.valid is not None
    assert widget.branches[-1]["result"]["best"]["continued_from"] == branch.best.continued_from
    widget.constraint_text = json.dumps({"type": "boolean"})  # the verdict was about the schema before: it goes
    assert widget.check_result == {}
    widget.check('{"kind": "cow"}')
    widget.clear()
    assert (widget.check_result, widget.branches, widget.result, widget.messages) == ({}, [], None, [])


def test_branch_before_a_run_and_check_without_a_constraint_are_named(widget: Playground) -> None:
    with pytest.raises(ParameterError, match="run once first"):
        widget.branch(0, "x")
    widget.constraint_kind = "none"
    widget.check_text = "anything"
    widget.check_requested += 1
    assert "pick a constraint first" in widget.error and widget.check_result == {}
