"""Chat request fields as the peers read them: null means unset, every field has a fate (implemented,
accepted with a warning, or refused by name), and the new sampling fields reach the decoder."""

from __future__ import annotations

import json
from typing import Any

import openai.types.chat.completion_create_params as openai_params
import pytest
import torch
from pydantic import ValidationError
from text_generation.types import ChatRequest as TGIChatRequest
from text_generation.types import Message

from playground.constraints import Constraint
from playground.decoding import chat_template, sampling
from playground.decoding.stopping import Stop, StopCriteria, checked_stop_ids
from playground.errors import InvalidConstraintError, ParameterError
from playground.types import ChatMessage, GenerateParameters
from playground.wire import chat_fields, completions, inbound, responses, tools
from playground.wire.controls import BY_NAME, carried_by
from playground.wire.errors import parameter_error

USER = [{"role": "user", "content": "hi"}]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


def _request(**fields: Any) -> inbound.ChatRequest:
    return inbound.ChatRequest.model_validate({"messages": USER, **fields})


def test_tgi_clients_body_with_its_nulls_is_read_as_unset() -> None:
    body = TGIChatRequest(model="embedded", messages=[Message(role="user", content="hi")]).model_dump()
    assert body["n"] is None and body["logit_bias"] is None and body["repetition_penalty"] is None
    params = inbound.chat_parameters(inbound.ChatRequest.model_validate(body), seed=1)
    assert params.presence_penalty is None and params.logit_bias is None and params.repetition_penalty is None


def test_every_openai_chat_field_sent_as_null_is_unset() -> None:
    names = set(openai_params.CompletionCreateParamsBase.__annotations__) | {"stream"}
    body = {name: None for name in names} | {"messages": USER}
    req = inbound.ChatRequest.model_validate(body)
    assert (req.n, req.stream, req.logprobs) == (1, False, False)
    assert chat_fields.warnings(req) == []
    inbound.chat_parameters(req, seed=1)


def test_every_openai_chat_field_is_known() -> None:
    """A field OpenAI documents is never "unknown": implemented, ignored with a warning, or refused by name."""
    names = set(openai_params.CompletionCreateParamsBase.__annotations__)
    assert names <= set(inbound.ChatRequest.model_fields)


@pytest.mark.parametrize(
    ("fields", "warning"),
    [
        ({"metadata": {"k": "v"}}, "metadata: accepted and ignored"),
        ({"store": True}, "store: accepted and ignored"),
        ({"user": "u1"}, "user: accepted and ignored"),
        ({"service_tier": "auto"}, "service_tier: accepted and ignored"),
        (
            {"stream": True, "stream_options": {"continuous_usage_stats": True}},
            "stream_options.continuous_usage_stats: accepted",
        ),
        ({"logit_bias": [0.5, -1]}, "logit_bias: a list (TGI's form) names no token: accepted and ignored"),
    ],
)
def test_fields_that_cannot_change_the_tokens_are_warned_about(fields: dict[str, Any], warning: str) -> None:
    req = _request(**fields)
    inbound.chat_parameters(req, seed=1)
    assert any(warning in w for w in chat_fields.warnings(req)), chat_fields.warnings(req)


def test_structured_outputs_json_object_is_any_json_object() -> None:
    params = inbound.chat_parameters(_request(structured_outputs={"json_object": True}), seed=1)
    assert params.grammar is not None and params.grammar.model_dump() == {"type": "json", "value": {"type": "object"}}


