"""The widgets' Python side without a model: traits from a result, static HTML, request building."""

from __future__ import annotations

import json
import math

import pytest

from playground import render
from playground.errors import InvalidConstraintError, ParameterError, ProviderError
from playground.providers.base import Capabilities
from playground.providers.tgi import TGIConfig, TGIProvider
from playground.types import (
    ChatMessage,
    GeneratedToken,
    GenerationResult,
    GrammarType,
    Sequence,
    Token,
    Validation,
)
from playground.wire.controls import SAMPLING
from playground.wire.inbound import grammar_for
from tests.fakes import FakeProvider
from tests.support import INVALID_CONSTRAINTS, free_port, table_rows
from widgets import TokenView
from widgets.playground import KINDS, Playground, build_inputs, build_parameters
from widgets.token_view import result_payload

SCRIPT = "<script>window.__pwned = 1</script>"
IMG = '<img src=x onerror="window.__pwned = 2">'


def _tok(id_: int, text: str, logprob: float | None) -> Token:
    return Token(id=id_, text=text, logprob=logprob)


def sample_result() -> GenerationResult:
    """A result with an overridden token, a masked alternative, hostile token text and best_of candidates."""
    # (id, text, logprob, raw logprob, mass kept, top alternatives, raw top alternatives)
    rows = [
        (1, "{", -0.05, -1.5, 0.4, [(1, "{", -0.05), (9, "```", None)], [(9, "```", -0.3), (1, "{", -1.5)]),
        (2, SCRIPT, -0.7, -0.6, 0.95, [(2, SCRIPT, -0.7), (3, IMG, -1.2)], [(2, SCRIPT, -0.6), (3, IMG, -1.1)]),
        (4, "}\n", -0.01, -2.5, 0.1, [(4, "}\n", -0.01)], [(5, "ok", -0.2), (4, "}\n", -2.5)]),
    ]
    tokens = [
        GeneratedToken(
            id=id_,
            text=text,
            logprob=logprob,
            raw_logprob=raw,
            mass_kept=kept,
            top_tokens=[_tok(*alt) for alt in top],
            raw_top_tokens=[_tok(*alt) for alt in raw_top],
        )
        for id_, text, logprob, raw, kept, top, raw_top in rows
    ]
    best = Sequence(
        generated_text="{" + SCRIPT + "}\n",
        finish_reason="eos_token",
        generated_tokens=3,
        tokens=tokens,
        seed=7,
        total_logprob=-0.76,
        validation=Validation(valid=False, message="Expecting value: line 1"),
    )
    other = Sequence(
        generated_text=IMG,
        finish_reason="length",
        generated_tokens=1,
        tokens=[GeneratedToken(id=3, text=IMG, logprob=-1.2, raw_logprob=-1.1, mass_kept=0.9)],
        seed=8,
        total_logprob=-1.2,
        validation=Validation(valid=True, message="ok"),
    )
    third = Sequence(
        generated_text="no",
        finish_reason="stop_sequence",
        stop_sequence="\n\n",
        generated_tokens=1,
        tokens=[GeneratedToken(id=6, text="no", logprob=-3.0, raw_logprob=-3.0, mass_kept=1.0)],
        seed=9,
        total_logprob=-3.0,
        validation=Validation(valid=False, message="not enforced", enforced=False),
    )
    return GenerationResult(
        model_id="tiny <model>",
        provider_id="local",
        prompt="p",
        input_length=4,
        best=best,
        best_of_sequences=[other, third],
        constraint_kind="json_schema",
    )


def test_payload_is_strict_json_and_marks_overridden_tokens() -> None:
    result = sample_result()
    result.best_of_sequences[0].tokens[0].raw_logprob = -math.inf
    payload = result_payload(result)
    text = json.dumps(payload, allow_nan=False)  # the browser's JSON.parse rejects -Infinity
    assert json.loads(text)["best_of_sequences"][0]["tokens"][0]["raw_logprob"] is None
    assert [t["overridden"] for t in payload["best"]["tokens"]] == [True, False, True]
    assert [t["overridden"] for t in payload["best_of_sequences"][0]["tokens"]] == [False]
    assert result_payload(None) == {}


