"""The JSON EOS gate: end of text only when the output passes the schema, and a dead end is an error."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from playground.constraints import Constraint
from playground.decoding.chooser import TokenChooser
from playground.errors import UnsupportedConstraintError
from playground.types import GenerateParameters

EOS, DIGIT, VOCAB = 0, 4, 8
SCHEMA = Constraint.json_schema({"type": "integer", "minimum": 5})


def _allowed(*ids: int) -> torch.Tensor:
    scores = torch.full((VOCAB,), float("-inf"))
    scores[list(ids)] = 0.0
    return scores


def _chooser(constraint: Constraint, *allowed: int) -> TokenChooser:
    """A chooser whose mask (standing in for an engine's) allows exactly `allowed`."""
    runner = SimpleNamespace(
        vocab_size=VOCAB,
        token_text=str,
        special_ids=set(),
        device=torch.device("cpu"),
        eos_ids={EOS},
        text_joins=False,
    )
    mask = lambda ids, scores: scores + _allowed(*allowed)  # noqa: E731
    return TokenChooser(runner, GenerateParameters(), [mask], constraint, prompt_length=1)


def test_eos_is_refused_while_the_output_breaks_the_schema() -> None:
    step = _chooser(SCHEMA, EOS, DIGIT).step(torch.tensor([[1]]), torch.zeros(VOCAB), "3")
    assert torch.isinf(step.final_scores[EOS]) and torch.isfinite(step.final_scores[DIGIT])


def test_eos_stays_when_the_output_passes() -> None:
    step = _chooser(SCHEMA, EOS, DIGIT).step(torch.tensor([[1]]), torch.zeros(VOCAB), "7")
    assert torch.isfinite(step.final_scores[EOS])


def test_a_dead_end_fails_instead_of_ending_with_text_that_breaks_the_schema() -> None:
    with pytest.raises(UnsupportedConstraintError, match=r"the output breaks the schema \(.*5.*\) and"):
        _chooser(SCHEMA, EOS).step(torch.tensor([[1]]), torch.zeros(VOCAB), "3")


def test_other_kinds_are_left_to_their_exact_masks() -> None:
    step = _chooser(Constraint.regex("[0-9]+"), EOS).step(torch.tensor([[1]]), torch.zeros(VOCAB), "3")
    assert torch.isfinite(step.final_scores[EOS])