def test_new_sampling_fields_reach_the_parameters() -> None:
    req = _request(
        presence_penalty=0.5,
        logit_bias={"42": -100, "7": 3.5},
        min_tokens=4,
        top_k=5,
        repetition_penalty=1.2,
        prompt_logprobs=0,
        add_generation_prompt=False,
        chat_template_kwargs={"enable_thinking": False},
        truncate_prompt_tokens=100,
        stop_token_ids=[42, 7],
        allowed_token_ids=[3, 4],
        bad_words=["no way"],
    )
    params = inbound.chat_parameters(req, seed=1)
    assert (params.presence_penalty, params.logit_bias, params.min_tokens) == (0.5, {"42": -100, "7": 3.5}, 4)
    assert (params.stop_token_ids, params.allowed_token_ids, params.bad_words) == ([42, 7], [3, 4], ["no way"])
    assert (params.top_k, params.repetition_penalty, params.truncate) == (5, 1.2, 100)
    assert params.decoder_input_details is True
    assert (params.add_generation_prompt, params.chat_template_kwargs) == (False, {"enable_thinking": False})
    assert inbound.chat_parameters(_request(ignore_eos=True, max_tokens=9), seed=1).min_tokens == 9
    assert inbound.chat_parameters(_request(truncate_prompt_tokens=-1), seed=1).truncate == -1  # vLLM's: fit
    # ignore_eos holds every end off until max_tokens (min_tokens): stop_token_ids' tokens too, where vLLM stops
    with pytest.raises(ParameterError, match=r"ignore_eos: not with stop_token_ids"):
        inbound.chat_parameters(_request(ignore_eos=True, max_tokens=9, stop_token_ids=[5]), seed=1)


@pytest.mark.parametrize("value", [0, -2])
def test_truncate_prompt_tokens_is_minus_one_or_a_count(value: int) -> None:
    with pytest.raises(ValidationError, match="truncate_prompt_tokens"):
        _request(truncate_prompt_tokens=value)


def test_prompt_logprobs_in_a_stream_is_refused_as_vllm_refuses_it() -> None:
    """No chunk carries prompt_logprobs: a stream dropped them without a word."""
    with pytest.raises(ParameterError, match="prompt_logprobs: not available when stream is true"):
        inbound.chat_parameters(_request(prompt_logprobs=1, stream=True), seed=1)


def test_continue_final_message_keeps_the_generation_prompt_as_vllm_users_send_it() -> None:
    messages = [*USER, {"role": "assistant", "content": "Hel"}]
    req = _request(messages=messages, continue_final_message=True, add_generation_prompt=False)
    assert inbound.chat_parameters(req, seed=1).add_generation_prompt is True


def test_logit_bias_keys_must_be_token_ids() -> None:
    """A key of digits other than ASCII's passed: "３３" read as token 33, and "²" (a digit int() refuses) was a 500, as
    was one of 5,000 digits (past Python's int() limit)."""
    for key in ("hello", "²", "３３", "+5", "1" * 5000):
        with pytest.raises(ParameterError, match=r"logit_bias: keys are token ids \(ASCII digits\)"):
            inbound.chat_parameters(_request(logit_bias={key: 1}), seed=1)
    with pytest.raises(ParameterError, match="between -100 and 100"):
        inbound.chat_parameters(_request(logit_bias={"1": 101}), seed=1)


def test_tgi_bare_string_tool_choice_names_the_function() -> None:
    req = _request(tools=TOOLS, tool_choice="get_time")
    assert tools.mode(req) == "named"
    params = inbound.chat_parameters(req, seed=1)
    assert params.grammar is not None and params.grammar.value == {"type": "object"}
    assert "Call `get_time` now" in tools.with_tools(req, req.messages)[0].text()
    with pytest.raises(ParameterError, match=r"no tool named 'requierd' in `tools` \(a string is none, auto, required"):
        tools.mode(_request(tools=TOOLS, tool_choice="requierd"))  # a misspelt mode is read as a tool's name