def test_token_view_traits_from_a_result() -> None:
    view = TokenView(sample_result())
    assert view.result["best"]["tokens"][1]["text"] == SCRIPT
    assert view.result["model_id"] == "tiny <model>"
    assert view.colour_by == "constrained" and view.selected == -1
    assert view.generation_result == sample_result()
    state = view.get_state()
    assert state["result"]["best"]["generated_text"] == "{" + SCRIPT + "}\n"
    assert state["_esm"].startswith("// TokenView")


def test_token_view_update_and_dict_input() -> None:
    view = TokenView()
    assert view.result == {} and view.generation_result is None
    view.selected = 2
    view.update(sample_result().model_dump())
    assert view.selected == -1
    assert view.generation_result.best.generated_tokens == 3
    view.update(None)
    assert view.result == {}


def test_colour_by_is_checked() -> None:
    from traitlets import TraitError

    with pytest.raises(TraitError):
        TokenView(sample_result(), colour_by="rainbow")


def test_token_view_refuses_a_misspelt_setting() -> None:
    """traitlets dropped an unknown argument with a warning, and `view.colr_by = ...` made an attribute nothing read."""
    with pytest.raises(TypeError, match="TokenView got unknown settings: 'colr_by' .did you mean 'colour_by'"):
        TokenView(sample_result(), colr_by="raw")
    view = TokenView(sample_result())
    with pytest.raises(AttributeError, match="TokenView has no setting 'colourby' .did you mean 'colour_by'"):
        view.colourby = "raw"
    view.colour_by, view._note = "raw", 1  # settings and private names as ever
    assert view.colour_by == "raw"


def test_static_html_escapes_every_token_text() -> None:
    page = TokenView(sample_result())._repr_html_()
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page
    assert "tiny &lt;model&gt;" in page
    assert "onerror=&quot;" in page  # inside title attributes quotes are escaped too


def test_static_html_shows_colours_overrides_verdicts_and_candidates() -> None:
    page = TokenView(sample_result())._repr_html_()
    assert page.count('<span class="tok') == 3 + 2  # the answer's tokens and the legend's two samples
    assert page.count('class="tok overridden"') == 2
    assert f"background:{render.colour(math.exp(-0.05))}" in page
    assert "✗ invalid (json_schema): Expecting value: line 1" in page
    assert '<div class="pg-details" data-finish="eos_token"><span class="kv"><b>finish reason</b> eos_token' in page
    assert page.count('<tr class="cand') == 3 and "★ 1" in page
    assert "not enforced by the provider" in page
    assert "stop_sequence (&quot;\\n\\n&quot;)" in page
    raw = TokenView(sample_result(), colour_by="raw")._repr_html_()
    assert f"background:{render.colour(math.exp(-1.5))}" in raw
    assert "<style>.pg-result {" in page  # the panels' sheet travels with the fragment


def test_static_html_popover_lists_alternatives_under_both_distributions() -> None:
    page = TokenView(sample_result())._repr_html_()
    assert "mass kept 40.0%" in page
    assert "the model wanted ``` (74.1%); the constraint did not allow it" in page
    assert '<td class="alt masked">```</td><td class="num">74.1%</td>' in page


def test_colour_scale() -> None:
    assert render.colour(0.0) == "hsl(0, 80%, 82%)"
    assert render.colour(1.0) == "hsl(120, 80%, 82%)"
    assert render.colour(None) == "hsl(0, 0%, 90%)"


def test_grammar_for_each_kind() -> None:
    assert grammar_for("none", "ignored") is None
    schema = grammar_for("json_schema", '{"type": "object"}')
    assert schema == GrammarType(type="json", value={"type": "object"})
    assert grammar_for("regex", r"\d+") == GrammarType(type="regex", value=r"\d+")
    assert grammar_for("choice", "yes\nno\n") == GrammarType(type="choice", value=["yes", "no"])
    assert grammar_for("choice", '["a b", "c"]').value == ["a b", "c"]
    assert grammar_for("grammar", 'start: "x"').type == "grammar"


@pytest.mark.parametrize(("kind", "text", "words"), table_rows(INVALID_CONSTRAINTS))
def test_grammar_for_rejects_bad_constraints(kind: str, text: str, words: str) -> None:
    with pytest.raises(InvalidConstraintError) as info:
        grammar_for(kind, text)
    assert words in info.value.message


