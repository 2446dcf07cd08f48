"""llguidance's row processor over its bitmask: Outlines' masks exactly, one engine call for a batch's rows.

Outlines' LLGuidanceLogitsProcessor is the reference (what decoding used before); the embedded model's
tokenizer and a real JSON schema, walked token by token.
"""

from __future__ import annotations

import copy
import json

import llguidance.hf
import numpy as np
import pytest
import torch
import torch._dynamo
from outlines.backends.llguidance import LLGuidanceLogitsProcessor

from playground.constraints.backends import bitmask
from playground.constraints.backends import llguidance as llg_backend
from playground.constraints.backends.base import EngineRefusal
from playground.constraints.backends.llguidance import LLGuidanceProcessor
from playground.errors import UnsupportedConstraintError

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
TEXT = '{"name": "Ada", "age": 36}'


def _setup(loaded_model):
    tokenizer = loaded_model.tokenizer
    llg = llguidance.hf.from_tokenizer(tokenizer)
    spec = llg_backend.grammar("json_schema", json.dumps(SCHEMA))
    vocab = int(loaded_model.model.get_output_embeddings().weight.shape[0])
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    return llg, spec, vocab, ids


def test_masks_and_scores_are_outlines_own_at_every_position(loaded_model) -> None:
    llg, spec, vocab, ids = _setup(loaded_model)
    ours, theirs = LLGuidanceProcessor(spec, llg), LLGuidanceLogitsProcessor(spec, llg, "torch")
    row = [0]
    logits = torch.randn(1, vocab)
    for token in [*ids, None]:
        with torch._dynamo.config.patch(disable=True):  # its kernel is torch.compile'd: minutes to compile
            expected = theirs(torch.tensor([row]), logits.clone())
        got = ours(torch.tensor([row]), logits)
        assert torch.equal(got, expected)
        assert torch.equal(ours.allowed(torch.tensor([row]), vocab), torch.isfinite(expected[0]))
        if token is not None:
            assert bool(torch.isfinite(got[0, token]))
            row.append(token)
    assert ours.ll_matchers[0].is_accepting()


def test_rows_prepared_together_get_their_own_masks_and_are_not_advanced_twice(loaded_model) -> None:
    llg, spec, vocab, ids = _setup(loaded_model)
    rows = [LLGuidanceProcessor(spec, llg) for _ in range(3)]
    alone = [LLGuidanceProcessor(spec, llg) for _ in range(3)]
    prefixes = [[0], [0, *ids[:3]], [0, *ids[:7]]]
    for processor, prefix in zip(rows + alone, prefixes + prefixes):
        processor(torch.tensor([prefix[:1]]), torch.zeros(1, vocab))  # the first call starts the matcher
    bitmask.prepare(list(zip(rows, prefixes)))
    assert all(p.prepared_s > 0 for p in rows)
    for processor, reference, prefix in zip(rows, alone, prefixes):
        ready = processor._bits
        got = processor.allowed(torch.tensor([prefix]), vocab)
        assert processor._bits is ready  # the call used the prepared mask: nothing consumed again
        assert torch.equal(got, reference.allowed(torch.tensor([prefix]), vocab))
    assert not torch.equal(
        rows[0].allowed(torch.tensor([prefixes[0]]), vocab), rows[1].allowed(torch.tensor([prefixes[1]]), vocab)
    )


def test_each_request_copy_of_a_template_has_its_own_matcher(loaded_model) -> None:
    llg, spec, vocab, ids = _setup(loaded_model)
    template = LLGuidanceProcessor(spec, llg)
    row = torch.tensor([[0, *ids[:4]]])
    used, fresh = copy.copy(template), copy.copy(template)  # as CompiledConstraint.new_processor makes them
    used.reset()
    fresh.reset()
    used(row[:, :1], torch.zeros(1, vocab))
    used(row, torch.zeros(1, vocab))
    start = fresh.allowed(row[:, :1], vocab)
    assert used.ll_matchers[0] is not fresh.ll_matchers[0]
    assert torch.equal(start, LLGuidanceProcessor(spec, llg).allowed(row[:, :1], vocab))
    assert not torch.equal(start, used.allowed(row, vocab))


def test_a_matcher_past_its_engine_s_limits_fails_the_row_naming_the_limit(loaded_model) -> None:
    # llguidance's parser rows hold at most 2,000 items: after "w", 2,500 alternatives are still open
    llg = llguidance.hf.from_tokenizer(loaded_model.tokenizer)
    grammar = "start: " + " | ".join(f'"w{i}"' for i in range(2500))
    processor = LLGuidanceProcessor(llg_backend.grammar("grammar", grammar), llg)
    (w,) = loaded_model.tokenizer("w", add_special_tokens=False)["input_ids"]
    assert processor.bits([0])[w >> 5] >> (w & 31) & 1  # the first mask allows "w"
    assert processor.stopped() is None
    with pytest.raises(
        UnsupportedConstraintError,
        match=r"^llguidance stopped the constraint after 1 token: .*max is 2000.*beyond llguidance.s limits",
    ):
        processor.bits([0, w])
    assert "max is 2000" in processor.stopped()


