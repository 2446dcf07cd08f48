"""POST /v1/completions through the openai SDK: prompts, n, best_of, seed, echo, logprobs, stop, stream with
usage, and the constraint fields of chat, each choice carrying our verdict."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from tests.integration.test_api_tgi import PET_SCHEMA as PET

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def client(server_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=300, max_retries=0)


def test_a_prompt_completes_greedily_with_usage(client: openai.OpenAI) -> None:
    answer = client.completions.create(model="embedded", prompt=PROMPT, max_tokens=5, temperature=0)
    assert answer.object == "text_completion" and answer.id.startswith("cmpl-")
    (choice,) = answer.choices
    assert choice.text and choice.finish_reason in ("length", "stop") and choice.index == 0
    assert answer.usage.completion_tokens <= 5 and answer.usage.prompt_tokens > 0
    again = client.completions.create(model="embedded", prompt=PROMPT, max_tokens=5, temperature=0)
    assert again.choices[0].text == choice.text


def test_a_list_of_prompts_gets_n_choices_each_in_order(client: openai.OpenAI) -> None:
    answer = client.completions.create(
        model="embedded", prompt=["One, two,", "Red, green,"], n=2, max_tokens=3, seed=7, temperature=1.0
    )
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    assert all(c.model_extra["seed"] is not None for c in answer.choices)
    same = client.completions.create(
        model="embedded", prompt=["One, two,", "Red, green,"], n=2, max_tokens=3, seed=7, temperature=1.0
    )
    assert [c.text for c in same.choices] == [c.text for c in answer.choices]


@pytest.mark.parametrize(
    "extra",
    [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET}}},
        {"structured_outputs": {"json": PET}},
        {"guided_json": PET},
    ],
)
def test_constraint_fields_of_chat_hold(client: openai.OpenAI, extra: dict) -> None:
    answer = client.completions.create(
        model="embedded", prompt="A pet as JSON:", max_tokens=40, temperature=0, extra_body=extra
    )
    choice = answer.choices[0]
    jsonschema.validate(json.loads(choice.text), PET)
    assert choice.model_extra["validation"]["valid"] is True and choice.model_extra["constraint_kind"] == "json_schema"


def test_guided_choice_and_stop(client: openai.OpenAI) -> None:
    answer = client.completions.create(
        model="embedded", prompt="Yes or no?", max_tokens=5, extra_body={"guided_choice": ["yes", "no"]}
    )
    assert answer.choices[0].text in ("yes", "no")
    stopped = client.completions.create(
        model="embedded", prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=["6"]
    )
    assert "6" not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop"


def test_echo_and_logprobs_in_the_completions_shape(client: openai.OpenAI) -> None:
    answer = client.completions.create(
        model="embedded", prompt=PROMPT, max_tokens=3, temperature=0, logprobs=2, echo=True
    )
    choice = answer.choices[0]
    assert choice.text.startswith(PROMPT)
    lp = choice.logprobs
    assert "".join(lp.tokens) == choice.text
    assert lp.token_logprobs[0] is None and all(x <= 0 for x in lp.token_logprobs[1:])
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    generated = lp.top_logprobs[-3:]
    assert all(1 <= len(top) <= 2 for top in generated)


def test_echoed_logprobs_score_a_continuation_as_lm_evaluation_harness_reads_them(client: openai.OpenAI) -> None:
    """lm-eval's loglikelihood: echo, logprobs=1, max_tokens=1; each prompt position's top_logprobs must hold the
    token itself (its logprob) and the likeliest one, for `max(top.values())` (is the continuation greedy?)."""
    answer = client.completions.create(
        model="embedded", prompt="The capital of France is Paris", max_tokens=1, temperature=0, logprobs=1, echo=True
    )
    lp = answer.choices[0].logprobs
    assert lp.top_logprobs[0] is None and lp.token_logprobs[0] is None  # OpenAI's null for the first token
    for token, logprob, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert top[token] == logprob and 1 <= len(top) <= 2 and max(top.values()) >= logprob
    assert max(lp.top_logprobs[-1].values()) == lp.token_logprobs[-1]  # the greedy answer's token is the likeliest
    assert any(max(top.values()) > logprob for logprob, top in zip(lp.token_logprobs[1:-1], lp.top_logprobs[1:-1]))


def test_max_tokens_0_with_echo_scores_the_prompt_and_generates_nothing(client: openai.OpenAI) -> None:
    """OpenAI's and vLLM's prompt scoring (echo, max_tokens 0); was refused ("greater than or equal to 1")."""
    prompt = "The capital of France is Paris"
    scored = client.completions.create(model="embedded", prompt=prompt, max_tokens=0, logprobs=1, echo=True)
    choice = scored.choices[0]
    assert (choice.text, choice.finish_reason, scored.usage.completion_tokens) == (prompt, "length", 0)
    assert "".join(choice.logprobs.tokens) == prompt and choice.logprobs.token_logprobs[0] is None
    chunks = list(
        client.completions.create(model="embedded", prompt=prompt, max_tokens=0, logprobs=1, echo=True, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == prompt
    streamed = next(c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs)
    assert streamed.token_logprobs == choice.logprobs.token_logprobs
    with pytest.raises(openai.BadRequestError, match="it needs echo"):
        client.completions.create(model="embedded", prompt=prompt, max_tokens=0)


def test_a_streamed_echo_sends_the_prompt_s_logprobs_first(client: openai.OpenAI) -> None:
    """Streamed with max_tokens above 0, the echoed prompt's chunk carries its logprobs (it had none: they came
    only with the result), and the chunks' logprobs put together are the answer's."""
    kwargs = {"model": "embedded", "prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": 2, "echo": True}
    whole = client.completions.create(**kwargs).choices[0].logprobs
    chunks = [c.choices[0] for c in client.completions.create(**kwargs, stream=True) if c.choices]
    assert chunks[0].text == PROMPT and "".join(chunks[0].logprobs.tokens) == PROMPT
    assert chunks[0].logprobs.token_logprobs[0] is None and chunks[0].logprobs.top_logprobs[0] is None
    streamed = [c.logprobs for c in chunks if c.logprobs]
    assert [t for lp in streamed for t in lp.tokens] == whole.tokens
    assert [x for lp in streamed for x in lp.token_logprobs] == pytest.approx(whole.token_logprobs, abs=1e-4)
    assert [x for lp in streamed for x in lp.text_offset] == whole.text_offset


def test_a_token_that_is_part_of_a_character_reads_the_same_in_tokens_and_top_logprobs(
    client: openai.OpenAI,
) -> None:
    """Each token by its own text, OpenAI's `bytes:\\xe4\\xbd` for a part of a character: lm-eval's greedy check
    (`top[token]`, the largest is the token) holds. Before, the token read '' and its entry U+FFFD."""
    prompt = "Chinese for hello is 你好, and for world it is 世"
    answer = client.completions.create(
        model="embedded", prompt=prompt, max_tokens=4, temperature=0, logprobs=1, echo=True
    )
    lp = answer.choices[0].logprobs
    assert any(token.startswith("bytes:\\x") for token in lp.tokens)
    for token, logprob, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert top[token] == logprob
    text = answer.choices[0].text
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset) and lp.text_offset[-1] < len(text)
    assert text.startswith(prompt)


def test_a_sampled_token_is_in_its_own_top_logprobs(client: openai.OpenAI) -> None:
    for n in (0, 1):
        answer = client.completions.create(
            model="embedded", prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=5, logprobs=n
        )
        lp = answer.choices[0].logprobs
        for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            assert top[token] == logprob and len(top) <= n + 1


def ids_of(server_url: str, text: str) -> list[int]:
    return [t["id"] for t in httpx.post(f"{server_url}/tokenize", json={"inputs": text}, timeout=60).json()]


def test_a_prompt_of_token_ids_is_read_as_those_ids(client: openai.OpenAI, server_url: str) -> None:
    """As OpenAI and vLLM take them (lm-evaluation-harness sends ids): the same answer as the text, and ids that
    are not the text's own tokenization are kept, not re-tokenized."""
    ids = ids_of(server_url, PROMPT)
    by_text = client.completions.create(model="embedded", prompt=PROMPT, max_tokens=4, temperature=0)
    by_ids = client.completions.create(model="embedded", prompt=ids, max_tokens=4, temperature=0, echo=True)
    assert by_ids.choices[0].text == PROMPT + by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids) == by_text.usage.prompt_tokens

    split, whole = ids_of(server_url, "Hel") + ids_of(server_url, "lo"), ids_of(server_url, "Hello")
    assert len(split) == 2 and len(whole) == 1  # "Hello" tokenizes to one id; these two spell it too
    scored = client.completions.create(
        model="embedded", prompt=[split, whole], max_tokens=1, temperature=0, echo=True, logprobs=1
    )
    first, second = scored.choices
    assert first.logprobs.tokens[:2] == ["Hel", "lo"] and second.logprobs.tokens[:1] == ["Hello"]
    assert first.text.startswith("Hello") and second.text.startswith("Hello")
    assert scored.usage.prompt_tokens == 3