def _state(**overrides) -> dict:
    state = {
        "max_new_tokens": 20,
        "do_sample": False,
        "temperature": 1.0,
        "min_p": 0.0,
        "seed": None,
        "best_of": 1,
        "top_n_tokens": 5,
        "stop": ["", "\n\n"],
        "constraint_kind": "regex",
        "constraint_text": "[ab]+",
        "logits_processors": [{"name": "ban_strings", "params": ["the"]}],
    }
    return {**state, **overrides}


def test_build_parameters_maps_the_widget_state() -> None:
    params = build_parameters(_state())
    assert params.max_new_tokens == 20 and params.top_n_tokens == 5
    assert params.temperature is None and params.best_of is None and not params.sampling
    assert params.stop == ["\n\n"]
    assert params.grammar == GrammarType(type="regex", value="[ab]+")
    assert params.logits_processors[0].name == "ban_strings"
    sampled = build_parameters(_state(temperature=0.7, min_p=0.1, best_of=3, seed=5))
    assert sampled.temperature == 0.7 and sampled.min_p == 0.1 and sampled.best_of == 3 and sampled.seed == 5
    assert sampled.sampling  # as in TGI, a warper that is set samples


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"do_sample": True, "temperature": 0.0}, "temperature"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"max_new_tokens": 0}, "max_new_tokens"),  # the API refuses 0; the widget ran with it
        ({"best_of": 0}, "best_of"),
        ({"seed": -3}, "seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ],
)
def test_build_parameters_names_the_bad_field(overrides: dict, field: str) -> None:
    with pytest.raises(ParameterError) as info:
        build_parameters(_state(**overrides))
    assert info.value.field == field and info.value.message.startswith(field)


def test_build_inputs_prompt_and_chat() -> None:
    assert build_inputs("prompt", "Hi", "sys", []) == "Hi"
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    chat = build_inputs("chat", "c", "Be brief.", history)
    assert chat == [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="a"),
        ChatMessage(role="assistant", content="b"),
        ChatMessage(role="user", content="c"),
    ]
    assert build_inputs("chat", "c", "  ", []) == [ChatMessage(role="user", content="c")]
    with pytest.raises(ParameterError, match="the prompt is empty"):
        build_inputs("prompt", "  ", "", [])


def test_describe_errors() -> None:
    assert (
        render.error_text(InvalidConstraintError("bad regex")) == "bad regex"
    )  # the message alone, as the API says it
    assert render.error_text(RuntimeError("CUDA out of memory")) == "model failure (RuntimeError): CUDA out of memory"


def test_the_widget_takes_its_sampling_controls_from_the_wire_table() -> None:
    fake = FakeProvider("yes")
    pg = Playground(provider=fake, mode="prompt", prompt="Q?")
    assert {c["name"] for c in pg.sampling_controls} == {c.name for c in SAMPLING}
    pg.min_p, pg.top_k = 0.2, 3
    assert pg.run().generated_text == "yes"
    sent = fake.calls[-1].params
    assert sent.min_p == 0.2 and sent.top_k == 3 and sent.temperature is None


def test_the_widget_offers_examples_only_for_the_kinds_it_can_select() -> None:
    pg = Playground(provider=FakeProvider("yes"))
    assert set(pg.examples) == {kind for kind in KINDS if kind != "none"}  # (not structural_tag, not tools)
    assert pg.examples["json_schema"] and all(set(e) >= {"title", "text"} for e in pg.examples["json_schema"])


def test_the_static_widget_html_escapes_the_colour_mode() -> None:
    token = GeneratedToken(id=1, text="<script>", logprob=-0.1, raw_logprob=-0.2)
    result = GenerationResult(
        model_id="m<b>",
        prompt="p",
        input_length=1,
        best=Sequence(generated_text="<script>", finish_reason="length", generated_tokens=1, tokens=[token]),
    )
    page = render.result_html(result, mode="<img src=x onerror=alert(1)>")
    assert "<img" not in page
    assert "<script>" not in page
    assert "<b>model</b> m&lt;b&gt; (local)" in page
    assert "colour: &lt;img src=x onerror=alert(1)&gt; probability" in page


