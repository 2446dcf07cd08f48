"""The exact request each remote provider sends, captured by a stub server over real HTTP."""

from __future__ import annotations

import pytest

from playground.errors import ParameterError, ProviderError, UnsupportedConstraintError
from playground.providers.hf_inference import HFInferenceConfig, HFInferenceProvider
from playground.providers.openai_compat import OpenAICompatProvider, OpenAIConfig
from playground.providers.tgi import TGIConfig, TGIProvider
from playground.providers.vllm import VLLMConfig, VLLMProvider
from playground.types import ChatMessage, GenerateParameters
from tests.stub_server import StubReply, chat_completion, completion, serve, tgi_generation  # noqa: F401 (fixture)

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
CLOSED = {**SCHEMA, "additionalProperties": False}  # what a schema becomes unless `strict: false`: what is sent on
OPEN = {**SCHEMA, "additionalProperties": True}  # `strict: false` as sent to engines that close what is left unsaid
CHAT = {"POST /v1/chat/completions": StubReply(json=chat_completion('{"n": 1}', logprobs=[('{"n": 1}', -0.1)]))}
MESSAGES = [ChatMessage(role="system", content="be brief"), ChatMessage(role="user", content="count")]

ASKED = [ChatMessage(role="user", content="p")]  # a chat (a plain prompt goes to vLLM's completions)


def openai(url: str, **config) -> OpenAICompatProvider:
    return OpenAICompatProvider("oa", OpenAIConfig(base_url=url + "/v1", api_key_env=None, **config))


def vllm(url: str, **config) -> VLLMProvider:
    return VLLMProvider("vl", VLLMConfig(base_url=url + "/v1", **config))


def tgi(url: str) -> TGIProvider:
    return TGIProvider("tg", TGIConfig(base_url=url))


def test_openai_sends_response_format_json_schema_and_openai_names(serve) -> None:
    stub = serve(CHAT)
    params = GenerateParameters(
        grammar={"type": "json", "value": SCHEMA},
        max_new_tokens=12,
        temperature=0.7,
        top_p=0.9,
        seed=3,
        stop=["\n\n"],
        top_n_tokens=4,
        frequency_penalty=0.5,
    )
    openai(stub.url).generate("gpt-x", MESSAGES, params)
    assert stub.last("/v1/chat/completions").body == {
        "model": "gpt-x",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "count"}],
        "max_tokens": 12,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 3,
        "frequency_penalty": 0.5,
        "stop": ["\n\n"],
        "logprobs": True,
        "top_logprobs": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": CLOSED, "strict": True}},
    }


def test_openai_gets_the_schema_name_the_client_gave(serve) -> None:
    """OpenAI shows the model a json_schema's name; it went as "output" whatever the client named it."""
    stub = serve(CHAT)
    named = {"type": "json_schema", "value": {"name": "weather_report", "schema": SCHEMA}}
    openai(stub.url).generate("gpt-x", MESSAGES, GenerateParameters(grammar=named))
    assert stub.last("/v1/chat/completions").body["response_format"]["json_schema"]["name"] == "weather_report"


def test_openai_gets_json_object_as_json_object(serve) -> None:
    """It went as a strict json_schema `{"type": "object"}`, which OpenAI's strict mode refuses (no keys declared)."""
    stub = serve(CHAT)
    openai(stub.url).generate(
        "gpt-x", MESSAGES, GenerateParameters(grammar={"type": "json", "value": {"type": "object"}})
    )
    assert stub.last("/v1/chat/completions").body["response_format"] == {"type": "json_object"}


def test_openai_greedy_is_temperature_zero_and_best_of_is_n(serve) -> None:
    stub = serve(CHAT)
    provider = openai(stub.url, strict=False)
    provider.generate("m", "a plain prompt", GenerateParameters(details=False))
    assert stub.last("/v1/chat/completions").body == {
        "model": "m",
        "messages": [{"role": "user", "content": "a plain prompt"}],
        "temperature": 0.0,
    }
    provider.generate("m", "p", GenerateParameters(best_of=3, do_sample=True, details=False))
    assert stub.last("/v1/chat/completions").body == {
        "model": "m",
        "messages": [{"role": "user", "content": "p"}],
        "n": 3,
        "logprobs": True,  # the candidates are ranked by their total logprob, details or not
    }


