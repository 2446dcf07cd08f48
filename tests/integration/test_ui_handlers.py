"""The UI handlers on the embedded model through a real LocalProvider: what needs real decoding.

The conversation, errors, replays and snippets are tested on a FakeProvider in tests/unit/test_ui_handlers.py.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from playground.constraints.examples import PERSON_SCHEMA
from playground.models import EMBEDDED_FILE, embedded_gguf_path
from playground.providers.loading import LoadingPolicy
from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.render.chat import bubble_text
from playground.ui import controls, handlers
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
    assert bubble_text(final.chatbot[-1]).startswith('<pre class="pg-answer"><code>{')
    assert len(re.findall(r'class="tok[^"]*" data-index=', final.tokens)) == state.result.best.generated_tokens
    assert 'data-finish="eos_token"' in final.details and "via llguidance" in final.details


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


def test_model_picker_serves_loads_and_explains_failures(registry: Registry, monkeypatch) -> None:
    monkeypatch.setattr(registry, "loading", LoadingPolicy(allow_requests=True))  # the operator allowed it
    settings = UISettings()
    registry.load("embedded", "local")  # a request's load: listed once, by its id, and named as asked too
    assert {name for _, name in registry.models()} == {registry.default_model}
    assert registry.resolve("embedded")[0].provider_id == "local"
    assert [model for _, model in controls.model_choices(registry)] == [registry.default_model]
    assert [model for _, model in controls.model_choices(registry, "embedded")] == ["embedded"]
    assert "provider local" in controls.choose_model(registry, registry.default_model, settings)
    with pytest.raises(Exception, match="no-such-org/no-such-model"):
        controls.choose_model(registry, "no-such-org/no-such-model", settings)
    with pytest.raises(Exception, match="local paths are disabled"):
        controls.choose_model(registry, "/tmp/some/folder", UISettings(allow_local_paths=False))
    path = str(embedded_gguf_path())
    status = controls.choose_model(registry, path, settings)
    assert EMBEDDED_FILE in status
    assert path in {model for _, model in controls.model_choices(registry, path)}
    state = ChatState(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}])
    run_chat(
        registry,
        form(registry, kind="choice", constraint_text="a\nb").model_copy(update={"model": path}),
        state,
        "Pick",
    )
    assert len(state.messages) == 4 and state.result.model_id == EMBEDDED_FILE


def test_an_answer_breaking_an_unenforced_keyword_is_shown_with_a_red_verdict(registry: Registry) -> None:
    """auto reads uniqueItems leniently (llguidance does not implement it); its mask allows only the end of `[1, 1]`."""
    schema = '{"type": "array", "items": {"const": 1}, "minItems": 2, "maxItems": 2, "uniqueItems": true}'
    state = ChatState()
    final = run_chat(registry, form(registry, kind="json_schema", constraint_text=schema), state, "Two ones")[-1]
    assert final.error == "" and 'data-valid="invalid"' in final.verdict and "non-unique" in final.verdict
    assert "does not enforce every keyword" in final.details and state.tokens
    assert "llguidance does not enforce these keywords here (lenient)" in final.details  # which engine, which keyword
    assert "uniqueItems" in final.details
    assert json.loads(state.messages[-1]["content"]) == [1, 1]
    assert "bar-row" in handlers.next_token(registry, state)


def test_segment_kind_judges_each_segment_in_the_verdict(registry: Registry) -> None:
    """The segments kind: the JSON between <answer> tags is the schema's; the verdict lists the segment, escaped."""
    tag = {"begin": "<answer>", "end": "</answer>", "content": {"type": "json_schema", "json_schema": {"enum": [1, 2]}}}
    f = form(registry, kind="structural_tag", constraint_text=json.dumps({"format": {"type": "tag", **tag}}))
    final = run_chat(registry, f, ChatState(), "Pick one or two.")[-1]
    assert final.error == "" and 'data-valid="valid"' in final.verdict
    (segment,) = re.findall(r'<li class="pg-segment" data-valid="(\w+)">(.*?)</li>', final.verdict)
    assert segment[0] == "valid" and "<code>&lt;answer&gt;</code>" in segment[1]
    assert re.search(r"<pre>[12]</pre>", segment[1])
