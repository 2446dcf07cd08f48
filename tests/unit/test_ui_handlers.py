"""The UI handlers on a FakeProvider: the conversation, errors, replays and snippets, without a model."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from playground.errors import ParameterError, UnenforcedKeywordError
from playground.providers.base import Capabilities, Provider
from playground.providers.loading import LoadingPolicy
from playground.providers.registry import Registry
from playground.render.chat import bubble_text
from playground.types import TokenEvent
from playground.ui import controls, handlers
from playground.ui.downloads import Downloads
from playground.ui.state import ChatState, Form, UISettings
from tests.fakes import FakeProvider


def setup(answer: str = "yes", **kwargs) -> tuple[Registry, FakeProvider]:
    fake = FakeProvider(answer, **kwargs)
    return Registry([fake]), fake


def form(**kwargs) -> Form:
    return Form(model="fake-model", max_new_tokens=kwargs.pop("max_new_tokens", 8), **kwargs)


def run_chat(registry: Registry, f: Form, state: ChatState, text: str) -> list[handlers.Panels]:
    return list(handlers.chat(registry, f, state, text))


def test_a_turn_streams_then_shows_every_panel() -> None:
    registry, fake = setup("no")
    state = ChatState()
    steps = run_chat(registry, form(kind="choice", constraint_text="yes\nno", min_p=0.2), state, "Is it?")
    streamed = [s for s in steps if s.tokens and s.details is None]  # one panel per token as it arrives
    assert len(streamed) == 2 and steps[-1].error == "" and 'data-valid="valid"' in steps[-1].verdict
    assert state.messages[-1]["content"] == "no"
    sent = fake.calls[-1]
    assert sent.method == "stream" and sent.params.min_p == 0.2 and sent.params.grammar.type == "choice"


def test_a_long_answer_streams_in_updates_that_grow_with_it() -> None:
    """Each update re-sends the whole token panel: one per token made a 1,024-token answer send ~64 MB of HTML.
    Decoded at once, 400 tokens now take ~16 updates per doubling; a short answer still shows every token."""
    registry, _ = setup("x" * 400)
    steps = run_chat(registry, form(max_new_tokens=400), ChatState(), "go")
    streamed = [s for s in steps if s.tokens and s.details is None]
    assert 16 <= len(streamed) <= 16 * 6, len(streamed)
    shown = [s.tokens.count("data-index") for s in streamed]
    assert shown[:16] == list(range(1, 17)) and shown == sorted(shown)
    assert handlers._due(0, 1, 0.0) and not handlers._due(160, 169, 0.1) and handlers._due(160, 169, 0.6)


def test_invalid_schema_is_refused_before_anything_is_sent() -> None:
    registry, fake = setup()
    state = ChatState()
    steps = run_chat(registry, form(kind="json_schema", constraint_text='{"type": 5}'), state, "hi")
    assert len(steps) == 1 and "not a valid JSON Schema" in steps[0].error
    assert state.messages == [] and state.result is None and fake.calls == []


def test_a_provider_error_restores_the_conversation_and_the_input() -> None:
    registry, _ = setup(error=ParameterError("parameters.best_of: best_of > 1 needs sampling"))
    state = ChatState()
    steps = run_chat(registry, form(), state, "hello")
    assert "best_of &gt; 1 needs sampling" in steps[-1].error
    assert state.messages == [] and steps[-1].input_text == "hello"


def test_best_of_runs_to_completion_instead_of_streaming() -> None:
    registry, fake = setup()
    run_chat(registry, form(do_sample=True, best_of=2), ChatState(), "hi")
    assert [c.method for c in fake.calls] == ["generate"]


def test_a_local_best_of_turn_streams_so_stop_ends_it() -> None:
    """Stop ran every candidate to its end, then threw the answer away ("stopped after 0 tokens")."""
    registry, fake = setup("abcdefgh", capabilities=Capabilities(decodes_here=True))
    state = ChatState()
    turn = handlers.chat(registry, form(do_sample=True, best_of=2), state, "go")
    [next(turn) for _ in range(3)]  # the empty panels, then two tokens
    handlers.request_stop(state, 2)
    assert "stopped by the user" in list(turn)[-1].verdict
    assert [c.method for c in fake.calls] == ["stream"] and state.messages[-1]["content"] == "ab"


def test_a_provider_that_cannot_stream_is_asked_for_the_whole_answer() -> None:
    registry, fake = setup(capabilities=Capabilities(streaming=False))
    assert isinstance(fake, Provider)  # the fake implements the protocol and nothing more
    steps = run_chat(registry, form(), ChatState(), "hi")
    assert [c.method for c in fake.calls] == ["generate"] and steps[-1].error == ""


def test_retry_undo_and_clear_edit_the_conversation() -> None:
    registry, _ = setup()
    state = ChatState()
    f = form(kind="choice", constraint_text="yes\nno")
    run_chat(registry, f, state, "Is water wet?")
    assert [m["role"] for m in state.messages] == ["user", "assistant"]
    final = list(handlers.retry(registry, f, state))[-1]
    assert state.messages[0]["content"] == "Is water wet?" and len(state.messages) == 2 and final.error == ""
    broken = f.model_copy(update={"kind": "regex", "constraint_text": "("})
    failed = list(handlers.retry(registry, broken, state))
    assert len(failed) == 1 and "invalid regex" in failed[0].error and len(state.messages) == 2
    undone = handlers.undo(state)
    assert undone.input_text == "Is water wet?" and undone.state.messages == []
    cleared = handlers.clear(ChatState(messages=[{"role": "user", "content": "x"}], mode="raw"))
    assert cleared.state.messages == [] and cleared.state.mode == "raw" and cleared.chatbot == []


def test_conversation_is_sent_as_chat_history() -> None:
    registry, fake = setup("4")
    state = ChatState()
    run_chat(registry, form(), state, "What is 2+2?")
    run_chat(registry, form(), state, "And 2+3?")
    sent = fake.calls[-1].inputs
    assert [m.role for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[1].content == "What is 2+2?" and sent[2].content == "4" and sent[3].content == "And 2+3?"


def test_next_token_chart_replays_the_last_request_at_a_prefix() -> None:
    registry, fake = setup("abc")
    state = ChatState()
    assert "Send a message" in handlers.next_token(registry, state)
    run_chat(registry, form(do_sample=True, best_of=2), state, "hi")
    start = handlers.next_token(registry, state)
    assert "at the end of the prompt" in start and "masked" in start and "<b>no</b>" not in start
    second = handlers.next_token(registry, state, 2)
    assert (
        "at token #2 (&quot;c&quot;)" in second and fake.calls[-1].extra["prefix"] == "ab"
    )  # quoted as JSON, as the widget does
    assert fake.calls[-1].params.best_of is None  # one distribution, not best_of of them
    assert "out of range" in handlers.next_token(registry, state, 999)


def test_the_answers_own_chart_never_replaces_a_chart_the_user_asked_for() -> None:
    registry, _ = setup("abc")
    state = ChatState()
    run_chat(registry, form(), state, "hi")
    assert "at the end of the prompt" in handlers.answer_chart(registry, state)
    assert "at token #1" in handlers.token_chart(registry, state, 1)  # a click before the answer's chart came
    assert handlers.answer_chart(registry, state) is None  # the UI then leaves the panel as it is
    run_chat(registry, form(), state, "again")  # a new turn: its answer's chart is drawn again
    assert "at the end of the prompt" in handlers.answer_chart(registry, state)


def test_code_snippets_reproduce_the_last_turn() -> None:
    registry, _ = setup()
    state = ChatState()
    f = form(kind="regex", constraint_text=r"[a-z]+", min_p=0.1)
    run_chat(registry, f, state, "One word.")
    code = controls.code_snippets(registry, f, state, UISettings(base_url="http://h:1"))
    assert (
        "http://h:1/generate" in code["curl_generate"]
        and json.dumps(state.result.prompt)[1:10] in code["curl_generate"]
    )
    assert (
        "'One word.'" in code["openai"] and "'regex': '[a-z]+'" in code["openai"] and "'min_p': 0.1" in code["openai"]
    )


def test_model_status_names_the_provider_and_loading_needs_a_loader() -> None:
    registry, _ = setup(capabilities=Capabilities(constraint_kinds=frozenset({"json_schema", "regex"})))
    status = controls.choose_model(registry, "fake-model", UISettings())
    assert "provider fake (fake)" in status and "enforces json_schema, regex" in status
    with pytest.raises(Exception, match="local paths are disabled"):
        controls.choose_model(registry, "/tmp/some/folder", UISettings(allow_local_paths=False))
    with pytest.raises(Exception, match="loading other models is disabled"):
        controls.choose_model(registry, "org/model", UISettings(allow_model_loading=False))


def test_a_provider_that_loads_models_is_asked_to_load() -> None:
    loader = FakeProvider(
        provider_id="loader", capabilities=Capabilities(model_loading=True), models=(), addable=("org/m",)
    )
    registry = Registry([FakeProvider(), loader])
    registry.loading = LoadingPolicy(allow_requests=True)  # the one rule: the operator's policy, as for the API
    assert "org/m" in controls.choose_model(registry, "org/m", UISettings())
    assert registry.resolve("org/m")[0] is loader


def test_session_file_round_trip(tmp_path) -> None:
    f = form(kind="regex", constraint_text="[a-z]+", seed=3, min_p=0.05)
    state = ChatState(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    loaded, fresh = controls.import_file(controls.export_file(f, state, Downloads(tmp_path)))
    assert loaded == f and fresh.messages == state.messages
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(Exception, match="not a session file"):
        controls.import_file(str(bad))


class EndedByTheGate(FakeProvider):
    """Streams its answer's tokens, then fails as the engine does when the text broke an unenforced keyword."""

    def stream(self, model, inputs, params):
        for event in super().stream(model, inputs, params):
            if not isinstance(event, TokenEvent):
                raise UnenforcedKeywordError("the output breaks the schema ([1, 1] has non-unique elements)")
            yield event


