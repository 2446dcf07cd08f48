"""Result types map onto TGI's wire shapes exactly, extras included, and TGI's request rules hold."""

from __future__ import annotations

import pytest

from playground.errors import ParameterError
from playground.server import convert
from playground.types import (
    ChatCompletionRequest,
    ChatMessage,
    GeneratedToken,
    GenerateParameters,
    GenerationResult,
    ModelInfo,
    PrefillToken,
    Sequence,
    Token,
    TokenEvent,
    Validation,
)
from playground.wire import checks, completions, inbound
from playground.wire.completions import CompletionRequest
from tests.spec import validate

INFO = ModelInfo(
    model_id="m",
    provider_id="local",
    provider_type="local::transformers",
    max_input_tokens=100,
    max_total_tokens=128,
    max_best_of=2,
    max_top_n_tokens=5,
)


def _token(token_id: int, text: str, logprob: float) -> GeneratedToken:
    top = [Token(id=token_id, text=text, logprob=logprob), Token(id=9, text="x", logprob=-3.0)]
    raw = [Token(id=7, text="<b>", logprob=-0.1), Token(id=token_id, text=text, logprob=logprob - 1)]
    return GeneratedToken(
        id=token_id,
        text=text,
        logprob=logprob,
        raw_logprob=logprob - 1,
        mass_kept=0.4,
        top_tokens=top,
        raw_top_tokens=raw,
    )


def _sequence(text: str, seed: int) -> Sequence:
    return Sequence(
        generated_text=text,
        finish_reason="stop_sequence",
        generated_tokens=2,
        seed=seed,
        tokens=[_token(1, text[:1], -0.5), _token(2, text[1:], -0.25)],
        stop_sequence="}",
        total_logprob=-0.75,
        validation=Validation(valid=True, message="ok"),
    )


def _result() -> GenerationResult:
    return GenerationResult(
        model_id="m",
        prompt="P: ",
        input_length=2,
        prefill=[PrefillToken(id=5, text="P", logprob=None), PrefillToken(id=6, text=": ", logprob=-2.0)],
        best=_sequence("{}", 11),
        best_of_sequences=[_sequence("{ }", 12)],
        constraint_kind="json_schema",
        constraint_engine="llguidance",
    )


def test_generate_response_without_details_is_tgi_shaped_and_has_extras() -> None:
    body = convert.generate_response(_result(), GenerateParameters())
    validate(body, "GenerateResponse")
    assert body["details"] is None
    assert body["generated_text"] == "{}"
    assert body["validation"] == {"valid": True, "message": "ok", "enforced": True}
    assert body["constraint_engine"] == "llguidance"


def test_generate_response_with_every_detail() -> None:
    params = GenerateParameters(
        details=True, decoder_input_details=True, top_n_tokens=2, best_of=2, do_sample=True, return_full_text=True
    )
    body = convert.generate_response(_result(), params)
    validate(body, "GenerateResponse")
    details = body["details"]
    assert body["generated_text"] == "P: {}"
    assert [p["text"] for p in details["prefill"]] == ["P", ": "]
    assert details["tokens"][0]["raw_logprob"] == -1.5
    assert details["tokens"][0]["mass_kept"] == 0.4
    assert details["tokens"][0]["raw_top_tokens"][0]["text"] == "<b>"
    assert [len(row) for row in details["top_tokens"]] == [2, 2]
    assert details["best_of_sequences"][0]["generated_text"] == "P: { }"
    assert details["best_of_sequences"][0]["seed"] == 12
    assert details["stop_sequence"] == "}"


def test_details_name_the_stop_token_that_ended_the_answer() -> None:
    """A stop_token_ids token ended it (finish_reason eos_token): details said nothing of which (chat's stop_reason did)."""
    result = _result()
    result.best = result.best.model_copy(update={"finish_reason": "eos_token", "stop_sequence": None, "stop_token": 7})
    body = convert.generate_response(result, GenerateParameters(details=True))
    validate(body, "GenerateResponse")
    assert (body["details"]["finish_reason"], body["details"]["stop_token"]) == ("eos_token", 7)
    assert convert.generate_response(_result(), GenerateParameters(details=True))["details"]["stop_token"] is None