def test_allowed_tools_reads_as_the_tools_it_names_under_its_mode_in_chat_and_the_ui() -> None:
    """OpenAI's allowed_tools: chat's tool_choice and the UI's tools editor share the form (the editor's crashed on it
    with an AttributeError); a bad one is named alone, not beside every other form's complaint."""
    only = {"mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]}
    choice = {"type": "allowed_tools", "allowed_tools": only}
    req = _request(tools=TOOLS, tool_choice=choice)
    assert tools.mode(req) == "required" and [t.function.name for t in tools.callable_tools(req)] == ["get_time"]
    editor = tools.from_text(json.dumps({"tools": TOOLS, "tool_choice": choice}))
    assert tools.mode(editor) == "required" and [t.function.name for t in editor.tools] == ["get_time"]
    bad = {"tools": TOOLS, "tool_choice": {"type": "allowed_tools", "allowed_tools": {**only, "mode": "none"}}}
    assert tools.problem(json.dumps(bad)) == "tool_choice.allowed_tools.mode: Input should be 'auto' or 'required'"


def test_tgi_tool_prompt_replaces_our_words() -> None:
    req = _request(tools=TOOLS, tool_choice="required", tool_prompt="Pick a tool, human.")
    system = tools.with_tools(req, req.messages)[0].text()
    assert system.startswith("Pick a tool, human.\n") and "You can call these functions" not in system


def test_a_past_call_keeps_what_the_assistant_said_before_it() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
    said = {"role": "assistant", "content": "Checking.", "tool_calls": [call]}
    req = _request(tools=TOOLS, messages=[{"role": "user", "content": "Time?"}, said])
    assert tools.with_tools(req, req.messages)[-1].text() == 'Checking.\n{"name": "get_time", "arguments": {}}'
    quiet = _request(tools=TOOLS, messages=[{"role": "user", "content": "Time?"}, {**said, "content": None}])
    assert tools.with_tools(quiet, quiet.messages)[-1].text() == '{"name": "get_time", "arguments": {}}'


def _scores(vocab: int = 6) -> torch.Tensor:
    return torch.zeros((1, vocab))


def test_presence_penalty_counts_each_token_once() -> None:
    ids = torch.tensor([[9, 9, 1, 1, 1, 2]])  # prompt of 2 tokens, then 1, 1, 1, 2
    out = sampling.PresencePenalty(0.5, prompt_length=2)(ids, _scores())
    assert out[0].tolist() == [0.0, -0.5, -0.5, 0.0, 0.0, 0.0]


def test_logit_bias_adds_to_the_named_tokens_and_refuses_ids_outside_the_vocabulary() -> None:
    out = sampling.LogitBias({"3": 100.0, "0": -100.0}, vocab_size=6)(torch.zeros((1, 1), dtype=torch.long), _scores())
    assert out[0].tolist() == [-100.0, 0.0, 0.0, 100.0, 0.0, 0.0]
    with pytest.raises(ParameterError, match="token id 6 is not in the vocabulary"):
        sampling.LogitBias({"6": 1.0}, vocab_size=6)


def test_min_tokens_keeps_eos_out_until_enough_tokens() -> None:
    rule = sampling.MinTokens(2, prompt_length=3, eos_ids={5})
    early = rule(torch.zeros((1, 4), dtype=torch.long), _scores())
    assert early[0, 5] == float("-inf") and early[0, 4] == 0
    assert rule(torch.zeros((1, 5), dtype=torch.long), _scores())[0, 5] == 0
    # vLLM's min_tokens holds the stop_token_ids' tokens off too
    params = GenerateParameters(min_tokens=2, stop_token_ids=[1])
    (held,) = sampling.shared_processors(params, 6, "cpu", prompt_length=3, eos_ids={5})
    assert held(torch.zeros((1, 4), dtype=torch.long), _scores())[0].tolist() == [
        0,
        float("-inf"),
        0,
        0,
        0,
        float("-inf"),
    ]


def test_allowed_token_ids_leave_only_those_tokens_the_end_of_text_too() -> None:
    params = GenerateParameters(allowed_token_ids=[1, 3])
    (only,) = sampling.shared_processors(params, 6, "cpu", prompt_length=0, eos_ids={5})
    assert torch.isfinite(only(torch.zeros((1, 2), dtype=torch.long), _scores())[0]).tolist() == [
        False, True, False, True, False, False,
    ]  # fmt: skip
    with pytest.raises(ParameterError, match=r"allowed_token_ids: token id 6 is not in the vocabulary \(size 6\)"):
        sampling.shared_processors(GenerateParameters(allowed_token_ids=[6]), 6, "cpu", prompt_length=0)


def test_bad_words_are_spelled_as_vllm_spells_them_and_banned_where_the_answer_would_finish_them() -> None:
    spelled = {"cat": [1], " cat": [2], "hot dog": [3, 4], " hot dog": [5, 4], "ab": [1, 2], " ab": [1, 2]}
    # a word alone, and after a space where that is another first token in as many tokens (vLLM's rule)
    assert sampling.bad_word_ids(["cat", " hot dog", "ab"], lambda text: spelled[text]) == [
        [1], [2], [3, 4], [5, 4], [1, 2],
    ]  # fmt: skip
    rule = sampling.BadWords([[1], [3, 4], [5, 4]], prompt_length=2, vocab_size=6)

    def banned(ids: list[int]) -> list[int]:
        out = rule(torch.tensor([ids]), _scores())[0]
        return [i for i in range(6) if not torch.isfinite(out[i])]

    assert banned([0, 0]) == [1]  # nothing written yet: only the one-token word
    assert banned([0, 0, 3]) == banned([0, 0, 9, 5]) == [1, 4]  # "hot" or " hot" written: "dog" is out
    assert banned([3, 0]) == [1]  # the prompt's tokens do not count
    with pytest.raises(ParameterError, match=r"bad_words\[1\]: whitespace alone is no word"):
        sampling.bad_word_ids(["cat", " "], lambda text: spelled[text])
    with pytest.raises(ParameterError, match="bad_words: this route cannot spell words as tokens"):
        sampling.shared_processors(GenerateParameters(bad_words=["x"]), 6, "cpu", prompt_length=0)


def test_stop_token_ids_end_a_row_as_its_end_of_text_does_and_must_be_in_the_vocabulary() -> None:
    rules = StopCriteria(["zz"], max_new_tokens=9, eos_ids={2}, stop_ids=[2, 7])
    assert rules.check(2, "a", 1, 1) == Stop("eos_token")  # the model's own end: no stop token named
    assert rules.check(7, "ab", 1, 1) == Stop("eos_token", token=7)
    assert rules.check(8, "ab", 1, 1) is None and rules.check(8, "abzz", 2, 2) == Stop("stop_sequence", "zz")
    assert checked_stop_ids([0, 5], vocab_size=6) == [0, 5] and checked_stop_ids(None, vocab_size=6) == []
    with pytest.raises(ParameterError, match=r"stop_token_ids: token id 6 is not in the vocabulary \(size 6\)"):
        checked_stop_ids([1, 6], vocab_size=6)


def test_a_vanishing_repetition_penalty_keeps_the_logits_finite() -> None:
    """TGI and vLLM take any penalty > 0; 1e-300 is 0 in float32, and positive logits divided by it were inf (NaN
    logprobs: a 500, or a failed draw)."""
    chain = sampling.shared_processors(GenerateParameters(repetition_penalty=1e-300), 6, "cpu", 0)
    scores = chain(torch.tensor([[1, 2]]), torch.tensor([[3.0, 2.0, -1.0, 0.5, 4.0, 1.0]]))
    assert torch.isfinite(scores).all() and torch.isfinite(torch.log_softmax(scores, dim=-1)).all()


def test_shared_processors_include_the_new_ones() -> None:
    params = GenerateParameters(presence_penalty=1.0, logit_bias={"1": 2.0}, min_tokens=1)
    chain = sampling.shared_processors(params, 6, "cpu", 0, {5})
    kinds = {type(p) for p in chain}
    assert kinds == {sampling.PresencePenalty, sampling.LogitBias, sampling.MinTokens}


class _Recorder:
    """A tokenizer stand-in that records what the chat template was given."""

    def __init__(self, fail: bool = False, chat_template: str = "{{ messages }}", system_role: bool = True) -> None:
        self.kwargs: dict[str, Any] = {}
        self.messages: list = []
        self.fail = fail
        self.chat_template = chat_template
        self.system_role = system_role

    def apply_chat_template(self, messages: list, **kwargs: Any) -> str:
        if self.fail:
            raise TypeError("undefined is not callable")
        if not self.system_role and any(m["role"] == "system" for m in messages):
            raise ValueError("System role not supported")  # Gemma's template, by its raise_exception
        self.kwargs, self.messages = kwargs, messages
        return "rendered"


def test_the_developer_role_is_the_system_role_unless_the_template_names_it() -> None:
    messages = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "x"}]
    plain = _Recorder()
    chat_template.render(plain, messages, True, None)
    assert [m["role"] for m in plain.messages] == ["system", "user"]
    harmony = _Recorder(chat_template="{% if message.role == 'developer' %}...{% endif %}")
    chat_template.render(harmony, messages, True, None)
    assert [m["role"] for m in harmony.messages] == ["developer", "user"]
    prose = _Recorder(chat_template="{{ 'You help developers.' }}{{ messages }}")  # the word, not the role
    chat_template.render(prose, messages, True, None)
    assert [m["role"] for m in prose.messages] == ["system", "user"]