def test_a_regex_nothing_matches_fails_before_the_first_token(loaded_model) -> None:
    llg = llguidance.hf.from_tokenizer(loaded_model.tokenizer)
    for kind, text in [("regex", r"[^\s\S]"), ("grammar", "start: x\nx: x")]:
        processor = LLGuidanceProcessor(llg_backend.grammar(kind, text), llg)
        with pytest.raises(UnsupportedConstraintError, match="before the first token: no token .* no text matches"):
            processor.bits([0])


@pytest.mark.parametrize(
    "kind, text, refusal, reason",
    [
        ("regex", "b{1000000}", "unsupported", "lexer error: too many expressions constructed"),
        ("regex", r"[^\s\S]", "unsatisfiable", "no text matches the constraint"),
    ],
)
def test_a_constraint_stopped_at_its_first_masks_is_refused_while_it_compiles(
    loaded_model, kind: str, text: str, refusal: str, reason: str
) -> None:
    """llguidance builds `b{1000000}`'s lexer on the first mask (~0.4 s: a batch's step waited for it, and refused the
    request as past its budget, where a second request got the limit's own words) and stops only from the second
    mask on. The compile computes both: the limit is a refusal `auto` falls back from, no text matching one it does
    not; a constraint within the limits compiles as before."""
    llg = llg_backend.literal_tokenizer(loaded_model.tokenizer)
    with pytest.raises(
        EngineRefusal, match=f"^llguidance stopped the constraint before the first token: .*{reason}"
    ) as caught:
        llg_backend.BACKEND.rebuild_template(llg, kind, text, None)
    assert caught.value.kind == refusal
    assert llg_backend.BACKEND.rebuild_template(llg, "regex", "b{3}", None).bits([0]).any()


class _Stopped(bitmask.BitmaskProcessor):
    """An engine that stopped as it started (as llguidance does when its lexer outgrows its limits)."""

    engine = "an engine"

    def _start(self) -> None:
        pass

    def _fill(self, out: np.ndarray) -> None:
        out[:] = 0

    def stopped(self) -> str | None:
        return "too many states"


def test_an_engine_stopped_at_the_start_fails_before_the_first_token() -> None:
    with pytest.raises(
        UnsupportedConstraintError,
        match=r"^an engine stopped the constraint before the first token: too many states$",
    ):
        _Stopped(vocab_size=64).bits([1, 2, 3])


def test_xgrammar_masks_are_outlines_own_at_every_position(loaded_model) -> None:
    from outlines.backends.xgrammar import XGrammarLogitsProcessor

    from playground.constraints.backends import xgrammar

    _, _, vocab, ids = _setup(loaded_model)
    ours = xgrammar._template(
        xgrammar.BACKEND.worker_backend(loaded_model.tokenizer), "json_schema", json.dumps(SCHEMA)
    )
    theirs = XGrammarLogitsProcessor(ours.compiled_grammar, "torch")
    row, logits = [0], torch.randn(1, vocab)
    for token in [*ids, None]:
        with torch._dynamo.config.patch(disable=True):
            expected = theirs(torch.tensor([row]), logits.clone())
        assert torch.equal(ours(torch.tensor([row]), logits), expected)
        if token is not None:
            row.append(token)


def test_a_lone_row_s_prepared_mask_is_billed_its_cpu_time_not_the_wall_clock(loaded_model, monkeypatch) -> None:
    """Masks prepared beside the forward were billed in wall time: the forward and other processes sharing the
    cores made a lone request's 1 ms mask count 0.3 s, past the step's budget (a 422 on a busy machine)."""
    llg, spec, vocab, ids = _setup(loaded_model)
    row = LLGuidanceProcessor(spec, llg)
    row(torch.tensor([[0]]), torch.zeros(1, vocab))
    ticks = iter(range(0, 1000, 10))
    monkeypatch.setattr(bitmask.time, "perf_counter", lambda: float(next(ticks)))  # 10 s pass at every look
    bitmask.prepare([(row, [0, *ids[:3]])])
    assert 0 < row.prepared_s < 1


def test_rows_prepared_together_past_the_wall_limit_compute_their_own_masks_billed_in_cpu_time(
    loaded_model, monkeypatch
) -> None:
    """A pooled call is timed by the wall clock (its threads' CPU time is out of reach): on a loaded machine two
    rows of a one-key schema were billed 0.28 s each and refused. Past the limit their masks are dropped, and
    each row's own call computes its mask, where its CPU time is what counts."""
    llg, spec, vocab, ids = _setup(loaded_model)
    slow, fast = ([LLGuidanceProcessor(spec, llg) for _ in range(2)] for _ in range(2))
    reference = LLGuidanceProcessor(spec, llg)
    prefixes = [[0, *ids[:2]], [0, *ids[:3]]]
    for processor in [*slow, *fast, reference]:
        processor(torch.tensor([[0]]), torch.zeros(1, vocab))
    ticks = iter(range(0, 1000, 10))
    monkeypatch.setattr(bitmask.time, "perf_counter", lambda: float(next(ticks)))  # 10 s pass at every look
    bitmask.prepare(list(zip(slow, prefixes)), wall_limit_s=1.0)
    assert all(p._bits is None and p.prepared_s < 1 for p in slow)
    row, expected = (p.allowed(torch.tensor([prefixes[1]]), vocab) for p in (slow[1], reference))
    assert torch.equal(row, expected)
    bitmask.prepare(list(zip(fast, prefixes)), wall_limit_s=100.0)  # within it: the masks are kept, billed 10 s
    assert all(p._bits is not None and p.prepared_s >= 5 for p in fast)