@pytest.mark.parametrize(
    "grammar",
    [
        {"type": "regex", "value": "[0-9]+"},
        {"type": "choice", "value": ["a", "b"]},
        {"type": "grammar", "value": 'start: "x"'},
    ],
)
def test_openai_refuses_what_it_cannot_enforce_before_sending(serve, grammar: dict) -> None:
    stub = serve(CHAT)
    with pytest.raises(UnsupportedConstraintError) as caught:
        openai(stub.url).generate("m", "p", GenerateParameters(grammar=grammar))
    assert f"provider 'oa' (remote::openai) cannot enforce a {grammar['type']} constraint" in caught.value.message
    assert stub.requests == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("top_k", 5),
        ("min_p", 0.1),
        ("repetition_penalty", 1.2),
        ("typical_p", 0.5),
        ("watermark", True),
        ("decoder_input_details", True),
    ],
)
def test_openai_refuses_parameters_it_would_ignore(serve, name: str, value: object) -> None:
    stub = serve(CHAT)
    with pytest.raises(ParameterError) as caught:
        openai(stub.url).generate("m", "p", GenerateParameters(**{name: value}))
    assert caught.value.message == f"{name} is not supported by provider 'oa' (remote::openai)"
    assert caught.value.field == f"parameters.{name}"
    assert stub.requests == []


@pytest.mark.parametrize(
    ("grammar", "field", "value"),
    [
        ({"type": "json", "value": SCHEMA}, "json", CLOSED),
        ({"type": "regex", "value": "[0-9]{3}"}, "regex", "[0-9]{3}"),
        ({"type": "choice", "value": ["yes", "no"]}, "choice", ["yes", "no"]),
        ({"type": "grammar", "value": 'start: "a" | "b"'}, "grammar", 'start: "a" | "b"'),
    ],
)
def test_vllm_sends_structured_outputs_for_every_kind(serve, grammar: dict, field: str, value: object) -> None:
    stub = serve({**CHAT, "POST /v1/completions": StubReply(json=completion("x"))})
    params = GenerateParameters(grammar=grammar, top_k=20, min_p=0.05, repetition_penalty=1.1, details=False)
    vllm(stub.url).generate("qwen", ASKED, params)
    vllm(stub.url).generate("qwen", "p", params)  # a plain prompt: the completions route, read as it is
    for path in ("/v1/chat/completions", "/v1/completions"):
        body = stub.last(path).body
        assert body["structured_outputs"] == {field: value}
        assert (body["top_k"], body["min_p"], body["repetition_penalty"]) == (20, 0.05, 1.1)
        assert not any(key.startswith("guided_") for key in body)
    assert stub.last("/v1/completions").body["prompt"] == "p" and "messages" not in stub.last("/v1/completions").body


def test_vllm_legacy_guided_fields(serve) -> None:
    stub = serve(CHAT)
    vllm(stub.url, constraint_field="guided").generate(
        "q", ASKED, GenerateParameters(grammar={"type": "choice", "value": ["x"]})
    )
    body = stub.last("/v1/chat/completions").body
    assert body["guided_choice"] == ["x"]
    assert "structured_outputs" not in body


def test_vllm_takes_a_structural_tag_as_its_response_format(serve) -> None:
    """vLLM's structural_tag is a response_format (xgrammar's form); its guided_* fields have none: refused by name."""
    tag = {"structures": [{"begin": "<a>", "schema": SCHEMA, "end": "</a>"}], "triggers": ["<a>"]}
    stub = serve(CHAT)
    vllm(stub.url).generate("q", ASKED, GenerateParameters(grammar={"type": "structural_tag", "value": tag}))
    body = stub.last("/v1/chat/completions").body
    assert body["response_format"]["type"] == "structural_tag" and "structured_outputs" not in body
    assert body["response_format"]["format"]["tags"][0]["content"]["json_schema"] == SCHEMA
    with pytest.raises(UnsupportedConstraintError, match="guided_\\* fields have no structural tag"):
        vllm(stub.url, constraint_field="guided").generate(
            "q", ASKED, GenerateParameters(grammar={"type": "structural_tag", "value": tag})
        )


