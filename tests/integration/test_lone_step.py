"""The lean step on the embedded model (its CPU weight layouts included): the model's own logprobs.

A model of its own: the session's gets PEFT adapter layers injected by the adapter tests, after which its
lone rows rightly take the model's forward.
"""

from __future__ import annotations

import copy

import torch

from playground.decoding.runner import ModelRunner
from playground.models import llama_step, load_model
from playground.types import ChatMessage


def test_the_embedded_models_lone_step_gives_its_forwards_logprobs(engine, monkeypatch) -> None:
    runner = ModelRunner(load_model("embedded", threads=1))
    _, ids = engine.encode_prompt([ChatMessage(role="user", content="Name a colour.")])
    # the cache concatenates for two steps, then grows in place (as a long chat's does from ROOM_FROM positions)
    monkeypatch.setattr(llama_step, "ROOM_FROM", len(ids) + 2)
    with torch.inference_mode():
        _, ours = runner.forward(runner.ids(ids))
        theirs = copy.deepcopy(ours)
        for position, token in enumerate([504, 2114, 30], start=len(ids)):
            got = runner.lone_step(token, position, ours)
            assert got is not None  # the embedded model is a plain Llama: the step applies
            want, theirs = runner.forward(runner.ids([token]), theirs)
            torch.testing.assert_close(
                torch.log_softmax(got[0, -1], -1), torch.log_softmax(want[0, -1], -1), atol=1e-4, rtol=0
            )
        forced = [28, 17, 2114, 504, 30, 28, 17, 30, 11]  # fast-forwarded tokens: one step, causal among them
        positions = torch.arange(len(forced)).add(len(ids) + 3).unsqueeze(0)
        got = runner.lean_step([forced], positions, ours)
        want, theirs = runner.forward(runner.ids(forced), theirs, keep=len(forced))
        assert got is not None and got.shape == want.shape
        torch.testing.assert_close(torch.log_softmax(got[0], -1), torch.log_softmax(want[0], -1), atol=1e-4, rtol=0)