def test_forced_tokens_reach_the_widget_and_its_static_html() -> None:
    result = sample_result()
    result.best.tokens[1].forced = True
    assert [t["forced"] for t in result_payload(result)["best"]["tokens"]] == [False, True, False]
    html = TokenView(result)._repr_html_()
    assert html.count('class="tok forced"') == 1
    assert "forced by the constraint, not sampled" in html


def test_invalid_schema_is_shown_in_the_error_trait() -> None:
    fake = FakeProvider()
    pg = Playground(provider=fake, prompt="Hi")
    pg.constraint_kind = "json_schema"
    pg.constraint_text = '{"type": "objekt"}'
    assert pg.constraint_problem.startswith("not a valid JSON Schema")
    pg.run_requested += 1
    assert pg.error.startswith("not a valid JSON Schema")
    assert pg.result is None and pg.running is False
    pg.constraint_text = '{"type": '
    assert "JSON" in pg.constraint_problem
    with pytest.raises(InvalidConstraintError):
        pg.run()
    assert "JSON" in pg.error and "Error" not in pg.error and pg.running is False
    assert "Playground" not in pg._repr_html_() and "pg-error" in pg._repr_html_()
    assert fake.calls == []  # nothing was sent


def test_bad_parameters_and_empty_prompt_are_shown_before_anything_is_sent() -> None:
    fake = FakeProvider()
    pg = Playground(provider=fake, prompt="Hi", best_of=2, max_new_tokens=3)
    with pytest.raises(ParameterError, match="best_of > 1 needs sampling"):
        pg.run()
    assert pg.error.startswith("parameters.best_of: best_of > 1 needs sampling: set do_sample")
    pg.best_of, pg.do_sample, pg.temperature = 1, True, 0.0
    assert pg.run(raise_errors=False) is None and pg.error.startswith("temperature:")
    pg.temperature, pg.prompt = 0.7, "  "
    assert pg.run(raise_errors=False) is None
    assert pg.error == "the prompt is empty: type something to send"
    assert fake.calls == []


def test_unreachable_provider_fails_inside_the_widget() -> None:
    config = TGIConfig(
        base_url=f"http://127.0.0.1:{free_port()}", model="remote-model", discover_models=False, timeout_s=5
    )
    pg = Playground(provider=TGIProvider("down", config), prompt="Hi", max_new_tokens=3)
    assert pg.model == "remote-model"
    with pytest.raises(ProviderError):
        pg.run()
    assert pg.error.startswith("provider 'down' failed:")
    assert pg.result is None and pg.running is False


def test_a_provider_without_a_next_token_view_still_shows_the_answer() -> None:
    fake = FakeProvider("no", capabilities=Capabilities(next_token_view=None))
    pg = Playground(provider=fake, prompt="Yes or no?", max_new_tokens=3)
    pg.constraint_kind, pg.constraint_text = "choice", "yes\nno"
    assert pg.run().generated_text == "no" and pg.error == ""
    assert "has no next-token view" in pg.next_token["unavailable"] and pg.distribution is None


def test_a_model_the_registry_does_not_serve_is_refused_here_not_sent_to_the_last_provider() -> None:
    from playground.errors import ModelError
    from playground.providers.registry import Registry

    fake = FakeProvider("yes")
    pg = Playground(registry=Registry([fake]), prompt="Hi", max_new_tokens=3)
    pg.model = "nosuch"
    assert pg.error.startswith("no provider serves model 'nosuch'")
    with pytest.raises(ModelError, match="no provider serves model 'nosuch'"):
        pg.run()
    assert fake.calls == []


def test_a_registry_without_a_default_model_opens_on_its_first_model() -> None:
    """A providers file without a local model has no default: `Playground(registry=r)` failed with "no provider serves
    model None"."""
    from playground.errors import ModelError
    from playground.providers.registry import Registry

    registry = Registry([FakeProvider("yes")])
    registry.default_model = None  # (as load_registry leaves it for a file without a local model)
    pg = Playground(registry=registry)
    assert pg.model == registry.models()[0][1] and pg.error == ""
    with pytest.raises(ModelError, match="no model named, and no default model: name one of "):
        registry.resolve(None)
