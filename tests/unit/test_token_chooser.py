"""The per-step token pipeline on hand-made logits: each penalty and warper changes what it should."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from playground.constraints import Constraint
from playground.constraints.backends.bitmask import BitmaskProcessor
from playground.decoding import sampling
from playground.decoding.chooser import TokenChooser
from playground.decoding.runner import RowIds
from playground.errors import ParameterError
from playground.types import GenerateParameters

VOCAB = 8
LOGITS = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0])
PROMPT = [5, 6]
EOS = 7


def runner() -> SimpleNamespace:
    """What the chooser reads of a model: vocabulary size, device, special ids, token texts."""
    return SimpleNamespace(
        vocab_size=VOCAB,
        device=torch.device("cpu"),
        eos_ids={EOS},
        special_ids={EOS},
        token_text=lambda i: f"t{i}",
        token_piece=lambda i: f"t{i}",
        ids=lambda ids: torch.tensor([ids]),
        text_joins=False,
    )


def step(ids: list[int] | None = None, processors: list | None = None, constraint: Constraint | None = None, **params):
    chooser = TokenChooser(
        runner(), GenerateParameters(**params), processors or [], constraint or Constraint("none"), len(PROMPT)
    )
    return chooser.step(torch.tensor([ids or PROMPT]), LOGITS.clone(), text="")


def finite(scores: torch.Tensor) -> list[int]:
    return torch.isfinite(scores).nonzero().flatten().tolist()


def test_greedy_untouched_is_the_raw_distribution():
    scores = step()
    assert torch.allclose(scores.logprobs, torch.log_softmax(LOGITS, -1))
    assert scores.mass_kept == 1.0


def test_temperature_scales_the_logits():
    scores = step(temperature=0.5)
    assert torch.allclose(scores.logprobs, torch.log_softmax(LOGITS / 0.5, -1))


def test_top_k_keeps_k_tokens():
    assert finite(step(top_k=3).final_scores) == [0, 1, 2]


def test_top_p_keeps_the_nucleus():
    # softmax(LOGITS): 0.64, 0.23, 0.09, ...: 0.8 of the mass needs the first two
    assert finite(step(top_p=0.8).final_scores) == [0, 1]


def test_typical_p_drops_tokens():
    assert 0 < len(finite(step(typical_p=0.5).final_scores)) < VOCAB


def test_repetition_penalty_lowers_tokens_already_seen():
    scores = step(ids=[*PROMPT, 0], repetition_penalty=2.0)
    assert scores.final_scores[0] == pytest.approx(2.0)  # 4.0 / 2 for a positive logit
    assert scores.final_scores[1] == pytest.approx(3.0)


def test_frequency_penalty_counts_generated_tokens_only():
    scores = step(ids=[*PROMPT, 1, 1], frequency_penalty=0.5)
    assert scores.final_scores[1] == pytest.approx(3.0 - 2 * 0.5)
    assert scores.final_scores[5] == pytest.approx(-1.0)  # in the prompt: not penalised


def test_watermark_biases_a_green_list():
    scores = step(watermark=True)
    assert not torch.allclose(scores.final_scores, LOGITS)


def test_row_processors_mask_and_mass_kept_follows():
    def only_two(_ids: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        s[:, [0, 1, 3, 4, 5, 6, 7]] = -math.inf
        return s

    scores = step(processors=[only_two])
    assert finite(scores.final_scores) == [2]
    assert scores.mass_kept == pytest.approx(float(torch.softmax(LOGITS, -1)[2]))


def test_eos_gate_refuses_end_while_the_json_is_invalid():
    constraint = Constraint.from_grammar({"type": "json", "value": {"type": "integer", "minimum": 10}})
    chooser = TokenChooser(runner(), GenerateParameters(), [], constraint, len(PROMPT))
    assert EOS not in finite(chooser.step(torch.tensor([PROMPT]), LOGITS.clone(), text="5").final_scores)
    assert EOS in finite(chooser.step(torch.tensor([PROMPT]), LOGITS.clone(), text="50").final_scores)


class FixedMask(BitmaskProcessor):
    """An engine whose mask never changes: the tokens in `allowed`."""

    def __init__(self, allowed: list[int]) -> None:
        self.tokens = allowed
        super().__init__(VOCAB)

    def _start(self) -> None:
        pass

    def _consume(self, tokens: list[int]) -> None:
        pass

    def _fill(self, out) -> None:
        out[:] = sum(1 << t for t in self.tokens)


@pytest.mark.parametrize(
    "params",
    [{}, {"repetition_penalty": 2.0}, {"temperature": 0.5, "do_sample": True, "seed": 1}],
    ids=["mask alone", "a penalty first", "a warper after"],
)
def test_mass_kept_is_the_raw_mass_of_the_allowed_tokens_however_it_is_computed(params: dict) -> None:
    """A mask alone reads the mass kept off its best token (raw logprob minus final logprob) and finds that
    token once; a penalty or a warper changes the logits, and the mass is summed over the allowed tokens."""
    kept = float(torch.softmax(LOGITS, -1)[[2, 4, 6]].sum())
    chooser = TokenChooser(runner(), GenerateParameters(**params), [FixedMask([2, 4, 6])], Constraint("none"), 0)
    scores = chooser.step(torch.tensor([[2, 5]]), LOGITS.clone(), text="")
    assert finite(scores.final_scores) == [2, 4, 6]
    assert scores.mass_kept == pytest.approx(kept, rel=1e-5)
    if params:
        assert scores.best is None
    else:
        assert scores.best == (pytest.approx(float(torch.log_softmax(LOGITS[[2, 4, 6]], -1)[0])), 2)
        assert chooser.choose(scores) == 2
        assert chooser.record(2, "t2", scores).top_tokens[0].id == 2
    forced = chooser.step(
        torch.tensor([[2, 5]]), LOGITS.clone(), text="", allowed=torch.tensor([False] * 4 + [True] * 4)
    )
    assert forced.mass_kept == pytest.approx(float(torch.softmax(LOGITS, -1)[4:].sum()), rel=1e-5)


def test_a_mask_that_allows_nothing_is_said_so() -> None:
    chooser = TokenChooser(runner(), GenerateParameters(), [FixedMask([])], Constraint("none"), len(PROMPT))
    scores = chooser.step(torch.tensor([PROMPT]), LOGITS.clone(), text="")
    assert scores.mass_kept == 0.0
    with pytest.raises(ParameterError, match="every token was masked out"):
        chooser.choose(scores)


def test_row_ids_are_the_ids_as_a_tensor_and_an_extension_writes_only_what_is_new() -> None:
    row_ids = RowIds(torch.device("cpu"))
    calls = [
        list(range(100)),  # the first call: a buffer with room
        list(range(102)),  # a step later: two more
        list(range(101)),  # a draft undone: a shorter row
        [*range(101), 7, 8],  # and on, with other tokens than the buffer held past the shorter row
        [*range(50), 9],  # another row altogether (no prefix of what is held)
        list(range(500)),  # past the buffer's room: a larger one, the ids held copied
        [],
    ]
    for ids in calls:
        got = row_ids(ids)
        assert got.dtype == torch.long and got.shape == (1, len(ids)) and got.tolist() == [ids]
    row_ids(list(range(10)))
    first = row_ids(list(range(20)))
    second = row_ids(list(range(21)))
    assert second.data_ptr() == first.data_ptr()  # a view of the same buffer, not a new tensor of the whole row
    stepped = RowIds(torch.device("cpu"))
    with torch.inference_mode():  # a buffer made in a step (the scheduler's), then a call outside one
        stepped(list(range(30)))
    assert stepped(list(range(31))).tolist() == [list(range(31))]


def test_a_processor_that_writes_into_its_ids_leaves_the_row_s_ids_as_they_were() -> None:
    def scribbles(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        input_ids.zero_()  # a plugin's may: it is handed its own copy
        return scores

    chooser = TokenChooser(runner(), GenerateParameters(), [scribbles], Constraint("none"), len(PROMPT))
    chooser.step(chooser.row_ids([*PROMPT, 3]), LOGITS.clone(), text="")
    assert chooser.row_ids([*PROMPT, 3, 4]).tolist() == [[*PROMPT, 3, 4]]


def test_a_probed_mask_keeps_every_allowed_logit_bit_for_bit_and_puts_the_rest_at_minus_infinity() -> None:
    """`sampling.only` (the CPU's way through the floats' bits) is torch.where(allowed, values, -inf), whatever the
    logits hold: NaN and infinities where allowed stay, where refused become -inf; a mask alternating token by token
    (the case torch.where's loop is slow at) and a non-contiguous row alike."""
    values = torch.randn(4099) * 10
    values[:6] = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e-40, 3.0])
    allowed = torch.rand(4099) < 0.5
    allowed[:6] = torch.tensor([True, True, True, True, True, False])
    for row, mask in [(values, allowed), (values, ~allowed), (torch.stack([values, values], 1)[:, 1], allowed)]:
        expected = torch.where(mask, row, sampling.NEG_INF)
        assert torch.equal(sampling.only(row, mask).view(torch.int32), expected.contiguous().view(torch.int32))
    assert torch.isneginf(sampling.only(values, torch.zeros(4099, dtype=torch.bool))).all()
    odd = (allowed.to(torch.uint8) * 2).view(torch.bool)  # true bytes of 2, as a view of other bytes makes them
    assert torch.equal(sampling.only(values, odd).view(torch.int32), sampling.only(values, allowed).view(torch.int32))


@pytest.mark.parametrize(
    "row, expected",
    [
        ([1.0, 3.0, 3.0, 2.0], (3.0, 1)),  # the first of equals, as torch's max(dim=-1)
        ([-math.inf] * 3, (-math.inf, 0)),  # nothing allowed: choose says so
        ([0.5, math.nan, 2.0], (math.nan, 1)),  # a NaN wins, as torch's max propagates it
    ],
)
def test_the_best_token_is_torch_s_max_read_through_numpy(row: list[float], expected: tuple[float, int]) -> None:
    values = torch.tensor(row)
    value, index = values.max(dim=-1)
    assert (float(value), int(index)) == pytest.approx(expected, nan_ok=True)
    assert sampling.best(values) == pytest.approx(expected, nan_ok=True)
    assert sampling.best(values[None]) == pytest.approx(expected, nan_ok=True)  # one row of a batch too
