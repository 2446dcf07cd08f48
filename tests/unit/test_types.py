"""Our request and result types speak TGI's and huggingface_hub's field names, with TGI's ranges."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, get_args

import pytest
from huggingface_hub.inference._generated.types import (
    TextGenerationInputGenerateParameters,
    TextGenerationInputGrammarType,
    TextGenerationOutputPrefillToken,
    TextGenerationOutputToken,
)
from pydantic import ValidationError

from playground.types import (
    FinishReason,
    GeneratedToken,
    GenerateParameters,
    GenerateRequest,
    GenerationResult,
    GrammarType,
    PrefillToken,
    Sequence,
    Token,
)
from tests.spec import SPEC_PATH, validate

SCHEMAS: dict[str, Any] = json.loads(SPEC_PATH.read_text())["components"]["schemas"]
OUR_EXTENSIONS = {"logits_processors", "constraint_engine", "min_p", "continue_from", "fast_forward"} | {
    "presence_penalty",
    "logit_bias",
    "min_tokens",
    "stop_token_ids",
    "include_stop_str_in_output",
    "return_token_ids",
    "allowed_token_ids",
    "bad_words",
    "add_generation_prompt",
    "chat_template_kwargs",
    "max_reasoning_tokens",
    "think_first",
    "tools",
}


def test_generate_parameters_fields_equal_tgi_spec() -> None:
    spec_fields = set(SCHEMAS["GenerateParameters"]["properties"])
    ours = set(GenerateParameters.model_fields)
    assert ours - spec_fields == OUR_EXTENSIONS
    assert spec_fields - ours == set()


def test_generate_parameters_cover_huggingface_hub() -> None:
    hub_fields = {f.name for f in dataclasses.fields(TextGenerationInputGenerateParameters)}
    assert hub_fields <= set(GenerateParameters.model_fields)
    assert hub_fields == set(GenerateParameters.model_fields) - OUR_EXTENSIONS


def test_grammar_type_covers_huggingface_hub_and_tgi_kinds() -> None:
    hub_fields = {f.name for f in dataclasses.fields(TextGenerationInputGrammarType)}
    assert hub_fields | {"whitespace", "strict"} == set(GrammarType.model_fields)  # JSON options: our extensions
    tgi_kinds = {variant["properties"]["type"]["enum"][0] for variant in SCHEMAS["GrammarType"]["oneOf"]}
    ours = set(get_args(GrammarType.model_fields["type"].annotation))
    assert ours == tgi_kinds | {"choice", "grammar", "structural_tag"}


@pytest.mark.parametrize(
    "kind,value",
    [
        ("json", {"type": "object"}),
        ("json_schema", {"schema": {"type": "object"}}),
        ("regex", r"\d+"),
        ("choice", ["yes", "no"]),
        ("grammar", 'start: "a"'),
    ],
)
def test_grammar_type_accepts_each_kind(kind: str, value: Any) -> None:
    grammar = GrammarType(type=kind, value=value)
    assert (grammar.type, grammar.value) == (kind, value)


def test_grammar_type_rejects_unknown_kind() -> None:
    with pytest.raises(ValidationError) as info:
        GrammarType(type="xml", value="<a/>")
    assert "type" in str(info.value) and "xml" in str(info.value)


def test_unknown_parameter_is_rejected_by_name() -> None:
    with pytest.raises(ValidationError) as info:
        GenerateParameters.model_validate({"max_new_tokens": 5, "temprature": 0.5})
    errors = info.value.errors()
    assert [(e["type"], e["loc"]) for e in errors] == [("extra_forbidden", ("temprature",))]
    assert "temprature" in str(info.value)


def test_unknown_request_field_is_rejected_by_name() -> None:
    with pytest.raises(ValidationError) as info:
        GenerateRequest.model_validate({"inputs": "hi", "paramters": {}})
    assert [e["loc"] for e in info.value.errors()] == [("paramters",)]


@pytest.mark.parametrize(
    "field,value",
    [
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("typical_p", 0.0),
        ("temperature", 0.0),
        ("top_k", 0),
        ("best_of", 0),
        ("top_n_tokens", 0),
        ("repetition_penalty", 0.0),
        ("frequency_penalty", -2.0),
        ("max_new_tokens", -1),
        ("truncate", -2),
        ("stop", ["a", "b", "c", "d", "e"]),
    ],
)
def test_out_of_range_parameter_is_rejected_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as info:
        GenerateParameters.model_validate({field: value})
    assert [e["loc"][0] for e in info.value.errors()] == [field]


def test_boundary_values_tgi_accepts_are_accepted() -> None:
    params = GenerateParameters(
        top_p=1.0,
        typical_p=1.0,
        stop=["a", "b", "c", "d"],
        max_new_tokens=0,
        best_of=1,
        top_k=1,
        frequency_penalty=2.0,
        temperature=0.01,
    )
    assert params.stop == ["a", "b", "c", "d"] and params.top_p == 1.0


def test_defaults_follow_tgi_spec() -> None:
    params = GenerateParameters()
    spec = SCHEMAS["GenerateParameters"]["properties"]
    for name in ("details", "decoder_input_details", "do_sample", "watermark"):
        assert getattr(params, name) is (spec[name]["default"] == "true"), name


def test_valid_parameters_validate_against_tgi_schema() -> None:
    params = GenerateParameters(
        max_new_tokens=20,
        top_p=0.9,
        stop=["\n"],
        grammar=GrammarType(type="regex", value="a+"),
        best_of=2,
        do_sample=True,
        seed=3,
        top_n_tokens=3,
    )
    body = params.model_dump(exclude=OUR_EXTENSIONS)
    validate(body, "GenerateParameters")


def test_finish_reasons_equal_tgi() -> None:
    assert set(get_args(FinishReason)) == set(SCHEMAS["FinishReason"]["enum"])


@pytest.mark.parametrize(
    "ours,spec_name,hub",
    [
        (Token, "Token", TextGenerationOutputToken),
        (PrefillToken, "PrefillToken", TextGenerationOutputPrefillToken),
    ],
)
def test_token_shapes_match_spec_and_hub(ours: type, spec_name: str, hub: type) -> None:
    required = set(SCHEMAS[spec_name]["required"])
    assert required <= set(ours.model_fields)
    assert {f.name for f in dataclasses.fields(hub)} == set(ours.model_fields)


def test_generated_token_dump_is_a_valid_tgi_token() -> None:
    alt = Token(id=7, text="<b>", logprob=-0.5, special=False)
    token = GeneratedToken(
        id=5,
        text="x",
        logprob=-0.1,
        special=False,
        raw_logprob=-0.2,
        mass_kept=0.9,
        top_tokens=[alt],
        raw_top_tokens=[alt],
    )
    validate(token.model_dump(), "Token")
    validate(PrefillToken(id=1, text="a", logprob=None).model_dump(), "PrefillToken")


@pytest.mark.parametrize("spec_name", ["Details", "BestOfSequence", "StreamDetails", "GenerateResponse"])
def test_results_carry_every_field_tgi_responses_require(spec_name: str) -> None:
    carried = set(Sequence.model_fields) | set(GenerationResult.model_fields)
    assert set(SCHEMAS[spec_name]["required"]) - carried == set()
    assert SCHEMAS[spec_name]["properties"].keys() - carried <= {"details", "best_of_sequences", "top_tokens"}


def test_chat_completion_types_use_the_openai_sdks_names() -> None:
    from openai.types.chat import ChatCompletion as SDKCompletion
    from openai.types.chat.chat_completion import Choice as SDKChoice
    from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob as SDKTokenLogprob

    from playground.types import ChatChoice, ChatCompletion, TokenLogprob

    assert set(ChatCompletion.model_fields) <= set(SDKCompletion.model_fields)
    assert set(ChatChoice.model_fields) <= set(SDKChoice.model_fields)
    assert set(TokenLogprob.model_fields) == set(SDKTokenLogprob.model_fields)
