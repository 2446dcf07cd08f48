"""Walks of text through a constraint outside decoding are bounded and never hold the model.

On the old code /next_token walked its prefix through the constraint while holding the model (25 s for a
4,096-character prefix, every other request waiting), and /reason walked any prefix without a cap.
"""

from __future__ import annotations

import threading

import pytest

from playground.debug.check import check_text
from playground.debug.why import MAX_PREFIX_TOKENS, reasons_at
from playground.decoding import row_budget
from playground.errors import InvalidConstraintError, ParameterError, WorkBudgetError
from playground.types import ChatMessage, GenerateParameters, GrammarType

DIGITS = GrammarType(type="regex", value="[0-9]{0,5000}")
PROMPT = [ChatMessage(role="user", content="Count.")]


def test_the_next_token_prefix_walk_does_not_hold_the_model(engine) -> None:
    params = GenerateParameters(grammar=DIGITS)
    outcome: list = []

    def refused_prefix() -> None:
        try:
            engine.next_token_distribution(PROMPT, params, prefix="12x")
        except InvalidConstraintError as exc:
            outcome.append(exc)

    with engine._busy:  # the batch is mid-step: the walk goes on without the model
        thread = threading.Thread(target=refused_prefix)
        thread.start()
        thread.join(60)
        assert outcome and "prefix: token 2 ('x') is refused" in outcome[0].message
    assert not thread.is_alive()


def test_walks_past_their_cpu_budget_are_refused(engine, monkeypatch) -> None:
    monkeypatch.setattr(row_budget, "WALK_CPU_S", 0.0)
    with pytest.raises(WorkBudgetError, match="walking the text"):
        reasons_at(engine, DIGITS, "1234", [15])
    with pytest.raises(WorkBudgetError):
        check_text(engine, DIGITS, "1234")
    with pytest.raises(WorkBudgetError):
        engine.next_token_distribution(PROMPT, GenerateParameters(grammar=DIGITS), prefix="1234")


def test_the_reason_prefix_has_a_token_cap(engine) -> None:
    with pytest.raises(ParameterError, match=f"at most {MAX_PREFIX_TOKENS} tokens"):
        reasons_at(engine, DIGITS, "1 " * (MAX_PREFIX_TOKENS + 10), [15])


def test_a_long_next_token_prefill_lets_the_batch_step_between_chunks(engine, monkeypatch) -> None:
    from playground.decoding import engine as engine_module
    from playground.decoding.prefix_cache import PrefixCache

    monkeypatch.setattr(engine_module, "PREFILL_CHUNK", 8)
    monkeypatch.setattr(engine, "prefix_cache", PrefixCache(0))
    takes = []
    lock = engine._busy

    class Counting:
        def __enter__(self):
            takes.append(1)
            return lock.__enter__()

        def __exit__(self, *exc):
            return lock.__exit__(*exc)

    monkeypatch.setattr(engine, "_busy", Counting())
    whole = engine.next_token_distribution(PROMPT, GenerateParameters(), prefix="12 34 56 78 90 12 34 56")
    assert len(takes) >= 3  # the model was taken a chunk at a time, never for the whole prefill
    monkeypatch.setattr(engine_module, "PREFILL_CHUNK", 10_000)
    once = engine.next_token_distribution(PROMPT, GenerateParameters(), prefix="12 34 56 78 90 12 34 56")
    assert [c.id for c in whole.candidates[:5]] == [c.id for c in once.candidates[:5]]