def test_vllm_next_token_at_a_prefix_continues_the_answer(serve) -> None:
    reply = chat_completion("a", logprobs=[("a", -0.1)])
    stub = serve({"POST /v1/chat/completions": StubReply(json=reply)})
    asked = [ChatMessage(role="user", content="say a")]
    vllm(stub.url).next_token("q", asked, GenerateParameters(), prefix='{"n": ', top_k=50)
    assert stub.last("/v1/chat/completions").body == {
        "model": "q",
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 20,
        "messages": [{"role": "user", "content": "say a"}, {"role": "assistant", "content": '{"n": '}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }


def test_vllm_reads_a_plain_prompt_whole_at_its_completions_route(serve) -> None:
    """/generate on a vLLM model sent the prompt as a chat's user message, templated: not the text asked for. Its
    completions route reads it as it is (as TGI's /generate), with the completions API's logprobs."""
    reply = completion(" Paris", logprobs=[(" Par", -0.5), ("is", -0.25)])
    chunk = {"choices": [{"index": 0, "text": " Par", "logprobs": {"tokens": [" Par"], "token_logprobs": [-0.5]}}]}
    last = {"choices": [{"index": 0, "text": "is", "finish_reason": "stop", "logprobs": None}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}
    stub = serve(
        {
            "POST /v1/completions": lambda body: (
                StubReply(events=[chunk, last, usage, "[DONE]"]) if body.get("stream") else StubReply(json=reply)
            )
        }
    )
    provider = vllm(stub.url)
    template = {"chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": False}
    params = GenerateParameters(top_n_tokens=1, max_new_tokens=5, **template)
    result = provider.generate("q", "The capital of France is", params)
    sent = stub.last("/v1/completions").body
    assert (sent["prompt"], sent["logprobs"], sent["max_tokens"]) == ("The capital of France is", 1, 5)
    assert not {"messages", "top_logprobs", *template} & set(sent)  # (no template reads a plain prompt)
    best = result.best
    assert (best.generated_text, best.generated_tokens, result.input_length) == (" Paris", 2, 4)
    assert [(t.text, t.logprob) for t in best.tokens] == [(" Par", -0.5), ("is", -0.25)]
    # vLLM's top_logprobs also hold the chosen token (k + 1 entries): the k likeliest are kept, as chat gives them
    assert [(t.text, t.logprob) for t in best.tokens[0].top_tokens] == [(" Par", -0.5)]
    items = list(provider.stream("q", "The capital of France is", GenerateParameters()))
    assert stub.last("/v1/completions").body["stream"] is True
    assert [i.token.text for i in items[:-1]] == [" Par", "is"] and items[-1].best.generated_text == " Paris"
    provider.next_token("q", "The capital of France is", GenerateParameters(), prefix=" Par", top_k=3)
    assert stub.last("/v1/completions").body == {
        "model": "q", "max_tokens": 1, "temperature": 0.0, "prompt": "The capital of France is Par", "logprobs": 3
    }  # fmt: skip


@pytest.mark.parametrize(
    ("grammar", "expected"),
    [
        ({"type": "json", "value": SCHEMA}, {"type": "json", "value": CLOSED}),
        # open said open: TGI's engine closes what a schema leaves unsaid
        ({"type": "json", "value": SCHEMA, "strict": False}, {"type": "json", "value": OPEN}),
        ({"type": "json_schema", "value": {"name": "x", "schema": SCHEMA}}, {"type": "json", "value": CLOSED}),
        ({"type": "regex", "value": r"\d+"}, {"type": "regex", "value": r"\d+"}),
        ({"type": "choice", "value": ["a.b", "c|d", "e f"]}, {"type": "regex", "value": r"(a\.b|c\|d|e f)"}),
    ],
)
def test_tgi_generate_sends_tgi_parameters_and_grammar(serve, grammar: dict, expected: dict) -> None:
    stub = serve({"POST /generate": StubReply(json=tgi_generation("7"))})
    params = GenerateParameters(
        grammar=grammar,
        max_new_tokens=9,
        top_n_tokens=2,
        seed=1,
        do_sample=True,
        stop=["."],
        decoder_input_details=True,
        top_k=4,
    )
    tgi(stub.url).generate("model", "prompt", params)
    assert stub.last("/generate").body == {
        "inputs": "prompt",
        "parameters": {
            "decoder_input_details": True,
            "details": True,
            "do_sample": True,
            "max_new_tokens": 9,
            "seed": 1,
            "stop": ["."],
            "top_k": 4,
            "top_n_tokens": 2,
            "watermark": False,
            "grammar": expected,
        },
    }


def test_tgi_is_never_asked_for_the_full_text_which_our_answer_adds(serve) -> None:
    """return_full_text went on to the remote, whose text then held the prompt, and /generate added it again."""
    stub = serve({"POST /generate": StubReply(json=tgi_generation("7"))})
    result = tgi(stub.url).generate("model", "prompt", GenerateParameters(max_new_tokens=2, return_full_text=True))
    assert "return_full_text" not in stub.last("/generate").body["parameters"]
    assert result.best.generated_text == "7"


def test_tgi_best_of_sends_no_seed_as_tgi_requires(serve) -> None:
    stub = serve({"POST /generate": StubReply(json=tgi_generation("7"))})
    params = GenerateParameters(best_of=2, do_sample=True, seed=3, max_new_tokens=2)
    result = tgi(stub.url).generate("model", "prompt", params)
    parameters = stub.last("/generate").body["parameters"]
    assert parameters["best_of"] == 2 and "seed" not in parameters
    assert result.warnings == [  # the seed left out was silent: a seeded run that could not be repeated
        "seed: provider 'tg' (remote::tgi) refuses a seed with best_of > 1, so it was not sent: each candidate drew "
        "its own (each one's seed is in its details)"
    ]


def test_tgi_refuses_a_lark_grammar_and_custom_processors(serve) -> None:
    stub = serve({"POST /generate": StubReply(json=tgi_generation("7"))})
    with pytest.raises(UnsupportedConstraintError, match="TGI's grammar parameter knows only json and regex"):
        tgi(stub.url).generate("m", "p", GenerateParameters(grammar={"type": "grammar", "value": 'start: "a"'}))
    with pytest.raises(ParameterError, match="logits_processors is not supported by provider 'tg'"):
        tgi(stub.url).generate(
            "m", "p", GenerateParameters(logits_processors=[{"name": "ban_strings", "params": ["x"]}])
        )
    with pytest.raises(ParameterError, match="min_p is not supported by provider 'tg' .remote::tgi."):
        tgi(stub.url).generate("m", "p", GenerateParameters(min_p=0.1))
    with pytest.raises(ParameterError, match=r"top_n_tokens=6 exceeds the limit of provider 'tg' \(5\)"):
        tgi(stub.url).generate("m", "p", GenerateParameters(top_n_tokens=6))
    assert stub.requests == []


def test_tgi_s_chat_route_refuses_logit_bias_which_it_does_not_use(serve) -> None:
    """It was sent on (TGI's spec: a list of numbers, UNUSED), while its /generate route refused it by name."""
    stub = serve(CHAT)
    with pytest.raises(ParameterError, match="logit_bias is not supported by provider 'tg' .remote::tgi.: TGI's chat"):
        tgi(stub.url).generate("m", MESSAGES, GenerateParameters(logit_bias={"100": 5.0}))
    assert stub.requests == []


def test_an_assistants_refusal_part_goes_to_a_remote_as_text(serve) -> None:
    """Read as text here (as vLLM reads it), it went on as a part TGI's chat does not know."""
    stub = serve(CHAT)
    said = ChatMessage(role="assistant", content=[{"type": "refusal", "refusal": "No."}, {"type": "text", "text": "!"}])
    tgi(stub.url).generate("m", [*MESSAGES, said, ChatMessage(role="user", content="why")], GenerateParameters())
    assert stub.last("/v1/chat/completions").body["messages"][2] == {"role": "assistant", "content": "No.!"}


def test_tgi_messages_go_to_its_chat_route_with_tgi_response_format(serve) -> None:
    stub = serve(CHAT)
    provider = tgi(stub.url)
    provider.generate("m", MESSAGES, GenerateParameters(grammar={"type": "regex", "value": "[a-z]+"}, top_n_tokens=5))
    body = stub.last("/v1/chat/completions").body
    assert body["response_format"] == {"type": "regex", "value": "[a-z]+"}
    assert (body["messages"], body["logprobs"], body["top_logprobs"]) == (
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "count"}],
        True,
        5,
    )
    with pytest.raises(ParameterError, match="TGI's chat route returns one choice"):
        provider.generate("m", MESSAGES, GenerateParameters(best_of=2, do_sample=True))


