"""The wire layer: every request shape maps to the same GenerateParameters, with one set of words for errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from playground.errors import ParameterError
from playground.types import GenerateParameters, ModelInfo
from playground.wire import checks, controls, inbound, outbound
from playground.wire.errors import parameter_error

INFO = ModelInfo(model_id="m", provider_id="p", provider_type="t", max_input_tokens=99, max_total_tokens=100)


def test_neutral_control_values_mean_unset() -> None:
    values = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "frequency_penalty": 0.0}
    params = inbound.from_controls({**values, "max_new_tokens": 5})
    assert params.temperature is None and params.top_k is None and params.min_p is None
    assert not params.sampling


def test_a_set_warper_samples_as_in_tgi() -> None:
    params = inbound.from_controls({"min_p": 0.2, "top_k": 7, "max_new_tokens": 5})
    assert params.min_p == 0.2 and params.top_k == 7 and params.sampling


def test_form_and_chat_body_agree_on_min_p() -> None:
    chat = inbound.ChatRequest.model_validate({"messages": [{"role": "user", "content": "x"}], "min_p": 0.3})
    from_chat = inbound.chat_parameters(chat, seed=1)
    from_form = inbound.from_controls({"min_p": 0.3})
    assert from_chat.min_p == from_form.min_p == 0.3


def test_greedy_chat_drops_warpers_but_keeps_penalties() -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "temperature": 0, "min_p": 0.3, "frequency_penalty": 0.5}
    params = inbound.chat_parameters(inbound.ChatRequest.model_validate(body), seed=1)
    assert params.min_p is None and params.temperature is None and params.frequency_penalty == 0.5
    assert not params.sampling


def test_min_p_out_of_range_names_the_field() -> None:
    with pytest.raises(ParameterError, match=r"^min_p: Input should be less than or equal to 1"):
        inbound.from_controls({"min_p": 1.5})


def test_dialects_carry_min_p_only_where_servers_accept_it() -> None:
    assert "min_p" in controls.carried_by("vllm") and "min_p" in controls.carried_by("chat")
    assert "min_p" not in controls.carried_by("openai") and "min_p" not in controls.carried_by("tgi")
    assert controls.BY_NAME["min_p"].label == "min_p (0 = off)"


def test_best_of_needs_sampling_worded_once() -> None:
    with pytest.raises(ParameterError, match=r"^parameters.best_of: best_of > 1 needs sampling"):
        checks.check_best_of(GenerateParameters(best_of=2), 4)
    checks.check_best_of(GenerateParameters(best_of=2, min_p=0.1), 4)  # min_p is a sampling parameter
    with pytest.raises(ParameterError, match=r"must be <= 2 \(max_best_of\)"):
        checks.check_best_of(GenerateParameters(best_of=3, do_sample=True), 2)


def test_limits_refuse_best_of_when_streaming() -> None:
    with pytest.raises(ParameterError, match="not supported when streaming"):
        checks.check_limits(GenerateParameters(best_of=2, do_sample=True), INFO, streaming=True)


def test_tgi_routes_refuse_return_token_ids_and_name_where_the_ids_are() -> None:
    """vLLM's return_token_ids has no place in TGI's answer: it was taken and ignored on /generate."""
    with pytest.raises(ParameterError, match=r"^parameters.return_token_ids: .*`details` lists each token's id"):
        checks.check_limits(GenerateParameters(return_token_ids=True), INFO, streaming=False)


@pytest.mark.parametrize(
    ("field", "min_field"), [("parameters.max_new_tokens", "parameters.min_tokens"), ("max_tokens", "min_tokens")]
)
def test_min_tokens_past_max_new_tokens_is_refused_by_the_names_sent(field: str, min_field: str) -> None:
    with pytest.raises(ParameterError, match=rf"^{min_field}: must be <= {field} \(5\), got 10") as caught:
        checks.check_lengths(GenerateParameters(min_tokens=10, max_new_tokens=5), INFO, field)
    assert caught.value.field == min_field
    checks.check_lengths(GenerateParameters(min_tokens=5, max_new_tokens=5), INFO, field)


def test_tokens_named_by_id_need_a_local_model() -> None:
    """return_tokens_as_token_ids names tokens by their ids: a remote model's come by their text (stand-in ids)."""
    checks.check_token_ids(True, local=True)
    checks.check_token_ids(None, local=False)
    with pytest.raises(ParameterError, match="^return_tokens_as_token_ids: a remote model's tokens come by their text"):
        checks.check_token_ids(True, local=False)


def test_parameter_error_names_every_field_under_a_prefix() -> None:
    try:
        GenerateParameters.model_validate({"top_p": 2.0, "seed": -1})
    except ValidationError as exc:
        error = parameter_error(exc, prefix=("parameters",))
    assert error.field == "parameters.seed"
    assert "parameters.top_p: Input should be less than or equal to 1" in error.message
    assert "parameters.seed: Input should be greater than or equal to 0" in error.message


def test_min_p_reaches_the_local_sampler() -> None:
    import torch

    from playground.decoding import sampling

    scores = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    kept = sampling.warpers(GenerateParameters(min_p=0.4))(torch.zeros((1, 1), dtype=torch.long), scores)
    assert torch.isfinite(kept[0, :2]).all() and torch.isinf(kept[0, 2])  # 0.1 < 0.4 * 0.6


def test_every_extension_is_refused_by_remote_dialects_unless_carried() -> None:
    extensions = set(GenerateParameters.model_fields) - outbound.TGI_FIELDS
    for dialect in ("openai", "vllm", "tgi"):
        carried = set(controls.carried_by(dialect)) | set(outbound.CARRIED.get(dialect, ()))
        assert extensions - carried <= set(outbound.unsupported(dialect)), dialect
        assert not carried & set(outbound.unsupported(dialect)), dialect
    assert "min_p" not in outbound.unsupported("vllm") and "min_p" in outbound.unsupported("tgi")
