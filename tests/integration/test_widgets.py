"""The Playground widget's Python side on the embedded model: runs, results, traits and errors."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from playground.errors import InvalidConstraintError, ParameterError, ProviderError
from playground.providers.registry import Registry
from playground.providers.tgi import TGIConfig, TGIProvider
from playground.types import GenerationResult
from tests.support import free_port
from widgets import Playground, TokenView, local_provider
from widgets.token_view import result_payload

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def embedded() -> tuple:
    """The widgets' shared local provider for the embedded model (loaded once per process)."""
    return local_provider("embedded")


def test_run_gives_a_valid_json_answer_and_fills_the_traits(embedded) -> None:
    pg = Playground(model="embedded", max_new_tokens=40, top_n_tokens=3)
    assert pg.model == embedded[1] and pg.models == [embedded[1]]
    pg.constraint_kind = "json_schema"
    pg.constraint_text = json.dumps(SCHEMA)
    pg.prompt = "Invent a person and describe them as JSON."
    assert pg.constraint_problem == ""
    result = pg.run()
    assert pg.error == "" and pg.running is False
    assert isinstance(result, GenerationResult) and pg.result is result
    answer = json.loads(result.generated_text)
    jsonschema.validate(answer, SCHEMA)
    assert result.best.validation.valid is True and result.constraint_kind == "json_schema"
    assert pg.result_json == result_payload(result)
    assert all(len(token.raw_top_tokens) == 3 for token in result.best.tokens)
    assert pg.messages == [
        {"role": "user", "content": "Invent a person and describe them as JSON."},
        {"role": "assistant", "content": result.generated_text},
    ]
    assert pg.prompt == ""
    assert pg.next_token_position == -1 and pg.next_token["prefix"] == ""
    assert 0.0 < pg.next_token["mass_kept"] <= 1.0 and pg.next_token["candidates"]
    assert any(c["allowed"] for c in pg.next_token["candidates"])


def test_clicked_token_moves_the_next_token_view(embedded) -> None:
    pg = Playground(model="embedded", mode="prompt", max_new_tokens=6, prompt="The capital of France is")
    pg.constraint_kind = "choice"
    pg.constraint_text = "Paris\nLondon\nBerlin"
    result = pg.run()
    assert result is not None and result.generated_text in {"Paris", "London", "Berlin"}
    assert pg.messages == [] and pg.prompt == "The capital of France is"
    pg.next_token_position = 1
    assert pg.error == ""
    assert pg.next_token["prefix"] == result.best.tokens[0].text
    assert pg.distribution is not None and pg.distribution.prefix == result.best.tokens[0].text


def test_run_button_trait_with_best_of_and_regex(embedded) -> None:
    pg = Playground(
        model="embedded",
        mode="prompt",
        prompt="My favourite number is",
        max_new_tokens=4,
        do_sample=True,
        temperature=0.8,
        seed=3,
        best_of=2,
        constraint_kind="regex",
        constraint_text=r" \d{1,3}",
    )
    pg.run_requested += 1
    assert pg.error == ""
    result = pg.result
    assert result is not None and len(result.best_of_sequences) == 1
    for seq in (result.best, *result.best_of_sequences):
        assert re.fullmatch(r" \d{1,3}", seq.generated_text) and seq.validation.valid is True
    assert len(pg.result_json["best_of_sequences"]) == 1
    view = TokenView(result)
    assert view.result == pg.result_json and "<script" not in view._repr_html_()


def test_invalid_schema_is_shown_in_the_error_trait(embedded) -> None:
    pg = Playground(model="embedded", prompt="Hi")
    pg.constraint_kind = "json_schema"
    pg.constraint_text = '{"type": "objekt"}'
    assert pg.constraint_problem.startswith("not a valid JSON Schema")
    pg.run_requested += 1
    assert pg.error.startswith("InvalidConstraintError: not a valid JSON Schema")
    assert pg.result is None and pg.running is False
    pg.constraint_text = '{"type": '
    assert "JSON" in pg.constraint_problem
    with pytest.raises(InvalidConstraintError):
        pg.run()
    assert pg.error.startswith("InvalidConstraintError:") and pg.running is False
    assert "Playground" not in pg._repr_html_() and "sp-error" in pg._repr_html_()


def test_bad_parameters_and_empty_prompt_are_shown(embedded) -> None:
    pg = Playground(model="embedded", prompt="Hi", best_of=2, max_new_tokens=3)
    with pytest.raises(ParameterError, match="best_of > 1 needs sampling"):
        pg.run()
    assert pg.error.startswith("ParameterError: parameters.best_of: best_of > 1 needs sampling: set do_sample")
    pg.best_of, pg.do_sample, pg.temperature = 1, True, 0.0
    assert pg.run(raise_errors=False) is None and pg.error.startswith("ParameterError: temperature:")
    pg.temperature, pg.prompt = 0.7, "  "
    assert pg.run(raise_errors=False) is None
    assert pg.error == "ParameterError: the prompt is empty: type something to send"


def test_unreachable_provider_fails_inside_the_widget() -> None:
    config = TGIConfig(
        base_url=f"http://127.0.0.1:{free_port()}", model="remote-model", discover_models=False, timeout_s=5
    )
    pg = Playground(provider=TGIProvider("down", config), prompt="Hi", max_new_tokens=3)
    assert pg.model == "remote-model"
    with pytest.raises(ProviderError):
        pg.run()
    assert pg.error.startswith("ProviderError: provider 'down' failed:")
    assert pg.result is None and pg.running is False


def test_registry_models_and_shared_weights(embedded) -> None:
    provider, model_id = embedded
    assert Playground(model="embedded")._provider is provider
    pg = Playground(registry=Registry([provider]))
    assert pg.model == model_id and pg.models == [model_id]
    pg.model = "nobody-serves-this"
    assert pg.error.startswith("ModelError: no provider serves model 'nobody-serves-this'")
    pg.model = model_id
    assert pg.error == ""


def test_a_provider_without_a_next_token_view_still_shows_the_answer(embedded) -> None:
    from playground.errors import UnsupportedConstraintError

    provider, model_id = embedded

    class NoDistribution:
        """The embedded model behind a provider that, like remote ones, can't give a constrained distribution."""

        provider_id, provider_type = "remote-like", "remote::openai"

        def list_models(self):
            return [model_id]

        def generate(self, model, inputs, params):
            return provider.generate(model, inputs, params)

        def next_token(self, model, inputs, params, *, prefix="", top_k=20):
            raise UnsupportedConstraintError("provider 'remote-like' cannot give a constrained next-token distribution")

    pg = Playground(provider=NoDistribution(), model=model_id, prompt="Yes or no?", max_new_tokens=3)
    pg.constraint_kind, pg.constraint_text = "choice", "yes\nno"
    result = pg.run()
    assert result.generated_text in ("yes", "no") and pg.error == ""
    assert "cannot give a constrained next-token distribution" in pg.next_token["unavailable"]