def test_tgi_tokenize_and_next_token_use_real_routes(serve) -> None:
    top = [
        {"id": 5, "text": " yes", "logprob": -0.2, "special": False},
        {"id": 9, "text": " no", "logprob": -1.9, "special": False},
    ]
    answer = tgi_generation("y")
    answer["details"]["top_tokens"] = [top]
    stub = serve(
        {
            "POST /generate": StubReply(json=answer),
            "POST /tokenize": StubReply(json=[{"id": 1, "text": "hi", "start": 0, "stop": 2}]),
        }
    )
    provider = tgi(stub.url)
    assert [t.text for t in provider.tokenize("m", "hi")] == ["hi"]
    view = provider.next_token("m", "Q:", GenerateParameters(), prefix=" A:", top_k=3)
    assert stub.last("/generate").body == {
        "inputs": "Q: A:",
        "parameters": {"max_new_tokens": 1, "details": True, "top_n_tokens": 3},
    }
    assert [(c.id, c.text, c.raw_logprob, c.allowed) for c in view.candidates] == [
        (5, " yes", -0.2, True),
        (9, " no", -1.9, True),
    ]
    # TGI reports no vocabulary size, so how many tokens are allowed is not known, not the alternatives' count
    assert (view.prefix, view.mass_kept, view.allowed_count, view.vocab_size) == (" A:", 1.0, None, None)


