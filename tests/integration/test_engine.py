"""The decode engine on the embedded model: constraints, logprobs, best_of, finish reasons, next token."""

from __future__ import annotations

import ipaddress
import json
import math
import random
import time

import jsonschema
import pytest
from pydantic import BaseModel, ConfigDict

from playground.constraints import Constraint
from playground.decoding.runner import RowText
from playground.errors import (
    CompileTimeoutError,
    InvalidConstraintError,
    ParameterError,
    PromptTooLongError,
    UnsupportedConstraintError,
)
from playground.types import ChatMessage, GenerateParameters

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
IPV4 = r"((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])"


def ask(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


def test_json_schema_answer_validates(engine):
    params = GenerateParameters(max_new_tokens=40, grammar={"type": "json", "value": PERSON}, top_n_tokens=3)
    result = engine.generate(ask("Describe a person as JSON with a name and an age."), params)
    jsonschema.validate(json.loads(result.generated_text), PERSON)
    assert result.best.validation.valid is True
    assert result.best.finish_reason == "eos_token"
    assert result.constraint_kind == "json_schema" and result.constraint_engine == "llguidance"


def test_pydantic_model_as_schema(engine):
    class City(BaseModel):
        model_config = ConfigDict(extra="forbid")  # additionalProperties: false, else the model rambles on

        name: str
        population: int

    schema = Constraint.json_schema(City).schema
    params = GenerateParameters(max_new_tokens=40, grammar={"type": "json", "value": schema})
    result = engine.generate(ask("Give me a city as JSON."), params)
    City.model_validate_json(result.generated_text)


def test_regex_ipv4_full_matches(engine):
    params = GenerateParameters(max_new_tokens=20, grammar={"type": "regex", "value": IPV4})
    result = engine.generate(ask("What is the IP address of the local host?"), params)
    ipaddress.IPv4Address(result.generated_text)
    assert result.best.validation.valid is True


def test_choice(engine):
    params = GenerateParameters(max_new_tokens=10, grammar={"type": "choice", "value": ["positive", "negative"]})
    result = engine.generate(ask("Is 'I love this film' positive or negative?"), params)
    assert result.generated_text in ("positive", "negative")
    assert result.best.validation.valid is True


@pytest.mark.parametrize(
    "grammar",
    [{"type": "choice", "value": ["<|im_end|>"]}, {"type": "regex", "value": r"<filename>[a-z]{1,3}\.py"}],
)
def test_a_special_tokens_spelling_in_a_constraint_is_written_as_text(engine, grammar):
    """Before, llguidance tokenized the forced `<|im_end|>` as the EOS token (an empty, invalid answer that
    looked finished) and `<filename>` as its special token (the matcher stopped: a 422 blaming its limits)."""
    result = engine.generate(ask("Say it."), GenerateParameters(max_new_tokens=12, grammar=grammar))
    assert result.best.validation.valid is True, result.best.validation.message
    assert result.generated_text.startswith("<") and result.best.tokens[0].id not in engine.tokenizer.all_special_ids


def test_lark_grammar(engine):
    grammar = 'start: expr\nexpr: NUMBER OP NUMBER\nOP: "+" | "-" | "*"\nNUMBER: /[0-9]{1,3}/'
    params = GenerateParameters(max_new_tokens=12, grammar={"type": "grammar", "value": grammar})
    result = engine.generate(ask("Write a short arithmetic expression."), params)
    assert result.best.validation.valid is True, result.best.validation.message
    left, right = result.generated_text.replace("+", " ").replace("-", " ").replace("*", " ").split()
    assert left.isdigit() and right.isdigit()


def test_finish_reasons(engine):
    messages = ask("Count from one to twenty in words, separated by commas.")
    length = engine.generate(messages, GenerateParameters(max_new_tokens=3))
    assert length.best.finish_reason == "length" and length.best.generated_tokens == 3
    eos = engine.generate(messages, GenerateParameters(max_new_tokens=10, grammar={"type": "choice", "value": ["ok"]}))
    assert eos.best.finish_reason == "eos_token" and eos.best.tokens[-1].special
    stop = engine.generate("one, two,", GenerateParameters(max_new_tokens=20, stop=["nothing", "four"]))
    assert stop.best.finish_reason == "stop_sequence" and stop.best.stop_sequence == "four"
    assert stop.generated_text == " three, four"


def test_best_of_three(engine):
    params = GenerateParameters(
        max_new_tokens=12, best_of=3, do_sample=True, seed=7, grammar={"type": "json", "value": PERSON}
    )
    result = engine.generate(ask("A person as JSON."), params)
    assert len(result.best_of_sequences) == 2
    seeds = {result.best.seed} | {s.seed for s in result.best_of_sequences}
    assert len(seeds) == 3
    assert all(result.best.total_logprob >= s.total_logprob for s in result.best_of_sequences)
    for sequence in result.best_of_sequences:
        assert sequence.tokens and sequence.validation.valid is not None


def test_best_of_rows_finishing_at_different_lengths(engine):
    choices = ["no", "yes, certainly, without any doubt at all"]
    params = GenerateParameters(
        max_new_tokens=20,
        best_of=3,
        do_sample=True,
        temperature=2.0,
        seed=5,
        grammar={"type": "choice", "value": choices},
    )
    for seed in range(5, 9):
        result = engine.generate(ask("Do you agree?"), params.model_copy(update={"seed": seed}))
        sequences = [result.best, *result.best_of_sequences]
        assert all(s.generated_text in choices and s.finish_reason == "eos_token" for s in sequences)
        if len({s.generated_tokens for s in sequences}) > 1:
            return
    raise AssertionError("no seed gave rows of different lengths")


def test_a_best_of_candidate_at_its_constraint_s_dead_end_is_left_out_and_the_others_answer(engine):
    """A candidate that takes the branch with no end fails alone (the whole request failed); every candidate there
    fails it, naming the dead end."""
    endless = {"type": "grammar", "value": 'start: "yes" | x\nx: "b" x'}
    params = GenerateParameters(max_new_tokens=6, best_of=3, do_sample=True, temperature=5.0, grammar=endless)
    for seed in range(12):
        try:
            result = engine.generate(
                ask("Write the letter b many times: bbbbbbb"), params.model_copy(update={"seed": seed})
            )
        except UnsupportedConstraintError as exc:
            assert "never ends" in exc.message
            continue
        kept = [result.best, *result.best_of_sequences]
        assert all(s.generated_text == "yes" and s.validation.valid for s in kept)
        assert len(kept) + len(result.failed_candidates) == 3
        if result.failed_candidates:
            failed = result.failed_candidates[0]
            assert failed.seed == seed + failed.index and "never ends" in failed.error
            assert f"the best_of candidate of seed {failed.seed} (index {failed.index}) is left out: llguidance" in str(
                result.warnings
            )
            return
    raise AssertionError("no seed gave a candidate that took the endless branch beside one that did not")


def test_a_key_the_schema_lets_in_by_pattern_is_never_written_twice(engine):
    """llguidance's mask let `"x-json"` be written again (a 400 naming the key twice, or the key until max_tokens); the
    key gate takes the tokens that would close a written key away, and the greedy answer is valid."""
    schema = {
        "type": "object",
        "patternProperties": {"^x-[a-z]+$": {"type": "integer"}},
        "additionalProperties": False,
        "minProperties": 1,
        "maxProperties": 2,
    }
    params = GenerateParameters(max_new_tokens=40, grammar={"type": "json", "value": schema})
    result = engine.generate(ask("Give a JSON object."), params)
    assert result.best.validation.valid is True and result.best.finish_reason == "eos_token"
    keys = json.loads(result.best.generated_text)
    assert len(keys) == 2


def test_best_of_needs_sampling(engine):
    with pytest.raises(ParameterError, match="best_of"):
        engine.generate(ask("hi"), GenerateParameters(best_of=2))


def test_top_n_tokens_everywhere(engine):
    params = GenerateParameters(max_new_tokens=6, top_n_tokens=3, grammar={"type": "json", "value": PERSON})
    result = engine.generate(ask("A person as JSON."), params)
    for token in result.best.tokens:
        assert len(token.raw_top_tokens) == 3
        assert 1 <= len(token.top_tokens) <= 3
        assert token.top_tokens[0].logprob >= token.logprob - 1e-6
        assert all(t.logprob is not None and math.isfinite(t.logprob) for t in token.top_tokens)


def test_raw_and_constrained_logprobs_differ_where_the_mask_bit(engine):
    result = engine.generate(
        ask("Say hello."),
        GenerateParameters(max_new_tokens=4, top_n_tokens=3, grammar={"type": "regex", "value": "[0-9]{3}"}),
    )
    first = result.best.tokens[0]
    assert first.overridden  # the model wanted words, the regex wanted digits
    assert first.mass_kept < 0.5
    assert first.raw_logprob < first.logprob
    unconstrained = engine.generate(ask("Say hello."), GenerateParameters(max_new_tokens=4, top_n_tokens=3))
    token = unconstrained.best.tokens[0]
    assert token.mass_kept == pytest.approx(1.0, abs=1e-4)
    assert token.logprob == pytest.approx(token.raw_logprob, abs=1e-4)


def test_same_seed_same_text(engine):
    params = GenerateParameters(max_new_tokens=15, do_sample=True, temperature=1.2, seed=1234)
    first = engine.generate(ask("Tell me a story."), params)
    second = engine.generate(ask("Tell me a story."), params)
    assert first.generated_text == second.generated_text and first.best.seed == 1234
    other = engine.generate(ask("Tell me a story."), params.model_copy(update={"seed": 99}))
    assert other.generated_text != first.generated_text


def test_decoding_draws_from_the_warped_distribution(engine):
    params = GenerateParameters(max_new_tokens=8, do_sample=True, seed=3, top_k=2, top_n_tokens=5)
    result = engine.generate(ask("Say something."), params)
    # top_k=2 leaves two candidates with a finite logprob at every step (the chooser's warpers: unit tests)
    assert all(len(t.top_tokens) <= 2 for t in result.best.tokens)
    assert any(len(t.raw_top_tokens) == 5 for t in result.best.tokens)
    with pytest.raises(ParameterError, match="top_n_tokens"):
        engine.generate(ask("hi"), params.model_copy(update={"top_n_tokens": 25}))


def test_decoder_input_details(engine):
    result = engine.generate(
        "The capital of France is", GenerateParameters(max_new_tokens=2, decoder_input_details=True)
    )
    assert len(result.prefill) == result.input_length
    assert result.prefill[0].logprob is None
    assert all(p.logprob is not None and p.logprob <= 0 for p in result.prefill[1:])
    assert "".join(p.text for p in result.prefill) == "The capital of France is"


def test_stream_yields_tokens_then_result(engine):
    events = list(engine.stream(ask("Say hi."), GenerateParameters(max_new_tokens=5)))
    *tokens, final = events
    assert [e.token.id for e in tokens] == [t.id for t in final.best.tokens]
    assert "".join(e.token.text for e in tokens if not e.token.special) == final.generated_text
    assert [e.last for e in tokens] == [False] * (len(tokens) - 1) + [True]  # (TGI's stream holds only the last)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_only_the_last_token_of_a_constrained_stream_is_marked_last(engine, fast_forward):
    params = GenerateParameters(max_new_tokens=40, grammar={"type": "json", "value": PERSON}, fast_forward=fast_forward)
    *tokens, final = engine.stream(ask("A person as JSON."), params)
    assert [e.last for e in tokens] == [False] * (len(tokens) - 1) + [True]
    assert [e.token.id for e in tokens] == [t.id for t in final.best.tokens]


def test_next_token_distribution(engine):
    params = GenerateParameters(grammar={"type": "json", "value": PERSON})
    start = engine.next_token_distribution(ask("A person as JSON."), params, top_k=5)
    allowed = [c for c in start.candidates if c.allowed]
    assert allowed and all(c.text.lstrip().startswith("{") for c in allowed)
    assert 0 < start.mass_kept < 1
    later = engine.next_token_distribution(ask("A person as JSON."), params, prefix='{"name": "Al', top_k=5)
    assert later.prefix == '{"name": "Al'
    assert any(c.allowed for c in later.candidates)
    with pytest.raises(InvalidConstraintError, match="prefix"):
        engine.next_token_distribution(ask("A person as JSON."), params, prefix="hello")


@pytest.mark.parametrize(
    ("grammar", "error", "words"),
    [
        ({"type": "json", "value": "{not json"}, InvalidConstraintError, "invalid JSON"),
        (
            {"type": "json", "value": {"type": "object", "properties": {"a": {"type": "strin"}}}},
            InvalidConstraintError,
            "not a valid JSON Schema",
        ),
        ({"type": "regex", "value": "(ab"}, InvalidConstraintError, "invalid regex"),
        ({"type": "regex", "value": r"(a)\1"}, UnsupportedConstraintError, "backreferences"),
        ({"type": "grammar", "value": "start: undefined_rule"}, InvalidConstraintError, "undefined_rule"),
        ({"type": "choice", "value": []}, InvalidConstraintError, "non-empty list"),
    ],
)
def test_bad_constraints_raise_typed_errors(engine, grammar, error, words):
    with pytest.raises(error, match=words):
        engine.generate(ask("hi"), GenerateParameters(max_new_tokens=2, grammar=grammar))


def test_unsupported_keyword_named_when_engine_is_chosen(engine):
    schema = {"type": "object", "not": {"required": ["a"]}}
    params = GenerateParameters(
        max_new_tokens=2, grammar={"type": "json", "value": schema}, constraint_engine="llguidance"
    )
    with pytest.raises(UnsupportedConstraintError, match="not"):
        engine.generate(ask("hi"), params)
    # auto reads it leniently, says so, and still validates the output
    result = engine.generate(
        ask("An object without the key a, as JSON."),
        params.model_copy(update={"constraint_engine": "auto", "max_new_tokens": 20}),
    )
    assert result.constraint_engine == "llguidance" and "(lenient)" in result.warnings[0]


def test_one_of_is_enforced_as_any_of_and_its_exclusivity_by_the_verdict(engine):
    # "one of these keys": xgrammar (auto's next engine) drops oneOf and the type beside it; llguidance reads it
    # as anyOf and keeps the rest, so the answer is an object with a or b
    dims = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
    schema = {
        "type": "object",
        "properties": {"d": {**dims, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}},
        "required": ["d"],
        "additionalProperties": False,
    }
    for seed in (1, 2, 3):
        params = GenerateParameters(
            max_new_tokens=40, do_sample=True, seed=seed, grammar={"type": "json", "value": schema}
        )
        result = engine.generate(ask("Rectangle dimensions as JSON."), params)
        assert result.constraint_engine == "llguidance" and any("anyOf" in w for w in result.warnings)
        if result.best.finish_reason == "eos_token":
            assert isinstance(json.loads(result.generated_text)["d"], dict)
    both = Constraint.json_schema(schema).validate('{"d": {"a": 1, "b": 2}}')
    assert both.valid is False and "valid under each" in both.message  # both branches: the verdict refuses it


def test_compile_time_limit(loaded_model):
    from playground.decoding.engine import Engine

    strict = Engine(loaded_model, compile_timeout_s=0.001)
    schema = {
        "type": "object",
        "properties": {f"k{i}": {"type": "string", "pattern": "[a-z]{3,40}"} for i in range(40)},
    }
    params = GenerateParameters(
        max_new_tokens=2, grammar={"type": "json", "value": schema}, constraint_engine="outlines_core"
    )
    with pytest.raises(CompileTimeoutError, match="longer than"):
        strict.generate(ask("hi"), params)


def test_prompt_longer_than_context(engine):
    with pytest.raises(PromptTooLongError, match="tokens"):
        engine.generate("word " * (engine.max_total_tokens + 10), GenerateParameters(max_new_tokens=2))
    with pytest.raises(PromptTooLongError, match="max_new_tokens"):
        engine.generate("hello", GenerateParameters(max_new_tokens=engine.max_total_tokens))


def test_an_unset_max_new_tokens_shrinks_to_what_the_context_leaves(engine, monkeypatch):
    prompt = "one two three four five six"
    length = len(engine.encode_prompt(prompt)[1])
    monkeypatch.setattr(engine, "max_total_tokens", length + 3)
    no_end_yet = {"type": "regex", "value": "[a-z ]{40,60}"}  # 3 tokens cannot finish it
    result = engine.generate(prompt, GenerateParameters(grammar=no_end_yet))
    assert (result.best.generated_tokens, result.best.finish_reason) == (3, "length")
    with pytest.raises(PromptTooLongError, match="max_new_tokens must be <= "):
        engine.generate(prompt, GenerateParameters(max_new_tokens=4))
    monkeypatch.setattr(engine, "max_total_tokens", length)
    with pytest.raises(
        PromptTooLongError, match=f"the prompt is too long: it has {length} tokens and leaves no room to generate"
    ):
        engine.generate(prompt, GenerateParameters())


def test_truncate_keeps_the_last_tokens(engine):
    result = engine.generate(
        "one two three four five six", GenerateParameters(max_new_tokens=1, truncate=2, decoder_input_details=True)
    )
    assert result.input_length == 2
    assert "".join(p.text for p in result.prefill).strip() == "five six"


def test_truncate_minus_one_keeps_what_the_context_leaves_beside_the_answer(engine, monkeypatch):
    """vLLM's truncate_prompt_tokens -1 (and the Responses API's truncation "auto"): the prompt's last tokens, as many
    as the context holds beside max_new_tokens; unset, beside one token."""
    prompt = "one two three four five six seven eight nine ten"
    ids = engine.encode_prompt(prompt)[1]
    length = len(ids)
    monkeypatch.setattr(engine, "max_total_tokens", length - 2)
    monkeypatch.setattr(engine, "max_input_tokens", length - 3)
    params = GenerateParameters(max_new_tokens=3, truncate=-1, decoder_input_details=True)
    result = engine.generate(prompt, params)
    assert result.input_length == length - 5 and result.best.generated_tokens <= 3
    assert "".join(p.text for p in result.prefill).endswith(" nine ten")
    assert engine.encode_prompt(prompt, -1, GenerateParameters())[1] == ids[-(length - 3) :]


def test_adapter_id_loads_a_peft_adapter(engine, tmp_path):
    import peft
    import torch
    from transformers import AutoModelForCausalLM

    base_model = AutoModelForCausalLM.from_config(engine.model.config)
    base_model.load_state_dict(engine.model.state_dict(), strict=False)
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    torch.manual_seed(0)
    peft.get_peft_model(base_model, config).save_pretrained(tmp_path / "lora")
    params = GenerateParameters(max_new_tokens=8)
    before = engine.generate("The capital of France is", params).generated_text
    adapted = engine.generate(
        "The capital of France is", params.model_copy(update={"adapter_id": str(tmp_path / "lora")})
    )
    assert adapted.generated_text != before
    assert engine.generate("The capital of France is", params).generated_text == before


def test_adapter_id_refused_clearly(engine, monkeypatch):
    with pytest.raises(ParameterError, match="cannot load adapter"):
        engine.generate("hi", GenerateParameters(max_new_tokens=1, adapter_id="/no/such/adapter"))
    monkeypatch.setitem(__import__("sys").modules, "peft", None)  # as if peft were not installed
    with pytest.raises(ParameterError, match="needs the `peft` package"):
        engine.generate("hi", GenerateParameters(max_new_tokens=1, adapter_id="some/lora"))


def test_tiny_temperature_is_greedy_not_a_crash(engine):
    greedy = engine.generate("one, two,", GenerateParameters(max_new_tokens=4))
    tiny = engine.generate("one, two,", GenerateParameters(max_new_tokens=4, temperature=1e-40, seed=1))
    assert tiny.generated_text == greedy.generated_text
    assert all(t.logprob is not None and math.isfinite(t.logprob) for t in tiny.best.tokens)


def test_invalid_unicode_is_a_parameter_error(engine):
    with pytest.raises(ParameterError, match="invalid Unicode"):
        engine.generate("bad \ud800 text", GenerateParameters(max_new_tokens=1))
    with pytest.raises(ParameterError, match="invalid Unicode"):
        engine.tokenize("\udfff")


def test_remote_refs_are_refused_before_decoding(engine):
    schema = {"type": "object", "properties": {"a": {"$ref": "http://example.com/schema.json"}}}
    with pytest.raises(UnsupportedConstraintError, match="does not resolve inside the schema"):
        engine.generate("hi", GenerateParameters(max_new_tokens=1, grammar={"type": "json", "value": schema}))
    local = {
        "$defs": {"n": {"type": "integer"}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/n"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    result = engine.generate(
        ask("An object with a number a, as JSON."),
        GenerateParameters(max_new_tokens=20, grammar={"type": "json", "value": local}),
    )
    assert result.best.validation.valid is True


def test_a_matcher_that_gives_up_fails_the_request_naming_its_limit(engine):
    # past llguidance's row limit its mask allows only the end: an answer cut there would break the grammar
    grammar = "start: " + " | ".join(f'"w{i}"' for i in range(2500))
    params = GenerateParameters(max_new_tokens=4, grammar={"type": "grammar", "value": grammar})
    with pytest.raises(
        UnsupportedConstraintError, match=r"llguidance stopped the constraint after \d+ tokens?: .*max is 2000"
    ):
        engine.generate(ask("Pick a word."), params)
    assert engine.generate(ask("Say hi."), GenerateParameters(max_new_tokens=2)).best.generated_tokens >= 1
    # a rule that can never finish: llguidance gives up following its forced text; it said "a smaller one fits"
    endless = {"type": "grammar", "value": 'start: x\nx: "a" x'}
    with pytest.raises(UnsupportedConstraintError, match="the constraint forces text that never ends: a rule with"):
        engine.generate(ask("Write a's."), GenerateParameters(max_new_tokens=4, grammar=endless))


def test_streamed_pieces_add_up_when_characters_span_tokens(engine):
    # emoji are several byte-level tokens; pieces must not carry half characters
    events = list(engine.stream("Reply with three party emoji: 🎉🎉🎉. Again:", GenerateParameters(max_new_tokens=12)))
    *tokens, final = events
    text = "".join(e.token.text for e in tokens if not e.token.special)
    assert "\ufffd" not in text
    assert final.generated_text.startswith(text) and len(final.generated_text) - len(text) <= 1


def test_a_stop_sequence_ending_in_a_character_split_across_tokens_stops(engine):
    """The last byte of a split character turns the text's U+FFFD into the character without lengthening the text:
    the stop check looked only past the old length, so a stop ending in that character (most emoji, much CJK) never
    matched."""
    for text, stop in (("abc 日本語 def", "語"), ("abc 日本語 def", "本語"), ("Hello 🌍 world", "🌍")):
        params = GenerateParameters(max_new_tokens=20, grammar={"type": "regex", "value": text}, stop=[stop])
        best = engine.generate("Say: ", params).best
        assert (best.finish_reason, best.stop_sequence) == ("stop_sequence", stop)
        assert best.generated_text == text[: text.index(stop) + len(stop)]


def test_a_stop_sequence_matches_the_new_text_of_a_continued_answer_alone(engine):
    """With continue_from (continue_final_message), a stop sequence begun in the continued answer ended the row at its
    first new token (`bc` here) while the OpenAI routes' trim, of the new text, found nothing to cut, and the trimmed
    verdict cut inside the prefix: vLLM matches stop sequences in the new text alone."""
    params = GenerateParameters(
        max_new_tokens=12, grammar={"type": "regex", "value": r"abc\.def"}, continue_from="ab", stop=["bc", "c.d"]
    )
    best = engine.generate("Say: ", params).best
    assert (best.finish_reason, best.stop_sequence) == ("stop_sequence", "c.d")
    assert best.generated_text.startswith("c.d") and "abc.def".startswith("ab" + best.generated_text)
    assert best.trimmed_validation is not None and best.trimmed_validation.valid is False  # "ab", the prefix kept
    whole = engine.generate("Say: ", params.model_copy(update={"stop": ["bc"]})).best
    assert (whole.finish_reason, whole.generated_text, whole.validation.valid) == ("eos_token", "c.def", True)
    # the stop in the prefix too: the answer as returned (kept up to the stop, include_stop_str_in_output) is whole
    again = GenerateParameters(
        max_new_tokens=12,
        grammar={"type": "regex", "value": r"ab\.ab\."},
        continue_from="ab.",
        stop=["ab."],
        include_stop_str_in_output=True,
    )
    kept = engine.generate("Say: ", again).best
    assert (kept.finish_reason, kept.generated_text, kept.trimmed_validation) == ("stop_sequence", "ab.", None)


def test_min_tokens_past_the_constraint_s_end_is_named(engine):
    """A choice ends after its word; min_tokens (ignore_eos) held the end off and nothing was left: the error said only
    that every token was masked out, naming neither field."""
    params = GenerateParameters(max_new_tokens=8, min_tokens=4, grammar={"type": "choice", "value": ["yes", "no"]})
    with pytest.raises(ParameterError, match=r"^min_tokens: the constraint allows nothing but the end") as caught:
        engine.generate(ask("Yes or no?"), params)
    assert caught.value.field == "min_tokens" and "min_tokens (4; ignore_eos sets it to max_tokens)" in str(
        caught.value
    )
    assert engine.generate(ask("Yes or no?"), params.model_copy(update={"min_tokens": 1})).best.validation.valid


def test_a_row_s_text_decoded_as_it_grows_is_the_whole_row_s_text(engine):
    """The embedded tokenizer's text joins (runner.RowText decodes a row's new tokens only): ids from across its
    vocabulary, half of them bytes of split characters, with special tokens and drafts undone, give the whole
    row's text at every token."""
    runner = engine.runner
    assert runner.text_joins
    split = [i for i in range(runner.vocab_size) if "\ufffd" in runner.token_text(i)]
    special = sorted(runner.special_ids)
    text, rng, ids = RowText(runner.text, runner.text_joins), random.Random(3), []
    for _ in range(500):
        if ids and rng.random() < 0.1:
            del ids[len(ids) - rng.randint(1, min(3, len(ids))) :]
        pool = rng.choice((split, special, range(runner.vocab_size)))
        ids.append(rng.choice(pool))
        assert text(ids) == runner.text(ids)


def test_a_character_cut_by_the_token_limit_streams_as_the_text_ends(engine):
    """The pieces streamed add up to the text, also when max_new_tokens cuts a character's bytes in two."""
    params = {"grammar": {"type": "regex", "value": "[🎉😀🙂日本語]{3,8}"}}
    cut = []
    for limit in range(1, 6):
        result = engine.generate("Emoji: ", GenerateParameters(max_new_tokens=limit, **params))
        best = result.best
        assert "".join(t.text for t in best.tokens if not t.special) == best.generated_text
        cut.append(best.generated_text.endswith("\ufffd"))
        if cut[-1]:
            assert best.validation.valid is False and "ended it inside a character" in best.validation.message
        elif best.finish_reason == "length" and best.validation.valid is False:
            assert "max_new_tokens ended it before the constraint was complete" in best.validation.message
    assert any(cut)  # some limit fell inside a character
    short = engine.generate(
        ask("A person as JSON."), GenerateParameters(max_new_tokens=3, grammar={"type": "json", "value": PERSON})
    )
    assert short.best.finish_reason == "length" and short.best.validation.message.endswith(
        "(max_new_tokens ended it before the constraint was complete)"
    )


def test_stats_count_a_generation_whose_reader_left_as_cancelled(engine):
    before = engine.stats.snapshot()
    events = engine.stream("Count: ", GenerateParameters(max_new_tokens=20))
    next(events)
    events.close()
    after = engine.stats.snapshot()
    assert after.started == before.started + 1 and after.succeeded == before.succeeded
    assert after.failed["cancelled"] == before.failed["cancelled"] + 1
    deadline = time.monotonic() + 30
    while engine.scheduler.usage()["requests"] and time.monotonic() < deadline:  # it left the batch
        time.sleep(0.05)
    assert engine.scheduler.usage()["requests"] == 0


def test_messages_on_a_model_without_a_chat_template_say_how_they_were_joined(engine, monkeypatch) -> None:
    """vLLM refuses such a chat; here the messages are joined as lines, and the answer's warnings say so (they
    said nothing, and the template's options and the tools went unseen without a word)."""
    monkeypatch.setattr(engine.tokenizer, "chat_template", None)
    messages = [ChatMessage(role="user", content="hi")]
    result = engine.generate(messages, GenerateParameters(max_new_tokens=2, chat_template_kwargs={"x": 1}))
    assert result.prompt == "user: hi\nassistant: "
    joined = "the model has no chat template: the messages were joined as 'role: content' lines"
    assert f"{joined} (chat_template_kwargs were not read)" in result.warnings
    assert not any("chat template" in w for w in engine.generate("hi", GenerateParameters(max_new_tokens=2)).warnings)
