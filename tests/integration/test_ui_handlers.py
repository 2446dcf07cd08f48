"""The UI handlers on the embedded model through a real LocalProvider: no browser, real decoding."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from playground.models import EMBEDDED_FILE, embedded_gguf_path
from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.ui import controls, handlers
from playground.ui.examples import PERSON_SCHEMA
from playground.ui.state import ChatState, Form, UISettings


@pytest.fixture
def registry(engine) -> Registry:
    """A fresh registry per test, so a model one test loads is not served to another."""
    return Registry([LocalProvider([engine])])


def form(registry: Registry, **kwargs) -> Form:
    return Form(model=registry.default_model, max_new_tokens=kwargs.pop("max_new_tokens", 40), **kwargs)


def run_chat(registry: Registry, f: Form, state: ChatState, text: str) -> list[handlers.Panels]:
    return list(handlers.chat(registry, f, state, text))


def test_schema_chat_streams_a_valid_json_answer(registry: Registry) -> None:
    state = ChatState()
    steps = run_chat(
        registry, form(registry, kind="json_schema", constraint_text=PERSON_SCHEMA), state, "Invent a person as JSON."
    )
    streamed = [s for s in steps if s.tokens and not s.details]
    final = steps[-1]
    assert len(streamed) >= 3, "tokens should arrive one by one"
    assert final.error == "" and 'data-valid="valid"' in final.verdict
    answer = json.loads(state.messages[-1]["content"])
    jsonschema.validate(answer, json.loads(PERSON_SCHEMA))
    assert final.chatbot[-1]["content"].startswith('<pre class="pg-answer"><code>{')
    assert len(re.findall(r'class="tok[^"]*" data-index=', final.tokens)) == state.result.best.generated_tokens
    assert 'data-finish="eos_token"' in final.details and "via llguidance" in final.details


def test_invalid_schema_is_refused_before_anything_is_sent(registry: Registry) -> None:
    state = ChatState()
    steps = run_chat(registry, form(registry, kind="json_schema", constraint_text='{"type": 5}'), state, "hi")
    assert len(steps) == 1 and "not a valid JSON Schema" in steps[0].error
    assert state.messages == [] and state.result is None


def test_an_engine_error_restores_the_conversation_and_the_input(registry: Registry) -> None:
    state = ChatState()
    steps = run_chat(registry, form(registry, best_of=2), state, "hello")
    assert "best_of &gt; 1 needs sampling" in steps[-1].error
    assert state.messages == [] and steps[-1].input_text == "hello"


def test_best_of_three_lists_three_candidates_with_seeds(registry: Registry) -> None:
    state = ChatState()
    f = form(registry, kind="choice", constraint_text="red\ngreen\nblue", do_sample=True, seed=7, best_of=3)
    final = run_chat(registry, f, state, "Pick a colour.")[-1]
    assert final.error == ""
    rows = re.findall(r'<tr class="cand( chosen)?">(.*?)</tr>', final.bestof)
    assert len(rows) == 3 and [bool(c) for c, _ in rows] == [True, False, False]
    assert all("✓ valid" in row for _, row in rows)
    seeds = {s.seed for s in [state.result.best, *state.result.best_of_sequences]}
    assert seeds == {7, 8, 9}


def test_best_of_candidates_may_finish_at_different_lengths(registry: Registry) -> None:
    state = ChatState()
    f = form(registry, kind="choice", constraint_text="positive\nnegative\nneutral", do_sample=True, seed=1, best_of=3)
    final = run_chat(registry, f, state, "Sentiment of: 'I loved this movie!'")[-1]
    assert final.error == ""
    texts = [s.generated_text for s in [state.result.best, *state.result.best_of_sequences]]
    assert len(texts) == 3 and set(texts) <= {"positive", "negative", "neutral"}


def test_retry_undo_and_clear_edit_the_conversation(registry: Registry) -> None:
    state = ChatState()
    f = form(registry, kind="choice", constraint_text="yes\nno")
    run_chat(registry, f, state, "Is water wet?")
    assert [m["role"] for m in state.messages] == ["user", "assistant"]
    final = list(handlers.retry(registry, f, state))[-1]
    assert [m["content"] for m in state.messages][0] == "Is water wet?" and len(state.messages) == 2
    assert state.messages[1]["content"] in ("yes", "no") and final.error == ""
    broken = f.model_copy(update={"kind": "regex", "constraint_text": "("})
    failed = list(handlers.retry(registry, broken, state))
    assert len(failed) == 1 and "invalid regex" in failed[0].error and len(state.messages) == 2
    undone = handlers.undo(state)
    assert undone.input_text == "Is water wet?" and undone.state.messages == []
    cleared = handlers.clear(ChatState(messages=[{"role": "user", "content": "x"}], mode="raw"))
    assert cleared.state.messages == [] and cleared.state.mode == "raw" and cleared.chatbot == []


def test_conversation_is_sent_as_chat_history(registry: Registry) -> None:
    state = ChatState()
    f = form(registry, kind="choice", constraint_text="4\n5")
    run_chat(registry, f, state, "What is 2+2?")
    run_chat(registry, f, state, "And 2+3?")
    sent = state.request.inputs
    assert [m.role for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[1].content == "What is 2+2?" and sent[3].content == "And 2+3?"


def test_next_token_chart_at_the_prompt_end_and_at_a_token(registry: Registry) -> None:
    state = ChatState()
    assert "Send a message" in handlers.next_token(registry, state)
    run_chat(registry, form(registry, kind="json_schema", constraint_text=PERSON_SCHEMA), state, "A person as JSON.")
    start = handlers.next_token(registry, state)
    assert "at the end of the prompt" in start and start.count('class="bar-row') >= 2
    assert "masked" in start  # the model wanted prose; the schema only allows '{'
    second = handlers.next_token(registry, state, 1)
    assert "at token #1" in second and "bar-row" in second
    assert "out of range" in handlers.next_token(registry, state, 999)


def test_mode_toggle_recolours_the_tokens(registry: Registry) -> None:
    state = ChatState()
    run_chat(registry, form(registry, kind="json_schema", constraint_text=PERSON_SCHEMA), state, "A person as JSON.")
    state, raw = handlers.set_mode(state, "raw")
    state, constrained = handlers.set_mode(state, "constrained")
    assert 'data-mode="raw"' in raw and 'data-mode="constrained"' in constrained and raw != constrained


def test_compare_judges_both_answers_by_the_constraint(registry: Registry) -> None:
    f = form(registry, kind="regex", constraint_text=r"[0-9]{3}", max_new_tokens=12)
    left, right = handlers.compare(registry, f, ChatState(), "Say hello.")
    assert "unconstrained" in left and 'data-valid="invalid"' in left
    assert "constrained" in right and 'data-valid="valid"' in right


def test_custom_processor_bans_a_string(registry: Registry) -> None:
    state = ChatState()
    f = form(registry, kind="processor", processor="ban_strings", processor_params="e\nE", max_new_tokens=24)
    final = run_chat(registry, f, state, "Describe the weather in three sentences.")[-1]
    answer = state.messages[-1]["content"]
    assert final.error == "" and answer and "e" not in answer.lower()
    assert state.request.params.logits_processors[0].name == "ban_strings"


def test_unknown_processor_is_a_clear_error(registry: Registry) -> None:
    final = run_chat(registry, form(registry, kind="processor", processor="nope"), ChatState(), "hi")[-1]
    assert "unknown logits processor &#x27;nope&#x27;" in final.error


def test_model_picker_serves_loads_and_explains_failures(registry: Registry) -> None:
    settings = UISettings()
    assert "provider local" in controls.choose_model(registry, registry.default_model, settings)
    with pytest.raises(Exception, match="no-such-org/no-such-model"):
        controls.choose_model(registry, "no-such-org/no-such-model", settings)
    with pytest.raises(Exception, match="local paths are disabled"):
        controls.choose_model(registry, "/tmp/some/folder", UISettings(allow_local_paths=False))
    path = str(embedded_gguf_path())
    status = controls.choose_model(registry, path, settings)
    assert EMBEDDED_FILE in status
    assert path in {model for _, model in controls.model_choices(registry)}
    state = ChatState(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])
    run_chat(
        registry,
        form(registry, kind="choice", constraint_text="a\nb").model_copy(update={"model": path}),
        state,
        "Pick",
    )
    assert len(state.messages) == 4 and state.result.model_id == EMBEDDED_FILE


def test_code_snippets_reproduce_the_last_turn(registry: Registry) -> None:
    state = ChatState()
    f = form(registry, kind="regex", constraint_text=r"[a-z]+")
    run_chat(registry, f, state, "One word.")
    code = controls.code_snippets(registry, f, state, UISettings(base_url="http://h:1"))
    assert (
        "http://h:1/generate" in code["curl_generate"]
        and json.dumps(state.result.prompt)[1:20] in code["curl_generate"]
    )
    assert "'One word.'" in code["openai"] and "'regex': '[a-z]+'" in code["openai"]


def test_session_file_round_trip(registry: Registry, tmp_path) -> None:
    f = form(registry, kind="regex", constraint_text="[a-z]+", seed=3)
    state = ChatState(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    path = controls.export_file(f, state)
    loaded, fresh = controls.import_file(path)
    assert loaded == f and fresh.messages == state.messages
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(Exception, match="not a session file"):
        controls.import_file(str(bad))