def test_a_developer_message_joins_the_system_message_beside_it() -> None:
    """Responses' instructions (or a tool note) then a developer message: one system message, as templates that take
    one (or want turns to alternate) need; two system messages the client wrote stay two."""
    instructions = {"role": "system", "content": "Be brief."}
    developer = {"role": "developer", "content": "Answer in French."}
    user = {"role": "user", "content": "x"}
    recorder = _Recorder()
    chat_template.render(recorder, [instructions, developer, user], True, None)
    assert recorder.messages == [{"role": "system", "content": "Be brief.\n\nAnswer in French."}, user]
    chat_template.render(recorder, [developer, instructions, user, developer], True, None)
    assert recorder.messages == [
        {"role": "system", "content": "Answer in French.\n\nBe brief."},
        user,
        {"role": "system", "content": "Answer in French."},
    ]
    chat_template.render(recorder, [instructions, instructions, user], True, None)
    assert recorder.messages == [instructions, instructions, user]


def test_a_template_that_refuses_the_messages_is_the_request_s_error() -> None:
    """Templates raise on messages they do not take (Gemma: a system message; Mistral: roles that do not
    alternate): a 400 naming `messages` and the template's words, not a 500."""
    with pytest.raises(ParameterError, match="messages: the model's chat template refused them: undefined is not"):
        chat_template.render(_Recorder(fail=True), [{"role": "user", "content": "x"}], True, None)


