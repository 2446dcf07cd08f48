"""The UI form becomes TGI parameters, constraints and processors; sessions round-trip through JSON."""

from __future__ import annotations

import json

import pytest

from playground.constraints.examples import EXAMPLES, PERSON_SCHEMA
from playground.errors import InvalidConstraintError, ParameterError, PlaygroundError
from playground.types import ChatMessage
from playground.ui import controls
from playground.ui.state import FIELDS, ChatState, Form, chat_inputs, export_session, import_session, params_of


def values(**overrides) -> list:
    """Component values as Gradio sends them, in FIELDS order."""
    return Form(**overrides).values()


def test_from_values_reads_component_values_in_field_order() -> None:
    raw = values(model="m", kind="regex", constraint_text="a+")
    raw[FIELDS.index("seed")] = " 7 "
    raw[FIELDS.index("top_k")] = 40.0
    raw[FIELDS.index("processor_params")] = None  # hidden components send None
    form = Form.from_values(raw)
    assert (form.model, form.kind, form.seed, form.top_k, form.processor_params) == ("m", "regex", 7, 40, "")


def test_a_bad_seed_is_named() -> None:
    raw = values()
    raw[FIELDS.index("seed")] = "abc"
    with pytest.raises(ParameterError, match="seed must be a whole number >= 0, got 'abc'"):
        Form.from_values(raw)


@pytest.mark.parametrize(("typed", "seed"), [("9185738488790498682", 9185738488790498682), ("42.0", 42), ("3e2", 300)])
def test_a_seed_is_read_exactly(typed: str, seed: int) -> None:
    """The server draws 63-bit seeds; read through a float, 9185738488790498682 became ...304, so a share link or
    a retyped seed decoded another answer."""
    raw = values()
    raw[FIELDS.index("seed")] = typed
    assert Form.from_values(raw).seed == seed


def test_neutral_values_leave_parameters_unset() -> None:
    params = params_of(Form())
    assert params.temperature is None and params.top_k is None and params.top_p is None
    assert params.typical_p is None and params.repetition_penalty is None and params.frequency_penalty is None
    assert params.best_of is None and params.seed is None and params.grammar is None
    assert params.max_new_tokens == 64 and params.top_n_tokens == 5 and params.details is True


def test_chosen_values_map_to_tgi_names() -> None:
    form = Form(
        do_sample=True,
        temperature=0.7,
        top_k=20,
        top_p=0.9,
        typical_p=0.95,
        repetition_penalty=1.2,
        frequency_penalty=0.5,
        seed=3,
        best_of=3,
        top_n_tokens=4,
        stop="END\n\n###",
        constraint_engine="xgrammar",
    )
    params = params_of(form)
    assert params.model_dump(
        include={
            "do_sample",
            "temperature",
            "top_k",
            "top_p",
            "typical_p",
            "repetition_penalty",
            "frequency_penalty",
            "seed",
            "best_of",
            "top_n_tokens",
            "stop",
            "constraint_engine",
        }
    ) == {
        "do_sample": True,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.9,
        "typical_p": 0.95,
        "repetition_penalty": 1.2,
        "frequency_penalty": 0.5,
        "seed": 3,
        "best_of": 3,
        "top_n_tokens": 4,
        "stop": ["END", "###"],
        "constraint_engine": "xgrammar",
    }


def test_a_stop_line_spells_a_newline_or_a_tab_with_a_backslash() -> None:
    """A newline, the commonest stop, cannot be a line of its own: it was dropped in silence (or `\\n` sent as is)."""
    assert params_of(Form(stop="\\n\nEND\\t\na\\\\nb")).stop == ["\n", "END\t", "a\\nb"]


def test_out_of_range_parameter_names_the_field() -> None:
    with pytest.raises(ParameterError, match="stop"):
        params_of(Form(stop="a\nb\nc\nd\ne"))
    with pytest.raises(ParameterError, match="temperature"):
        params_of(Form(temperature=0.0))


@pytest.mark.parametrize("kind", ["json_schema", "regex", "choice", "grammar"])
def test_every_example_becomes_a_grammar(kind: str) -> None:
    for example in EXAMPLES[kind]:
        grammar = params_of(Form(kind=kind, constraint_text=example.text)).grammar
        assert grammar is not None
        assert grammar.type == ("json" if kind == "json_schema" else kind)