class ReasonedThenEnded(EndedByTheGate):
    """Every token in the reasoning, then the engine's end: no answer token came."""

    def stream(self, model, inputs, params):
        for event in super().stream(model, inputs, params):
            yield event.model_copy(update={"token": event.token.model_copy(update={"segment": "reasoning"})})


def test_an_answer_ended_within_its_reasoning_is_empty_not_the_placeholder() -> None:
    registry = Registry([ReasonedThenEnded("[1, 1]")])
    state = ChatState()
    run_chat(registry, form(kind="regex", constraint_text="x"), state, "Two numbers")
    assert state.tokens and state.messages[-1]["content"] == ""


def test_an_answer_the_engine_had_to_end_shows_its_text_tokens_and_a_red_verdict() -> None:
    registry = Registry([EndedByTheGate("[1, 1]")])
    state = ChatState()
    schema = '{"type": "array", "items": {"type": "integer", "multipleOf": 1}, "uniqueItems": true}'
    final = run_chat(registry, form(kind="json_schema", constraint_text=schema), state, "Two numbers")[-1]
    assert final.error == "" and final.running is False
    assert state.messages[-1]["content"] == "[1, 1]" and "[1, 1]" in bubble_text(final.chatbot[-1])
    assert len(re.findall(r'class="tok[^"]*" data-index=', final.tokens)) == 6
    assert 'data-valid="invalid"' in final.verdict and "pg-bad" in final.verdict
    assert "non-unique elements" in final.details and 'data-finish="unenforced"' in final.details
    assert state.request is not None and len(state.tokens) == 6  # the next-token chart has a turn to replay
    assert "bar-row" in handlers.next_token(registry, state)  # and it draws