def test_a_template_without_a_system_role_reads_the_system_text_in_the_first_user_turn() -> None:
    """Gemma's template refuses a system message, which our tool instructions are: the text goes first in the user's
    turn (as Gemma's later templates do themselves); a system message elsewhere is still the template's refusal."""
    gemma = _Recorder(system_role=False)
    system, user = {"role": "system", "content": "Tools: get_weather."}, {"role": "user", "content": "Paris?"}
    chat_template.render(gemma, [system, user, {"role": "assistant", "content": "ok"}], True, None)
    assert gemma.messages == [
        {"role": "user", "content": "Tools: get_weather.\n\nParis?"},
        {"role": "assistant", "content": "ok"},
    ]
    with pytest.raises(ParameterError, match="refused them: System role not supported"):
        chat_template.render(gemma, [user, system], True, None)


def test_chat_template_kwargs_reach_the_template() -> None:
    recorder = _Recorder()
    chat_template.render(recorder, [{"role": "user", "content": "x"}], False, {"enable_thinking": False})
    assert recorder.kwargs == {"tokenize": False, "add_generation_prompt": False, "enable_thinking": False}
    with pytest.raises(ParameterError, match="chat_template_kwargs: tokenize cannot be set"):
        chat_template.render(recorder, [], True, {"tokenize": True})
    with pytest.raises(ParameterError, match="the chat template failed with them: undefined is not callable"):
        chat_template.render(_Recorder(fail=True), [], True, {"x": 1})


@pytest.mark.parametrize(
    ("fields", "whitespace"),
    [
        ({"structured_outputs": {"json": {"type": "object"}, "whitespace_pattern": "[ ]?"}}, "[ ]?"),
        ({"structured_outputs": {"json": {"type": "object"}, "disable_any_whitespace": True}}, "compact"),
        ({"guided_json": {"type": "object"}, "guided_whitespace_pattern": "[ \\n]?"}, "[ \\n]?"),
        ({"structured_outputs": {"json": {"type": "object"}, "whitespace_pattern": ""}}, ""),  # Outlines': none
        ({"guided_json": {"type": "object"}, "guided_whitespace_pattern": ""}, ""),
        ({"guided_json": {"type": "object"}}, None),
    ],
)
def test_vllm_whitespace_options_set_the_json_layout(fields: dict[str, Any], whitespace: str | None) -> None:
    req = _request(**fields)
    grammar = inbound.chat_parameters(req, seed=1).grammar
    assert grammar is not None and grammar.whitespace == whitespace
    assert not any("whitespace" in w for w in chat_fields.warnings(req))