def test_schema_and_choice_values_are_canonical() -> None:
    schema = params_of(Form(kind="json_schema", constraint_text=PERSON_SCHEMA)).grammar
    assert schema.value == json.loads(PERSON_SCHEMA)
    choice = params_of(Form(kind="choice", constraint_text="yes\nno\n\nyes")).grammar
    assert choice.value == ["yes", "no"]


def test_invalid_constraint_raises_its_own_error() -> None:
    with pytest.raises(InvalidConstraintError, match="invalid JSON in JSON schema"):
        params_of(Form(kind="json_schema", constraint_text="{nope"))


def test_unconstrained_params_drop_the_grammar_and_processors() -> None:
    form = Form(kind="processor", processor="ban_strings", processor_params="x\n\ny\n")
    assert [spec.model_dump() for spec in params_of(form).logits_processors] == [
        {"name": "ban_strings", "params": ["x", "y"]}
    ]
    assert params_of(form, constrained=False).logits_processors == []
    with pytest.raises(ParameterError, match="pick a registered processor"):
        params_of(Form(kind="processor"))


def test_a_processor_that_takes_one_text_gets_the_params_box_whole() -> None:
    """A two-line grammar was two parameters ("grammar takes one parameter ...; got 2")."""
    grammar = 'start: answer\nanswer: "yes" | "no"\n'
    form = Form(kind="processor", processor="grammar", processor_params=grammar)
    assert [spec.model_dump() for spec in params_of(form).logits_processors] == [
        {"name": "grammar", "params": [grammar]}
    ]
    schema = '{\n  "type": "boolean"\n}'
    form = Form(kind="processor", processor="json_schema", processor_params=schema)
    assert params_of(form).logits_processors[0].params == [schema]


def test_chat_inputs_put_the_system_prompt_first_and_the_new_message_last() -> None:
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert chat_inputs("sys", history, "c") == [
        ChatMessage(role="system", content="sys"),
        ChatMessage(role="user", content="a"),
        ChatMessage(role="assistant", content="b"),
        ChatMessage(role="user", content="c"),
    ]
    assert [m.role for m in chat_inputs("  ", history)] == ["user", "assistant"]


def test_session_round_trips() -> None:
    form = Form(model="m", kind="regex", constraint_text=r"\d+", seed=5, stop="x")
    state = ChatState(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "42"}])
    loaded, messages = import_session(export_session(form, state))
    assert loaded == form and messages == state.messages


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{oops", "session file is not JSON"),
        ('{"format": "structured-playground-ses', "session file is not JSON: Unterminated string starting at: line 1"),
        ('{"format": "other"}', "not a session file"),
        (
            '{"format": "structured-playground-session", "settings": null}',
            "settings must be an object of settings by name, got null",
        ),
        ('{"format": "structured-playground-session", "settings": {"temprature": 1}}', "session settings: temprature"),
        (
            '{"format": "structured-playground-session", "messages": [{"role": "robot", "content": "x"}]}',
            "session messages",
        ),
    ],
)
def test_bad_session_files_are_named(text: str, message: str) -> None:
    with pytest.raises(PlaygroundError, match=message):
        import_session(text)


def test_truncate_watermark_and_adapter_map_to_tgi_names() -> None:
    assert (params_of(Form()).truncate, params_of(Form()).watermark, params_of(Form()).adapter_id) == (
        None,
        False,
        None,
    )
    raw = values(truncate=12.0, watermark=True, adapter_id="  me/lora  ")
    params = params_of(Form.from_values(raw))
    assert (params.truncate, params.watermark, params.adapter_id) == (12, True, "me/lora")


@pytest.mark.parametrize("kind", ["json_schema", "regex", "choice", "grammar"])
def test_an_empty_constraint_is_worded_alike_on_the_status_line_and_on_send(kind: str) -> None:
    with pytest.raises(InvalidConstraintError) as sent:
        params_of(Form(kind=kind, constraint_text="  \n"))
    assert sent.value.message == f"the {kind} is empty: type one or pick an example"
    assert f"✗ {sent.value.message}" in controls.constraint_status(kind, "  \n")