def test_next_token_under_a_constraint_is_refused_not_faked(serve) -> None:
    stub = serve(CHAT)
    params = GenerateParameters(grammar={"type": "json", "value": SCHEMA})
    for provider in (openai(stub.url), vllm(stub.url), tgi(stub.url)):
        with pytest.raises(UnsupportedConstraintError, match="not which ones a json_schema constraint allows"):
            provider.next_token("m", "p", params)
    with pytest.raises(ParameterError, match="cannot continue a partial answer"):
        openai(stub.url).next_token("m", "p", GenerateParameters(), prefix="x")
    assert stub.requests == []


def test_hf_inference_uses_the_router_form_and_the_token_from_the_env(serve, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN_FOR_TEST", "hf_secret_value")
    stub = serve(CHAT)
    provider = HFInferenceProvider("hf", HFInferenceConfig(base_url=stub.url + "/v1", api_key_env="HF_TOKEN_FOR_TEST"))
    assert HFInferenceConfig().base_url == "https://router.huggingface.co/v1"
    assert HFInferenceConfig().api_key_env == "HF_TOKEN"
    provider.generate(
        "meta-llama/Llama-3.1-8B-Instruct:novita", "p", GenerateParameters(grammar={"type": "json", "value": SCHEMA})
    )
    sent = stub.last("/v1/chat/completions")
    assert sent.headers["Authorization"] == "Bearer hf_secret_value"
    assert sent.body["model"] == "meta-llama/Llama-3.1-8B-Instruct:novita"
    assert sent.body["response_format"]["type"] == "json_schema"
    assert provider.serves("meta-llama/Llama-3.1-8B-Instruct:novita", ["meta-llama/Llama-3.1-8B-Instruct"])


def test_the_api_key_never_appears_in_errors_or_reprs(serve, monkeypatch) -> None:
    monkeypatch.setenv("VLLM_KEY_FOR_TEST", "sk-very-secret")
    stub = serve({"POST /v1/chat/completions": StubReply(401, {"error": {"message": "bad key"}})})
    provider = vllm(stub.url, api_key_env="VLLM_KEY_FOR_TEST")
    with pytest.raises(ProviderError) as caught:
        provider.generate("m", ASKED, GenerateParameters())
    assert stub.last("/v1/chat/completions").headers["Authorization"] == "Bearer sk-very-secret"
    assert caught.value.status == 424
    assert "bad key" in caught.value.message
    for text in (caught.value.message, repr(provider), repr(provider.client), repr(provider.config)):
        assert "sk-very-secret" not in text


def test_penalties_bias_and_template_options_reach_the_servers_that_take_them(serve) -> None:
    """OpenAI takes presence_penalty and logit_bias; vLLM also min_tokens, stop_token_ids, include_stop_str_in_output,
    allowed_token_ids, bad_words and the template options; TGI none."""
    stub = serve(CHAT)
    params = GenerateParameters(max_new_tokens=3, presence_penalty=0.5, logit_bias={"7": -100.0})
    openai(stub.url).generate("gpt-x", MESSAGES, params)
    sent = stub.last("/v1/chat/completions").body
    assert (sent["presence_penalty"], sent["logit_bias"]) == (0.5, {"7": -100.0}) and "min_tokens" not in sent
    with pytest.raises(ParameterError, match="min_tokens is not supported by"):
        openai(stub.url).generate("gpt-x", MESSAGES, GenerateParameters(min_tokens=2))
    with pytest.raises(ParameterError, match="stop_token_ids is not supported by"):
        openai(stub.url).generate("gpt-x", MESSAGES, GenerateParameters(stop_token_ids=[2]))
    extras = {"min_tokens": 2, "chat_template_kwargs": {"enable_thinking": False}, "add_generation_prompt": False}
    extras.update(stop_token_ids=[7, 9], include_stop_str_in_output=True, allowed_token_ids=[1, 2, 7], bad_words=["no"])
    vllm(stub.url).generate("m", MESSAGES, params.model_copy(update=extras))
    sent = stub.last("/v1/chat/completions").body
    assert {k: sent[k] for k in extras} == extras and sent["presence_penalty"] == 0.5
    with pytest.raises(ParameterError, match="include_stop_str_in_output is not supported by"):
        openai(stub.url).generate("gpt-x", MESSAGES, GenerateParameters(include_stop_str_in_output=True))
    for remote in (openai, vllm):  # (their tokens come back by their text: no ids to return)
        with pytest.raises(ParameterError, match="return_token_ids is not supported by"):
            remote(stub.url).generate("m", MESSAGES, GenerateParameters(return_token_ids=True))
    for refused in (
        {"presence_penalty": 0.5},
        {"stop_token_ids": [7]},
        {"bad_words": ["x"]},
        {"include_stop_str_in_output": True},
    ):
        with pytest.raises(ParameterError, match=f"{next(iter(refused))} is not supported by"):
            tgi(stub.url).generate("m", "count", GenerateParameters(**refused))


def test_json_whitespace_and_strict_false_reach_the_servers_or_are_refused_never_dropped(serve) -> None:
    """A whitespace asked for (guided_whitespace_pattern, structured_outputs' options) and `strict: false` were
    dropped on the way: OpenAI got `strict: true` (the provider's default) for an open schema, vLLM and TGI the schema
    their engines close, and the answers changed without a word. A layout a server writes anyway is taken (vLLM's
    any whitespace, TGI's one space at most); another is refused (vLLM's V1 engines read only its server's options)."""
    stub = serve({**CHAT, "POST /generate": StubReply(json=tgi_generation("x"))})
    asked = {"type": "json", "value": SCHEMA}
    vllm(stub.url).generate("m", MESSAGES, GenerateParameters(grammar={**asked, "whitespace": "free"}))
    assert stub.last("/v1/chat/completions").body["structured_outputs"] == {"json": CLOSED}
    tgi(stub.url).generate("m", "p", GenerateParameters(grammar={**asked, "whitespace": "compact"}))
    assert stub.last("/generate").body["parameters"]["grammar"] == {"type": "json", "value": CLOSED}
    for remote, whitespace in (
        (vllm, "compact"),
        (vllm, r"[ ]?"),
        (openai, "compact"),
        (openai, "free"),
        (tgi, "free"),
    ):
        with pytest.raises(UnsupportedConstraintError, match=r"its JSON whitespace is the server's own \(asked: '"):
            remote(stub.url).generate("m", MESSAGES, GenerateParameters(grammar={**asked, "whitespace": whitespace}))
    vllm(stub.url).generate("m", MESSAGES, GenerateParameters(grammar={**asked, "strict": False}))
    assert stub.last("/v1/chat/completions").body["structured_outputs"] == {"json": OPEN}
    closed_as_written = {"type": "json", "value": CLOSED, "strict": False}  # (optional keys: OpenAI's strict refuses)
    for grammar, schema in (({**asked, "strict": False}, SCHEMA), (closed_as_written, CLOSED)):
        openai(stub.url).generate("gpt-x", MESSAGES, GenerateParameters(grammar=grammar))
        sent_format = stub.last("/v1/chat/completions").body["response_format"]["json_schema"]
        assert (sent_format["schema"], sent_format["strict"]) == (schema, False)
    openai(stub.url).generate("gpt-x", MESSAGES, GenerateParameters(grammar=asked))
    assert stub.last("/v1/chat/completions").body["response_format"]["json_schema"]["strict"] is True


def test_truncate_reaches_vllm_as_truncate_prompt_tokens_and_tgi_refuses_minus_one(serve) -> None:
    """vLLM names TGI's truncate truncate_prompt_tokens and takes -1 (fit the context); TGI's is a count."""
    stub = serve({**CHAT, "POST /generate": StubReply(json=tgi_generation("x"))})
    for value in (12, -1):
        vllm(stub.url).generate("m", MESSAGES, GenerateParameters(truncate=value))
        sent = stub.last("/v1/chat/completions").body
        assert sent["truncate_prompt_tokens"] == value and "truncate" not in sent
    tgi(stub.url).generate("m", "count", GenerateParameters(truncate=12))
    assert stub.last("/generate").body["parameters"]["truncate"] == 12
    with pytest.raises(
        ParameterError,
        match=r"truncate -1 \(as many of the prompt's last tokens .*\) is not supported "
        r"by provider 'tg' \(remote::tgi\): give a number of tokens",
    ) as caught:
        tgi(stub.url).generate("m", "count", GenerateParameters(truncate=-1))
    assert caught.value.field == "parameters.truncate"
    stub = serve({"POST /tokenize": StubReply(json=[{"id": 5, "text": " five", "start": 18, "stop": 23}])})
    tgi(stub.url).tokenize("m", "one two three four five", GenerateParameters(truncate=1))
    assert stub.last("/tokenize").body == {"inputs": "one two three four five", "parameters": {"truncate": 1}}
    tgi(stub.url).tokenize("m", "one")
    assert stub.last("/tokenize").body == {"inputs": "one"}
    with pytest.raises(ParameterError, match="truncate -1 is not supported by provider 'tg'"):
        tgi(stub.url).tokenize("m", "one", GenerateParameters(truncate=-1))


def test_a_vllm_base_url_without_v1_is_named_in_the_404(serve) -> None:
    """Every request failed with "answered HTTP 404" and no word of the /v1 `vllm serve` prints."""
    stub = serve(CHAT)
    with pytest.raises(ProviderError, match=r"answered HTTP 404.* \(an OpenAI-compatible base_url ends in /v1, as"):
        VLLMProvider("vl", VLLMConfig(base_url=stub.url)).list_models()
    with pytest.raises(ProviderError) as caught:
        VLLMProvider("vl", VLLMConfig(base_url=stub.url + "/v2")).list_models()
    assert "ends in /v1" in caught.value.message
    with pytest.raises(ProviderError) as caught:  # (the stub serves no model list: a 404 there too, no hint)
        VLLMProvider("vl", VLLMConfig(base_url=stub.url + "/v1")).list_models()
    assert "answered HTTP 404" in caught.value.message and "ends in /v1" not in caught.value.message


def test_a_schema_s_name_survives_a_round_trip_and_reaches_a_remote_playground() -> None:
    from playground.constraints import Constraint
    from playground.wire import outbound

    named = Constraint.from_grammar({"type": "json_schema", "value": {"name": "weather_report", "schema": SCHEMA}})
    again = Constraint.from_grammar(named.to_grammar())
    assert (again, again.name) == (named, "weather_report")
    sent = outbound.playground_constraint(named)["response_format"]["json_schema"]
    assert sent["name"] == "weather_report"
    assert (
        outbound.playground_constraint(Constraint.json_schema(SCHEMA))["response_format"]["json_schema"]["name"]
        == "answer"
    )


def test_a_field_a_provider_cannot_carry_is_named_as_the_client_sent_it(serve) -> None:
    """vLLM's ignore_eos and prompt_logprobs are read as our min_tokens and decoder_input_details: a provider that
    cannot carry those refused fields the client never sent."""
    from fastapi.testclient import TestClient

    from playground.providers.registry import Registry
    from playground.server import create_app

    stub = serve(
        {**CHAT, "GET /v1/models": StubReply(json={"object": "list", "data": [{"id": "m", "object": "model"}]})}
    )
    client = TestClient(create_app(Registry([openai(stub.url)]), ui=False))
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3}
    for fields, name in (({"ignore_eos": True}, "ignore_eos"), ({"prompt_logprobs": 1}, "prompt_logprobs")):
        error = client.post("/v1/chat/completions", json={**chat, **fields}).json()["error"]
        assert (error["param"], error["message"]) == (
            name,
            f"{name} is not supported by provider 'oa' (remote::openai)",
        )
    completion = {"model": "m", "prompt": "x", "max_tokens": 3, "ignore_eos": True}
    error = client.post("/v1/completions", json=completion).json()["error"]
    assert error["message"] == "ignore_eos is not supported by provider 'oa' (remote::openai)"
    assert {r.method for r in stub.requests} == {"GET"}  # the model list; nothing was sent to generate