def test_a_stop_during_the_stream_ends_the_answer_at_the_screens_tokens() -> None:
    registry, _ = setup("abcdefgh")
    state = ChatState()
    turn = handlers.chat(registry, form(), state, "go")
    steps = [next(turn) for _ in range(6)]  # the empty panels, then five tokens
    handlers.request_stop(state, 3)  # the screen showed three of them at the click
    rest = list(turn)
    assert len(rest) == 1 and "stopped by the user" in rest[0].verdict and len(steps) == 6
    assert [t.text for t in state.tokens] == list("abc") and state.messages[-1]["content"] == "abc"
    assert asyncio.run(handlers.finish_stop(state)) is None  # the turn honoured it: nothing left to cut
    assert state.messages[-1]["content"] == "abc" and not state.stop_requested


def test_a_stop_before_any_answer_token_leaves_an_empty_answer_not_the_placeholder() -> None:
    """Stopped before its answer's first token (a thinking model in its reasoning), the turn kept the "…" shown while
    waiting as the assistant's message: the next turn, the session file and the Code tab sent it as its words."""
    registry, fake = setup("abcdefgh")
    state = ChatState()
    turn = handlers.chat(registry, form(), state, "go")
    [next(turn) for _ in range(3)]  # the empty panels, then two tokens
    handlers.request_stop(state, 0)  # the screen showed none of them
    assert "stopped by the user" in list(turn)[-1].verdict
    assert state.tokens == [] and state.messages[-1]["content"] == ""
    run_chat(registry, form(), state, "again")
    assert fake.calls[-1].inputs[-2].content == ""  # what the next turn sends for it