def test_schemas_are_closed_unless_strict_false_and_tool_arguments_always() -> None:
    """As TGI's and vLLM's engines decode (outlines-core, xgrammar's strict mode); open objects let a model invent
    keys until max_tokens, as Outlines' own clients met it here."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}

    def closed(strict: object) -> bool:
        spec = {"name": "s", "schema": schema} | ({} if strict is None else {"strict": strict})
        params = inbound.chat_parameters(_request(response_format={"type": "json_schema", "json_schema": spec}), 1)
        return Constraint.from_grammar(params.grammar).schema.get("additionalProperties") is False

    assert closed(True) and closed(None) and not closed(False)
    assert Constraint.from_grammar({"type": "json", "value": schema}).schema["additionalProperties"] is False
    as_written = Constraint.from_grammar({"type": "json", "value": schema, "strict": False})
    assert "additionalProperties" not in as_written.schema
    # OpenAI's json_schema object pasted into TGI's grammar: its strict false was silently dropped
    pasted = {"type": "json_schema", "value": {"name": "s", "strict": False, "schema": schema}}
    assert "additionalProperties" not in Constraint.from_grammar(pasted).schema
    with pytest.raises(InvalidConstraintError, match="grammar.strict and grammar.value.strict disagree"):
        Constraint.from_grammar({**pasted, "strict": True})
    with pytest.raises(InvalidConstraintError, match="strict must be true or false"):
        Constraint.from_grammar({"type": "json_schema", "value": {"schema": schema, "strict": "no"}})
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        grammar = inbound.chat_parameters(_request(tools=TOOLS, tool_choice=choice), seed=1).grammar
        assert grammar is not None and grammar.strict is True, choice


def test_a_json_schema_format_without_its_schema_reads_the_value() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x"}, "value": {"name": "x", "schema": {"type": "object"}}}
    grammar = inbound.chat_parameters(_request(response_format=fmt), seed=1).grammar
    assert grammar is not None and grammar.type == "json_schema"


def test_template_variables_cannot_replace_the_templates_own_arguments() -> None:
    with pytest.raises(ParameterError, match="continue_final_message cannot be set here"):
        chat_template.render(None, [], True, {"continue_final_message": True})


@pytest.mark.parametrize("name", carried_by("chat"))
def test_each_control_the_chat_dialect_carries_reaches_chat_and_completions_alike(name: str) -> None:
    """One declaration (types.params.Sampling or the OpenAI base) and one mapping serve both OpenAI routes."""
    control = BY_NAME[name]
    value = round((control.low + control.high) / 2, 2)
    value = int(value) if control.integer else value
    fields = {"temperature": 0.7, name: value}
    chat = inbound.chat_parameters(_request(**fields), seed=1)
    completion = completions.parameters(completions.CompletionRequest(prompt="hi", **fields), seed=1)
    assert getattr(chat, name) == getattr(completion, name) == value


def test_completions_take_vllm_s_extras_as_chat_does() -> None:
    """vLLM's completions take these; here they were "unknown field (not a parameter of this endpoint)"."""

    def completion(**fields: Any) -> GenerateParameters:
        return completions.parameters(completions.CompletionRequest(prompt="hi", **fields), seed=1)

    assert completion(ignore_eos=True, max_tokens=9).min_tokens == 9
    with pytest.raises(ValidationError, match="return_full_text: TGI's name for echo; give one of them"):
        completions.CompletionRequest(prompt="hi", return_full_text=True, echo=False)  # it echoed without a word
    assert completions.CompletionRequest(prompt="hi", return_full_text=True, echo=True).echo
    assert completion(min_tokens=3).min_tokens == 3 and completion(truncate_prompt_tokens=50).truncate == 50
    assert completion(stop_token_ids=[2, 9]).stop_token_ids == [2, 9]
    assert completion(skip_special_tokens=True, include_stop_str_in_output=False).max_new_tokens == 16
    assert completion(include_stop_str_in_output=True).include_stop_str_in_output
    request = completions.CompletionRequest(prompt="hi", guided_decoding_backend="xgrammar")
    assert completions.warnings(request) == [
        "guided_decoding_backend: accepted and ignored (use constraint_engine to choose the engine)"
    ]
    for fields, message in (
        ({"skip_special_tokens": False}, "skip_special_tokens: special tokens are always left out"),
        ({"prompt_logprobs": 1}, "prompt_logprobs: use echo with logprobs"),
        ({"truncate": 5, "truncate_prompt_tokens": 6}, "truncate_prompt_tokens: vLLM's name for truncate"),
        ({"stop_token_ids": [2], "ignore_eos": True}, "ignore_eos: not with stop_token_ids"),
        ({"use_beam_search": True}, "use_beam_search: not supported"),
        ({"length_penalty": 0.5}, "length_penalty: only beam search uses it"),
        ({"add_special_tokens": False}, "add_special_tokens: false is not supported for a text prompt"),
    ):
        with pytest.raises(ParameterError, match=message):
            completion(**fields)