def test_without_discovery_a_server_that_lists_no_models_still_serves_its_declared_one(serve) -> None:
    """`discover_models: false` still asked GET /models for the context size before every request, and a chat-only
    endpoint's 404 there failed them all (the chat route never asked)."""
    stub = serve(CHAT)  # no model list: 404
    provider = openai(stub.url, model="m", discover_models=False, max_total_tokens=2048)
    assert provider.list_models() == ["m"]
    assert provider.info("m").max_total_tokens == 2048
    provider.generate("m", MESSAGES, GenerateParameters(max_new_tokens=4))
    provider.info("m")
    assert [r.path for r in stub.requests] == ["/v1/models", "/v1/chat/completions"]  # asked once, not per request
    listed = {"GET /v1/models": StubReply(json={"data": [{"id": "m", "max_model_len": 8192}]})}
    assert openai(serve({**CHAT, **listed}).url, discover_models=False).info("m").max_total_tokens == 8192
    with pytest.raises(ProviderError, match="answered HTTP 404"):  # with discovery on, a missing list is an error
        openai(stub.url).info("m")
    down = serve({**CHAT, "GET /v1/models": StubReply(status=503, json={"error": "loading"})})
    provider = openai(down.url, discover_models=False)
    assert provider.info("m").max_total_tokens == provider.info("m").max_total_tokens == 4096
    assert [r.path for r in down.requests] == ["/v1/models"] * 2  # down for now: asked again, not settled
    # a list answered but unreadable (a proxy's HTML page at /models) is its answer: the config's context, asked once
    garbled = serve({**CHAT, "GET /v1/models": StubReply(json={"models": "see the docs"})})
    provider = openai(garbled.url, discover_models=False, max_total_tokens=2048)
    assert provider.info("m").max_total_tokens == provider.info("m").max_total_tokens == 2048
    assert [r.path for r in garbled.requests] == ["/v1/models"]
    with pytest.raises(ProviderError, match="answered a malformed model list"):  # with discovery on, an error
        openai(garbled.url).info("m")
