"""The API routes on a FakeProvider: each request shape reaches the provider as the same parameters."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from openai.types.responses import ResponseUsage

from playground.errors import ParameterError, UnsupportedConstraintError
from playground.providers.base import Capabilities
from playground.providers.loading import LoadingPolicy
from playground.providers.registry import Registry
from playground.server import create_app
from playground.server.answers import named_as_sent
from playground.types.sizes import MAX_MESSAGES
from playground.wire import responses as responses_wire
from playground.wire.responses import ResponsesRequest
from tests.fakes import FakeProvider


@pytest.fixture
def fake() -> FakeProvider:
    return FakeProvider("yes", addable=("fake-2",))


@pytest.fixture
def client(fake: FakeProvider) -> TestClient:
    return TestClient(create_app(Registry([fake]), ui=False))


def test_generate_passes_min_p_and_answers_tgi_shapes(client: TestClient, fake: FakeProvider) -> None:
    body = {"inputs": "Q?", "parameters": {"min_p": 0.1, "details": True, "grammar": {"type": "regex", "value": "y.s"}}}
    reply = client.post("/generate", json=body)
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["generated_text"] == "yes" and data["details"]["finish_reason"] == "eos_token"
    assert data["validation"]["valid"] is True
    assert fake.calls[-1].params.min_p == 0.1


def test_chat_completions_pass_min_p_and_greedy(client: TestClient, fake: FakeProvider) -> None:
    messages = [{"role": "user", "content": "Q?"}]
    reply = client.post("/v1/chat/completions", json={"messages": messages, "min_p": 0.2, "temperature": 0.5})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "yes"
    assert fake.calls[-1].params.min_p == 0.2 and fake.calls[-1].params.temperature == 0.5
    client.post("/v1/chat/completions", json={"messages": messages, "min_p": 0.2, "temperature": 0})
    assert fake.calls[-1].params.min_p is None and not fake.calls[-1].params.sampling


def test_min_p_out_of_range_is_a_422_naming_it(client: TestClient) -> None:
    reply = client.post("/generate", json={"inputs": "Q?", "parameters": {"min_p": 2}})
    assert reply.status_code == 422 and reply.json()["error"].startswith("parameters.min_p:")
    reply = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "min_p": -1})
    assert reply.status_code == 400 and reply.json()["error"]["message"].startswith("min_p:")
    assert reply.json()["error"]["param"] == "min_p"


def test_stream_sends_each_token_then_the_final_event(client: TestClient) -> None:
    with client.stream("POST", "/generate_stream", json={"inputs": "Q?", "parameters": {"details": True}}) as reply:
        events = [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data:")]
    assert [e["token"]["text"] for e in events] == ["y", "e", "s"]
    assert events[-1]["generated_text"] == "yes" and events[-1]["details"]["generated_tokens"] == 3


def test_info_reports_what_the_provider_can_do(client: TestClient) -> None:
    capabilities = client.get("/info").json()["capabilities"]
    assert capabilities["streaming"] is True and capabilities["next_token_view"] == "constrained"
    assert capabilities["constraint_kinds"] == ["choice", "grammar", "json_schema", "regex"]


def test_a_local_style_provider_generates_as_a_stream(fake: FakeProvider) -> None:
    here = FakeProvider(capabilities=Capabilities(decodes_here=True))
    client = TestClient(create_app(Registry([here]), ui=False))
    assert client.post("/generate", json={"inputs": "Q?"}).status_code == 200
    assert [c.method for c in here.calls] == ["stream"]  # so a client that hangs up stops the decoding
    remote = TestClient(create_app(Registry([fake]), ui=False))
    remote.post("/generate", json={"inputs": "Q?"})
    assert [c.method for c in fake.calls] == ["generate"]


def test_models_are_added_through_their_provider(fake: FakeProvider) -> None:
    registry = Registry([fake])
    client = TestClient(create_app(registry, ui=False))
    assert client.post("/v1/models", json={"id": "fake-2", "provider_id": "fake"}).status_code == 403  # the default
    registry.loading = LoadingPolicy(allow_requests=True)
    reply = client.post("/v1/models", json={"id": "fake-2", "provider_id": "fake"})
    assert reply.status_code == 200 and reply.json()["id"] == "fake-2"
    assert "fake-2" in {m["id"] for m in client.get("/v1/models").json()["data"]}
    refused = client.post("/v1/models", json={"id": "other", "provider_id": "fake"})
    assert refused.status_code == 404 and "cannot serve 'other'" in refused.json()["error"]["message"]


def test_next_token_replays_at_a_prefix(client: TestClient, fake: FakeProvider) -> None:
    reply = client.post("/next_token", json={"inputs": "Q?", "prefix": "y", "top_k": 5})
    assert reply.status_code == 200 and reply.json()["candidates"][0]["text"] == "e"
    assert fake.calls[-1].extra == {"prefix": "y", "top_k": 5}


def test_chat_tokenize_names_a_remote_model_it_cannot_template(client: TestClient) -> None:
    reply = client.post("/chat_tokenize", json={"messages": [{"role": "user", "content": "Q?"}]})
    assert reply.status_code == 422 and reply.json()["error_type"] == "validation"
    assert "served remotely: /chat_tokenize needs a local model" in reply.json()["error"]


def test_invocations_sends_each_shape_to_its_route(client: TestClient, fake: FakeProvider) -> None:
    """TGI's order: `inputs` first, then `messages`, then `prompt`; ?model= picks the model for TGI's shape."""
    both = {"inputs": "Q?", "messages": [{"role": "user", "content": "x"}], "parameters": {"min_p": 0.1}}
    reply = client.post("/invocations?model=fake-model", json=both)
    assert reply.status_code == 422 and "messages: unknown field" in reply.json()["error"]  # TGI's shape, strictly
    reply = client.post("/invocations?model=fake-model", json={"inputs": "Q?", "parameters": {"min_p": 0.1}})
    assert reply.json()["generated_text"] == "yes" and fake.calls[-1].params.min_p == 0.1
    reply = client.post("/invocations", json={"messages": [{"role": "user", "content": "x"}], "min_p": 0.2})
    assert reply.json()["choices"][0]["message"]["content"] == "yes" and fake.calls[-1].params.min_p == 0.2
    reply = client.post("/invocations", json={"prompt": ["a", "b"], "max_tokens": 2})
    assert [c["text"] for c in reply.json()["choices"]] == ["yes", "yes"]
    for bad in ([], "text", {"parameters": {}}):
        reply = client.post("/invocations", json=bad)
        assert reply.status_code == 422 and set(reply.json()) == {"error", "error_type"}, reply.text


def test_a_prompt_of_token_ids_needs_a_model_whose_tokenizer_is_here(client: TestClient, fake: FakeProvider) -> None:
    reply = client.post("/v1/completions", json={"prompt": [[1, 2], [3]], "max_tokens": 2})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "model"
    assert "a prompt of token ids needs a local model" in reply.json()["error"]["message"] and not fake.calls


def test_responses_read_long_inputs_skip_returned_reasoning_and_name_the_input_item(
    client: TestClient, fake: FakeProvider
) -> None:
    reply = client.post("/v1/responses", json={"input": "word " * 400, "max_output_tokens": 2})
    assert reply.status_code == 200, reply.text
    returned = [
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "yes", "annotations": [], "logprobs": []}]},
        {"role": "user", "content": "and again?"},
    ]  # fmt: skip
    reply = client.post("/v1/responses", json={"input": returned, "instructions": "Be brief."})
    assert reply.status_code == 200, reply.text
    sent = fake.calls[-1].inputs
    assert [(m.role, m.text()) for m in sent] == [("system", "Be brief."), ("assistant", "yes"), ("user", "and again?")]
    reply = client.post("/v1/responses", json={"input": [{"role": "user", "content": "y" * 200_000}]})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "input"
    # a chat message's error names the input item it came from: the instructions and skipped items shift them
    request = ResponsesRequest(input=returned, instructions="Be brief.")
    assert responses_wire._renamed(("messages", 0, "content"), request) == ("instructions",)
    assert responses_wire._renamed(("messages", 2, "content"), request) == ("input", 2, "content")
    assert responses_wire._renamed(("max_completion_tokens",), request) == ("max_output_tokens",)


def test_responses_tools_and_their_items_are_the_chat_request_they_mean() -> None:
    """Flat function tools nest under `function`; allowed_tools keeps those it names; a call joins the assistant
    message before it (a run of calls is one message); its output is a `tool` message; errors name this route's
    fields, a tool by its place in `tools`."""
    tool = {"type": "function", "name": "a", "parameters": {"type": "object"}, "defer_loading": False}
    tools = [tool, {**tool, "name": "b"}, {**tool, "name": "c"}]
    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me see."}]},
        {"type": "function_call", "call_id": "call_1", "name": "a", "arguments": "{}", "id": "fc_1"},
        {"type": "function_call", "call_id": "call_2", "name": "c", "arguments": '{"x": 1}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "one"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "two"}]},
    ]
    subset = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "c"}]}
    request = ResponsesRequest(input=items, tools=tools, tool_choice=subset, parallel_tool_calls=False)
    chat = responses_wire.chat_request(request)
    assert [t.function.name for t in chat.tools] == ["c"] and chat.tool_choice == "required"
    assert chat.parallel_tool_calls is False
    assert [(m.role, m.text()) for m in chat.messages] == [
        ("user", "hi"), ("assistant", "Let me see."), ("tool", "one"), ("tool", "two")
    ]  # fmt: skip
    calls = chat.messages[1].model_extra["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("call_1", "a", "{}"), ("call_2", "c", '{"x": 1}')
    ]  # fmt: skip
    assert [m.model_extra.get("tool_call_id") for m in chat.messages[2:]] == ["call_1", "call_2"]
    named = ResponsesRequest(input="hi", tools=tools, tool_choice={"type": "function", "name": "b"})
    assert responses_wire.chat_request(named).tool_choice.function.name == "b"
    # a chat error's place is the route's: the third tool is chat's first under this subset
    assert responses_wire._renamed(("tools", 0, "function", "parameters"), request) == ("tools", 2, "parameters")
    assert responses_wire.names(request)["tools[0].function.parameters"] == "tools[2].parameters"
    assert responses_wire._renamed(("messages", 2, "content"), request) == ("input", 4, "content")
    for body, words in [
        ({"tools": [{"type": "file_search"}]}, "tools[0].type: 'file_search' tools are not supported here"),
        ({"tools": [{**tool, "defer_loading": True}]}, "tools[0].defer_loading: only False here"),
        ({"tools": tools, "tool_choice": {"type": "mcp"}}, "tool_choice.type: 'mcp' is not supported here"),
        ({"tools": tools, "tool_choice": {"type": "function", "name": "z"}}, "tool_choice.name: 'z' is not one of"),
        ({"tools": tools, "tool_choice": {**subset, "mode": "none"}}, "allowed_tools needs `mode`"),
        (  # (it said only that a tool of `tools` was wanted)
            {"tools": tools, "tool_choice": {**subset, "tools": [{"type": "function", "name": "nope"}]}},
            "tool_choice.tools[0].name: 'nope' is not one of the function tools",
        ),
        ({"tool_choice": {"type": "function", "name": "a"}}, "tool_choice.name: 'a' is not one of the function tools"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "a", "arguments": "{"}]}, "input[0].arguments"),
        ({"input": [items[0], {"type": "function_call_output", "call_id": "x", "output": 1}]}, "input[1].call_id"),
    ]:
        with pytest.raises(ParameterError) as caught:
            responses_wire.chat_request(ResponsesRequest(**{"input": "hi", **body}))
        assert words in caught.value.message, caught.value.message
    assert responses_wire.chat_request(ResponsesRequest(input="hi", tool_choice="auto")).tools is None


def test_responses_refuse_what_they_could_not_repeat_and_echo_one_call_when_parallel_is_unset(
    client: TestClient,
) -> None:
    """A Response repeats metadata, tools, tool_choice and text.format: typed as OpenAI's, and nested at most 128
    levels (300 was a 500 from the JSON writer, after the whole decode)."""
    deep = json.loads("[" * 300 + "]" * 300)
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    for body, param, words in [
        ({"metadata": {"a": deep}}, "metadata.a", "Input should be a valid string"),
        ({"metadata": {"a": "x" * 513}}, "metadata.a", "at most 512 characters"),
        ({"tools": [tool, {**tool, "name": "g", "parameters": {"x": deep}}]}, "tools", "nests deeper than 128 levels"),
        ({"tools": [tool], "tool_choice": {"type": "function", "name": "f", "x": deep}}, "tool_choice", "nests deeper"),
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"x": deep}}}}, "text.format.schema",
         "nests deeper"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only with stream: true"),
        ({"tools": [{"name": "f"}]}, "tools[0]", "tools[0].type: required ('function')"),
    ]:  # fmt: skip
        reply = client.post("/v1/responses", json={"input": "hi", **body})
        error = reply.json()["error"]
        assert reply.status_code == 400 and error["param"] == param and words in error["message"], reply.text
    answer = client.post("/v1/responses", json={"input": "hi", "tools": [tool]}).json()
    assert answer["parallel_tool_calls"] is False and answer["tools"] == [tool]
    answer = client.post("/v1/responses", json={"input": "hi", "tools": [tool], "parallel_tool_calls": True}).json()
    assert answer["parallel_tool_calls"] is True
    assert (answer["temperature"], answer["top_p"]) == (1.0, 1.0)  # unset: echoed as in effect, as OpenAI does
    answer = client.post("/v1/responses", json={"input": "hi", "temperature": 0, "top_p": 0.5}).json()
    assert (answer["temperature"], answer["top_p"]) == (0, 0.5)


def test_responses_name_what_they_accept_and_ignore(client: TestClient) -> None:
    body = {"input": "hi", "text": {"verbosity": "low"}, "reasoning": {"summary": "auto"}, "metadata": {"a": "b"}}
    warnings = client.post("/v1/responses", json=body).json()["warnings"]
    assert [w.split(":")[0] for w in warnings] == ["metadata", "text.verbosity", "reasoning.summary"]
    # the SDK's newer reasoning fields: the context this server uses is the current turn's, one mode
    body = client.post("/v1/responses", json={"input": "hi", "reasoning": {"context": "auto", "mode": "pro"}}).json()
    assert body["reasoning"] == {"effort": None, "summary": None, "context": "current_turn", "mode": "standard"}
    assert [w.split(":")[0] for w in body["warnings"]] == ["reasoning.mode"]
    reply = client.post("/v1/responses", json={"input": "hi", "reasoning": {"context": "all_turns"}})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "reasoning.context"
    assert "'all_turns' is not supported here" in reply.json()["error"]["message"]


def test_responses_need_and_echo_a_schema_s_name_count_the_instructions_and_stamp_their_times(
    client: TestClient,
) -> None:
    fmt = {"type": "json_schema", "schema": {"type": "boolean"}}
    nameless = client.post("/v1/responses", json={"input": "Is it?", "text": {"format": fmt}})
    assert nameless.status_code == 400 and nameless.json()["error"]["param"] == "text.format"  # as OpenAI, vLLM
    assert "text.format.name: required" in nameless.json()["error"]["message"]
    fmt["name"] = "verdict"
    body = client.post("/v1/responses", json={"input": "Is it?", "text": {"format": fmt}}).json()
    assert body["text"]["format"]["name"] == "verdict"
    assert body["status"] == "completed" and body["completed_at"] >= body["created_at"]
    full = [{"role": "user", "content": "x"}] * MAX_MESSAGES
    reply = client.post("/v1/responses", json={"input": full, "instructions": "Be brief."})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "input"
    assert f"at most {MAX_MESSAGES - 1} messages with `instructions`" in reply.json()["error"]["message"]
    assert client.post("/v1/responses", json={"input": full}).status_code == 200


def test_an_error_names_its_field_as_the_route_s_client_sent_it_in_param_and_message() -> None:
    with pytest.raises(ParameterError) as caught, named_as_sent({"max_completion_tokens": "max_output_tokens"}):
        raise ParameterError("max_completion_tokens: must be < 8192, got 9000", field="max_completion_tokens")
    assert caught.value.field == "max_output_tokens"
    assert caught.value.message == str(caught.value) == "max_output_tokens: must be < 8192, got 9000"
    with pytest.raises(ParameterError) as caught, named_as_sent({"top_p": "p"}):
        raise ParameterError("temperature: too hot", field="temperature")  # another field's: as it was
    assert caught.value.field == "temperature" and caught.value.message == "temperature: too hot"
    # a remote provider refuses by TGI's body ("parameters.top_k"): the chat and completions routes have no `parameters`
    with pytest.raises(ParameterError) as caught, named_as_sent({"truncate": "truncate_prompt_tokens"}):
        raise ParameterError("top_k is not supported by provider 'oa' (remote::openai)", field="parameters.top_k")
    assert (
        caught.value.field == "top_k"
        and caught.value.message == "top_k is not supported by provider 'oa' (remote::openai)"
    )
    with pytest.raises(ParameterError) as caught, named_as_sent({"truncate": "truncate_prompt_tokens"}):
        raise ParameterError("truncate is not supported by provider 'oa' (remote::openai)", field="parameters.truncate")
    assert caught.value.field == "truncate_prompt_tokens"
    assert caught.value.message == "truncate_prompt_tokens is not supported by provider 'oa' (remote::openai)"
    # a constraint's words name its kind: a Lark grammar read "cannot enforce a structured_outputs constraint"
    refused = "provider 'oa' (remote::openai) cannot enforce a grammar constraint: only json_schema is enforced"
    with pytest.raises(UnsupportedConstraintError) as caught, named_as_sent({"grammar": "structured_outputs"}):
        raise UnsupportedConstraintError(refused, field="grammar")
    assert (caught.value.field, caught.value.message) == ("structured_outputs", refused)


def test_a_responses_error_names_the_field_its_client_sent() -> None:
    """structured_outputs is named as such (not `text.format`), a field list at a message's head as sent, and a
    reasoning budget by `reasoning.effort` when that set it."""
    from playground.errors import InvalidConstraintError

    regex = ResponsesRequest.model_validate({"input": "Hi", "structured_outputs": {"regex": "(ab"}})
    with pytest.raises(InvalidConstraintError) as caught, named_as_sent(responses_wire.names(regex)):
        raise InvalidConstraintError("invalid regex at position 0: unclosed group")
    assert caught.value.field == "structured_outputs"
    both = ResponsesRequest.model_validate({"input": "Hi", "text": {"format": {"type": "json_object"}}})
    with pytest.raises(ParameterError) as caught, named_as_sent(responses_wire.names(both)):
        raise ParameterError("response_format, structured_outputs: give one constraint", field="structured_outputs")
    assert caught.value.message == "text.format, structured_outputs: give one constraint"
    effort = ResponsesRequest.model_validate({"input": "Hi", "reasoning": {"effort": "low"}})
    with pytest.raises(ParameterError) as caught, named_as_sent(responses_wire.names(effort)):
        raise ParameterError("max_reasoning_tokens (or reasoning_effort): no reasoning", field="max_reasoning_tokens")
    assert (caught.value.field, caught.value.message) == ("reasoning.effort", "reasoning.effort: no reasoning")
    auto = ResponsesRequest.model_validate({"input": "Hi", "truncation": "auto"})  # a remote TGI refuses -1 by name
    with pytest.raises(ParameterError) as caught, named_as_sent(responses_wire.names(auto)):
        raise ParameterError("truncate -1 (as many ...) is not supported by provider 't'", field="parameters.truncate")
    assert caught.value.field == "truncation" and caught.value.message.startswith("truncation -1")


def test_responses_include_takes_openai_s_values_only(client: TestClient) -> None:
    body = {"input": "Hi", "include": ["message.output_text.logprobs", "bogus"]}
    reply = client.post("/v1/responses", json=body)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "include[1]", reply.text


def test_responses_usage_is_openai_s_type_strictly() -> None:
    """openai 3.57's ResponseUsage requires `cache_write_tokens`: the SDK builds responses leniently, but anything
    validating them (a proxy, a recorder, `Response.model_validate`) refused every one."""
    chat = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    usage = ResponseUsage.model_validate(responses_wire.usage(chat))
    assert (usage.input_tokens, usage.output_tokens, usage.input_tokens_details.cache_write_tokens) == (7, 3, 0)


def test_score_names_the_sampling_settings_it_does_not_apply() -> None:
    """/score took `temperature: 0.5` without a word, while it refuses logits_processors by name."""
    from playground.server.score import sampling_warnings
    from playground.types import GenerateParameters

    sampled = GenerateParameters(do_sample=True, temperature=0.5, top_k=4)
    assert sampling_warnings(sampled) == [
        "temperature, top_k, do_sample: accepted and ignored (scoring reads the model's own distribution, before "
        "sampling)"
    ]
    assert sampling_warnings(GenerateParameters(max_new_tokens=3, grammar={"type": "choice", "value": ["a"]})) == []