def test_completions_take_the_defaults_vllm_clients_send_and_warn_of_options_they_ignore() -> None:
    """They were "unknown field (not a parameter of this endpoint)" here (chat took them); stream options and
    structured_outputs options without effect went unnamed."""
    defaults = {
        "stop_token_ids": [],
        "bad_words": [],
        "allowed_token_ids": None,
        "use_beam_search": False,
        "length_penalty": 1.0,
        "add_special_tokens": True,
        "return_tokens_as_token_ids": False,
    }
    assert completions.parameters(completions.CompletionRequest(prompt="hi", **defaults), seed=1).max_new_tokens == 16
    ids = completions.CompletionRequest(prompt=[1, 2], add_special_tokens=False)  # ids are read as sent anyway
    assert completions.parameters(ids, seed=1).max_new_tokens == 16
    request = completions.CompletionRequest(
        prompt="hi",
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        structured_outputs={"choice": ["a", "b"], "disable_fallback": True},
    )
    assert completions.warnings(request) == [
        "structured_outputs.disable_fallback: accepted and ignored (constraint_engine chooses the engine)",
        "stream_options.continuous_usage_stats: accepted and ignored (usage comes in the last chunk (include_usage))",
    ]


def test_a_past_calls_arguments_reach_the_template_as_an_object() -> None:
    """Templates write arguments with `tojson` (Llama 3.1): OpenAI's JSON text would come out as a quoted string."""
    from transformers.utils.chat_template_utils import render_jinja_template

    calls = [
        {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        {"id": "b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]
    past = chat_template.message(ChatMessage(role="assistant", content=None, tool_calls=calls))
    assert [c["function"]["arguments"] for c in past["tool_calls"]] == [{"city": "Oslo"}, {}]
    assert calls[0]["function"]["arguments"] == '{"city": "Oslo"}'  # the request's own message is left as sent
    llama = "{% for c in messages[0].tool_calls %}{{ c.function.arguments | tojson }}{% endfor %}"
    rendered = render_jinja_template(conversations=[[past]], chat_template=llama)[0][0]
    assert rendered.startswith('{"city": "Oslo"}')


def test_responses_truncation_auto_is_vllms_minus_one_and_is_echoed() -> None:
    """OpenAI's truncation "auto" drops what outgrows the context; vLLM reads it as truncate_prompt_tokens -1. It was
    accepted, ignored and echoed as "disabled"."""
    auto = responses.ResponsesRequest.model_validate({"input": "hi", "truncation": "auto"})
    assert responses.chat_request(auto).truncate_prompt_tokens == -1 and auto.warnings() == []
    assert responses.response_body(auto, responses.new_ids(), "m")["truncation"] == "auto"
    plain = responses.ResponsesRequest.model_validate({"input": "hi", "truncation": "disabled"})
    assert responses.chat_request(plain).truncate_prompt_tokens is None
    assert responses.response_body(plain, responses.new_ids(), "m")["truncation"] == "disabled"


@pytest.mark.parametrize("fmt", [{"type": "text", "schema": {}}, {"type": "json_object", "name": "x", "strict": True}])
def test_responses_text_format_without_json_schema_takes_no_schema_fields(fmt: dict[str, Any]) -> None:
    """OpenAI refuses them ("Unknown parameter"); they were dropped without a word."""
    with pytest.raises(ValidationError, match=f'only a "json_schema" format takes it; this one is "{fmt["type"]}"'):
        responses.ResponsesRequest.model_validate({"input": "hi", "text": {"format": fmt}})


def test_responses_include_of_encrypted_reasoning_is_answered_with_a_warning() -> None:
    asked = responses.ResponsesRequest.model_validate({"input": "hi", "include": ["reasoning.encrypted_content"]})
    assert asked.warnings() == [
        "include reasoning.encrypted_content: nothing to add (no reasoning is kept here; a reasoning item carries its "
        "text, and one sent back in `input` is skipped)"
    ]


@pytest.mark.parametrize("seed", [-5, -(2**63)])
def test_a_negative_seed_is_taken_as_openai_and_vllm_take_any_int64(seed: int) -> None:
    """A 400 before ("greater than or equal to 0"). It is read modulo 2**63, the engine's range; -1 is no seed."""
    assert inbound.base_seed(_request(seed=seed)) == seed % 2**63
    assert completions.CompletionRequest(prompt="hi", seed=seed).seed == seed
    chat = responses.chat_request(responses.ResponsesRequest.model_validate({"input": "hi", "seed": seed}))
    assert inbound.base_seed(chat) == seed % 2**63
    with pytest.raises(ValidationError, match="seed"):
        _request(seed=-(2**63) - 1)
    # vLLM reads -1 as no seed (SamplingParams: `if self.seed == -1: self.seed = None`): a fresh draw each request
    assert len({inbound.base_seed(_request(seed=-1)) for _ in range(8)}) > 1


@pytest.mark.parametrize(
    ("stop", "message"),
    [
        ("", "stop: an empty stop sequence would stop before every token"),
        (["a", ""], "stop: item 1: an empty stop sequence would stop before every token"),
        ("x" * 257, "stop: String should have at most 256 characters"),
        (["a", 3], "stop: item 1: Input should be a valid string"),
        (5, "stop: give a string or a list of strings"),
    ],
)
def test_a_stop_is_refused_with_the_error_of_the_shape_sent(stop: Any, message: str) -> None:
    """An empty stop was silently ignored (vLLM refuses it); a bad string also said "Input should be a valid list"."""
    with pytest.raises(ValidationError) as caught:
        inbound.ChatRequest.model_validate({"messages": [{"role": "user", "content": "x"}], "stop": stop})
    assert parameter_error(caught.value).message == message
    with pytest.raises(ValidationError, match="an empty stop sequence would stop before every token"):
        GenerateParameters.model_validate({"stop": ["\n", ""]})


def test_no_allowed_token_ids_at_all_is_refused_by_name_as_vllm_refuses_it() -> None:
    """`allowed_token_ids: []` read as unset: any token was written where the field said none may be."""
    for make in (
        lambda: _request(allowed_token_ids=[]),
        lambda: completions.CompletionRequest(prompt="hi", allowed_token_ids=[]),
        lambda: GenerateParameters(allowed_token_ids=[]),
    ):
        with pytest.raises(ValidationError, match=r"allowed_token_ids\n  List should have at least 1 item"):
            make()


def test_a_message_without_content_is_refused_unless_the_assistant_s() -> None:
    """A misspelt `content` (`contents`) was an empty user message, answered without a word: OpenAI's API refuses a
    user, system, developer or tool message without content; an assistant's may have tool calls instead."""
    with pytest.raises(ValidationError, match=r"a user message needs `content` \(it has: contents\)"):
        _request(messages=[{"role": "user", "contents": "What is 2+2?"}])
    for role in ("system", "developer", "tool", "user"):
        with pytest.raises(ValidationError, match=f"a {role} message needs `content` \\["):
            ChatMessage(role=role)
    assert ChatMessage(role="assistant", tool_calls=[]).text() == ""


def test_json_schema_keys_outside_openai_s_are_refused_by_name() -> None:
    """A misspelt `strict` (`stict`) did nothing: the objects stayed closed, with no word of it."""
    schema = {"name": "p", "schema": {"type": "object"}}
    with pytest.raises(ValidationError, match=r"json_schema\.stict: unknown field \(it takes description, name"):
        _request(response_format={"type": "json_schema", "json_schema": {**schema, "stict": False}})
    full = {**schema, "description": "a pet", "strict": False}
    assert _request(response_format={"type": "json_schema", "json_schema": full}).response_format is not None