def test_full_text_holds_the_answer_a_continuation_continued() -> None:
    """return_full_text with continue_from gave the prompt and the new text alone ("P: }"), text nobody wrote."""
    result = _result()
    result.best = result.best.model_copy(update={"generated_text": "}", "continued_from": "{"})
    full = GenerateParameters(return_full_text=True, continue_from="{")
    assert convert.generate_response(result, full)["generated_text"] == "P: {}"
    assert convert.stream_final_event(0, None, result, full)["generated_text"] == "P: {}"
    assert convert.generate_response(result, GenerateParameters(continue_from="{"))["generated_text"] == "}"


def test_stream_events_validate_and_only_the_last_carries_text() -> None:
    params = GenerateParameters(details=True, top_n_tokens=2)
    result = _result()
    first = convert.stream_token_event(0, TokenEvent(index=0, token=result.best.tokens[0]), params)
    last = convert.stream_final_event(1, TokenEvent(index=0, token=result.best.tokens[1]), result, params)
    for event in (first, last):
        validate(event, "StreamResponse")
    assert first["generated_text"] is None and first["details"] is None
    assert last["generated_text"] == "{}"
    assert last["details"]["finish_reason"] == "stop_sequence"
    assert last["details"]["input_length"] == 2
    assert [t["id"] for t in last["top_tokens"]] == [2, 9]


def test_stream_final_event_omits_details_unless_asked() -> None:
    last = convert.stream_final_event(0, None, _result(), GenerateParameters())
    validate(last, "StreamResponse")
    assert last["details"] is None and last["generated_text"] == "{}"


def test_info_is_tgi_shaped() -> None:
    body = convert.tgi_info(
        INFO,
        processors=[{"name": "ban_strings"}],
        models=[{"id": "m", "provider_id": "local"}],
        max_concurrent_requests=9,
    )
    validate(body, "Info")
    assert body["max_top_n_tokens"] == 5
    assert body["processors"] == [{"name": "ban_strings"}]


@pytest.mark.parametrize(
    ("params", "streaming", "message"),
    [
        (GenerateParameters(best_of=2), False, "best_of > 1 needs sampling"),
        (GenerateParameters(best_of=2, do_sample=True), True, "not supported when streaming"),
        (GenerateParameters(best_of=3, do_sample=True), False, r"must be <= 2 \(max_best_of\)"),
        (GenerateParameters(top_n_tokens=6), False, "top_n_tokens: must be <= 5"),
        (GenerateParameters(max_new_tokens=0), False, "max_new_tokens: must be at least 1"),
        (GenerateParameters(max_new_tokens=128), False, r"must be < 128 \(max_total_tokens\)"),
        (GenerateParameters(decoder_input_details=True), True, "decoder_input_details: not supported when streaming"),
    ],
)
def test_tgi_rules(params: GenerateParameters, streaming: bool, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        checks.check_limits(params, INFO, streaming=streaming)


def test_tgi_rules_accept_a_sampled_best_of() -> None:
    checks.check_limits(GenerateParameters(best_of=2, temperature=0.7, max_new_tokens=10), INFO, streaming=False)


def test_build_parameters_names_the_field() -> None:
    with pytest.raises(ParameterError, match=r"^frequency_penalty: Input should be greater than -2"):
        inbound.parameters({"frequency_penalty": -2.0})


def test_openai_s_frequency_penalty_takes_its_floor() -> None:
    """OpenAI's and vLLM's range is -2.0 to 2.0, TGI's stops short of -2.0: chat and completions refused -2.0."""
    chat = ChatCompletionRequest(messages=[ChatMessage(role="user", content="x")], frequency_penalty=-2.0)
    assert inbound.chat_parameters(chat, seed=1).frequency_penalty == -2.0
    completion = CompletionRequest(prompt="x", frequency_penalty=-2.0)
    assert completions.parameters(completion, seed=1).frequency_penalty == -2.0


def test_next_token_request_needs_exactly_one_prompt() -> None:
    with pytest.raises(ParameterError, match="exactly one of `inputs`"):
        convert.NextTokenRequest(inputs="a", messages=[{"role": "user", "content": "b"}]).prompt()
    assert convert.NextTokenRequest(inputs="a").prompt() == "a"
