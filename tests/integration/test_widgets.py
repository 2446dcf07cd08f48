"""The Playground widget's Python side on the embedded model: runs, results, traits and errors."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import pytest
import traitlets

from playground.errors import ParameterError
from playground.providers.registry import Registry
from playground.types import GenerationResult
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


def test_a_token_of_another_candidate_shows_that_candidate_s_next_token_view(embedded) -> None:
    pg = Playground(model="embedded", mode="prompt", prompt="Once upon a time", max_new_tokens=4, do_sample=True)
    pg.temperature, pg.seed, pg.best_of = 1.5, 7, 2
    result = pg.run()
    (other,) = result.best_of_sequences
    assert other.tokens[0].text != result.best.tokens[0].text  # (seeds 7 and 8 start apart)
    with pg.hold_trait_notifications():  # as the browser sends a click: both traits in one message
        pg.next_token_sequence, pg.next_token_position = 1, 1
    assert pg.next_token["prefix"] == other.tokens[0].text
    pg.next_token_position = -1
    assert pg.next_token["prefix"] == ""
    pg.run()
    assert pg.next_token_sequence == 0 and pg.next_token_position == -1


def test_chat_run_again_regenerates_the_last_answer_and_bad_messages_name_the_field(embedded) -> None:
    pg = Playground(model="embedded", max_new_tokens=3, do_sample=True, seed=1, prompt="Is the sky blue?")
    pg.constraint_kind, pg.constraint_text = "choice", "yes\nno\nmaybe"
    first = pg.run()
    pg.seed = 2
    again = pg.run()  # no new message: the last answer again, from the conversation before it
    assert again.prompt == first.prompt  # (it ended with two assistant turns)
    assert pg.messages == [
        {"role": "user", "content": "Is the sky blue?"},
        {"role": "assistant", "content": again.generated_text},
    ]
    pg.messages = [{"role": "wizard", "content": "x"}]
    pg.prompt = "hi"
    assert pg.run(raise_errors=False) is None
    assert pg.error.startswith("messages[0].role: Input should be"), pg.error


def test_the_widget_picks_the_constraint_engine_and_refuses_settings_it_does_not_have(embedded) -> None:
    pg = Playground(model="embedded", mode="prompt", prompt="Digits:", max_new_tokens=4, constraint_engine="xgrammar")
    assert pg.engines[0] == "auto" and {"llguidance", "xgrammar", "outlines_core"} <= set(pg.engines)
    pg.constraint_kind, pg.constraint_text = "regex", "[0-9]{3}"
    assert pg.run().constraint_engine == "xgrammar"  # (the setting was dropped: llguidance answered)
    with pytest.raises(TypeError, match="unknown settings: 'max_tokens' .did you mean 'max_new_tokens'"):
        Playground(model="embedded", max_tokens=4)
    with pytest.raises(
        AttributeError, match="Playground has no setting 'max_new_tokns' .did you mean 'max_new_tokens'"
    ):
        pg.max_new_tokns = 1  # (a new attribute nothing read: the run went on with 4)
    with pytest.raises(traitlets.TraitError, match="constraint_engine 'bogus' is not one of auto, "):
        pg.constraint_engine = "bogus"  # (taken, and ignored by every run without a constraint)
    pg.top_k, pg._scratch = 5, 1  # settings and private names as ever
    assert pg.top_k == 5
    with pytest.raises(ParameterError, match="prompts: a list of prompts, not one string"):
        pg.evaluate("Color:")


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


def test_registry_models_and_shared_weights(embedded) -> None:
    provider, model_id = embedded
    assert Playground(model="embedded")._provider is provider
    pg = Playground(registry=Registry([provider]))
    assert pg.model == model_id and pg.models == [model_id]
    pg.model = "nobody-serves-this"
    assert pg.error.startswith("no provider serves model 'nobody-serves-this'")
    pg.model = model_id
    assert pg.error == ""


def test_token_view_shows_an_answer_s_json_as_each_api_sends_it(server_url: str) -> None:
    """/generate (TGI's shape), a chat completion and a completion, straight from the server's JSON."""
    prompt = "The colour of the sky is"
    regex = {"type": "regex", "value": "(blue|grey)( and (white|black))?"}

    def post(path: str, body: dict) -> dict:
        reply = httpx.post(f"{server_url}{path}", json=body, timeout=300)
        assert reply.status_code == 200, reply.text
        return reply.json()

    tgi = post(
        "/generate",
        {
            "inputs": prompt,
            "parameters": {
                "details": True,
                "top_n_tokens": 2,
                "best_of": 2,
                "do_sample": True,
                "seed": 3,
                "grammar": regex,
            },
        },
    )
    shown = TokenView(tgi).generation_result
    assert shown.generated_text == tgi["generated_text"] and shown.constraint_kind == "regex"
    assert [t.text for t in shown.best.tokens] == [t["text"] for t in tgi["details"]["tokens"]]
    assert [t.logprob for t in shown.best.tokens] == pytest.approx([t["logprob"] for t in tgi["details"]["tokens"]])
    assert [[a.text for a in t.top_tokens] for t in shown.best.tokens] == [
        [a["text"] for a in top] for top in tgi["details"]["top_tokens"]
    ]
    assert all(len(t.raw_top_tokens) == 2 for t in shown.best.tokens) and shown.best.validation.valid is True
    assert len(shown.best_of_sequences) == 1
    chat = post(
        "/v1/chat/completions",
        {
            "model": "embedded",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 8,
            "logprobs": True,
            "top_logprobs": 2,
        },
    )
    shown = TokenView(chat).generation_result
    content = chat["choices"][0]["logprobs"]["content"]
    assert shown.generated_text == chat["choices"][0]["message"]["content"] and shown.model_id == chat["model"]
    assert [t.text for t in shown.best.tokens] == [c["token"] for c in content]
    assert [len(t.top_tokens) for t in shown.best.tokens] == [2] * len(content)
    completion = post("/v1/completions", {"model": "embedded", "prompt": prompt, "max_tokens": 6, "logprobs": 2})
    shown = TokenView(completion).generation_result
    columns = completion["choices"][0]["logprobs"]
    assert [t.text for t in shown.best.tokens] == columns["tokens"] and shown.input_length > 0
    assert [t.logprob for t in shown.best.tokens] == pytest.approx(columns["token_logprobs"])
    assert [{t.text: t.logprob for t in tok.top_tokens} for tok in shown.best.tokens] == columns["top_logprobs"]
    with pytest.raises(ValueError, match="without `details` has no tokens"):
        TokenView({"generated_text": "blue"})