def test_a_stream_counts_text_offset_on_from_chunk_to_chunk(client: openai.OpenAI) -> None:
    kwargs = {"model": "embedded", "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "logprobs": 1, "echo": True}
    whole = client.completions.create(**kwargs).choices[0].logprobs
    chunks = [c.choices[0].logprobs for c in client.completions.create(**kwargs, stream=True) if c.choices]
    tokens = [t for lp in chunks if lp for t in lp.tokens]
    offsets = [o for lp in chunks if lp for o in lp.text_offset]
    assert len(tokens) >= 2 and tokens == whole.tokens[-len(tokens) :]
    assert offsets == whole.text_offset[-len(offsets) :]  # after the echoed prompt, as in the whole answer


def test_best_of_picks_one_of_several_samples(client: openai.OpenAI) -> None:
    answer = client.completions.create(
        model="embedded", prompt=PROMPT, max_tokens=4, best_of=3, n=1, temperature=1.0, seed=3
    )
    assert len(answer.choices) == 1 and answer.usage.completion_tokens >= 1


def test_stream_adds_up_with_usage_last(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="embedded", prompt=PROMPT, max_tokens=6, temperature=0).choices[0]
    chunks = list(
        client.completions.create(
            model="embedded",
            prompt=PROMPT,
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.finish_reason
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"suffix": "end"}, "suffix: not supported"),
        ({"best_of": 1, "n": 2}, "best_of: must be >= n"),
        ({"prompt": [[1, 2, 10**6]]}, "prompt[0][2]: token id 1000000 is not in the model's vocabulary"),
        ({"prompt": [1, "a"]}, "prompt: give a string, a list of strings, token ids"),
        ({"extra_body": {"guided_regex": "(ab"}}, "invalid regex"),
    ],
)
def test_bad_requests_are_400_naming_the_problem(client: openai.OpenAI, kwargs: dict, message: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(**{"model": "embedded", "prompt": PROMPT, "max_tokens": 2, **kwargs})
    assert message in str(caught.value)


def test_tgi_s_parameters_as_huggingface_js_sends_them(server_url: str) -> None:
    """huggingface.js's textGeneration against an endpoint: `model` is the endpoint's URL, and TGI's `parameters`
    come flat in the body (`max_new_tokens` renamed `max_tokens`); each does what it does on /generate."""
    body = {
        "model": server_url,
        "prompt": PROMPT,
        "max_tokens": 4,
        "grammar": {"type": "regex", "value": " (Paris|Lyon)\\."},
        "do_sample": False,
        "top_n_tokens": 2,
        "return_full_text": True,
        "details": True,
        "watermark": False,
        "stop": ["\n"],
    }
    reply = httpx.post(f"{server_url}/v1/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    (choice,) = reply.json()["choices"]
    assert choice["text"] in (PROMPT + " Paris.", PROMPT + " Lyon.") and choice["validation"]["valid"] is True
    assert choice["logprobs"]["tokens"][-2:] in ([" Paris", "."], [" Lyon", "."])
    assert any("details: accepted and ignored" in w for w in choice["warnings"])
    greedy = httpx.post(f"{server_url}/v1/completions", json={**body, "seed": 5}, timeout=300).json()
    assert greedy["choices"][0]["text"] == choice["text"]  # do_sample false: greedy whatever the seed
    both = {**body, "response_format": {"type": "json_object"}}
    refused = httpx.post(f"{server_url}/v1/completions", json=both, timeout=300)
    assert refused.status_code == 400 and "give one constraint" in refused.json()["error"]["message"]
    unknown = httpx.post(f"{server_url}/v1/completions", json={**body, "model": "no-such-model"}, timeout=300)
    assert unknown.status_code == 404  # only a URL stands for the default model