def test_a_stop_from_a_screen_behind_a_finished_turn_cuts_the_answer_to_that_screen() -> None:
    registry, _ = setup("abcdefgh")
    state = ChatState()
    steps = run_chat(registry, form(), state, "go")
    assert state.result is not None and "no constraint" in steps[-1].verdict
    handlers.request_stop(state, 2)  # the screen was still at two tokens when the whole answer was in
    panels = asyncio.run(handlers.finish_stop(state))
    assert panels is not None and "stopped by the user" in panels.verdict and panels.running is False
    assert [t.text for t in state.tokens] == list("ab") and state.messages[-1]["content"] == "ab"
    assert state.result is None and not state.stop_requested
    handlers.request_stop(state, 2)  # a second click of the same screen: already cut
    assert asyncio.run(handlers.finish_stop(state)) is None and state.messages[-1]["content"] == "ab"


def test_a_stop_whose_turn_failed_leaves_the_answer_before_it_whole() -> None:
    registry, fake = setup("abcdefgh")
    state = ChatState()
    run_chat(registry, form(), state, "first")
    fake.error = ParameterError("parameters.best_of: best_of > 1 needs sampling")
    turn = handlers.chat(registry, form(), state, "second")
    next(turn)
    handlers.request_stop(state, 2)
    assert "needs sampling" in list(turn)[-1].error
    assert asyncio.run(handlers.finish_stop(state)) is None
    assert state.messages[-1]["content"] == "abcdefgh" and state.result is not None


def test_a_stop_from_a_screen_that_showed_nothing_cuts_to_nothing_and_a_stuck_turn_is_not_waited_for() -> None:
    registry, _ = setup("abcdefgh")
    state = ChatState()
    run_chat(registry, form(), state, "go")
    handlers.request_stop(state, 0)  # a best_of turn shows no token until its end
    panels = asyncio.run(handlers.finish_stop(state))
    assert panels is not None and state.tokens == [] and "stopped by the user" in panels.verdict
    state.running, state.answered = True, True  # a turn that never reaches an event to honour the Stop at
    handlers.request_stop(state, 1)
    assert asyncio.run(handlers.finish_stop(state, wait_s=0.05)) is None and state.running
