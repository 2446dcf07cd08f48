"""The app's edges without a model: one error shape, field-naming 422s, the API key, the docs."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app
from playground.wire.errors import validation_message
from tests.support import error_of

KEY = "s3cret"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def client() -> TestClient:
    """A fresh app per test: wrong keys count per client, and each test starts with none."""
    return TestClient(create_app(Registry([]), api_key=KEY, ui=False))


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/info"),
        ("POST", "/generate"),
        ("POST", "/generate_stream"),
        ("POST", "/"),
        ("POST", "/tokenize"),
        ("POST", "/next_token"),
        ("GET", "/v1/models"),
        ("POST", "/v1/models"),
        ("POST", "/v1/chat/completions"),
    ],
)
def test_every_api_route_needs_the_key(client: TestClient, method: str, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        response = client.request(method, path, headers=headers, json={})
        assert response.status_code == 401, (path, headers)
        message, error_type = error_of(path, response.json())
        assert error_type == "authentication"
        assert "Authorization: Bearer" in message


def test_health_stays_open_and_the_docs_take_the_key(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok", "models": 0, "running": 0, "waiting": 0}
    paths = client.get("/openapi.json", headers=AUTH).json()["paths"]
    assert {"/generate", "/generate_stream", "/info", "/tokenize", "/next_token", "/v1/chat/completions"} <= set(paths)
    assert "swagger" in client.get("/docs", headers=AUTH).text.lower()


def test_the_origins_the_operator_names_may_call_the_api_from_a_browser() -> None:
    app = TestClient(create_app(Registry([]), api_key=KEY, ui=False, cors_origins=["https://app.example"]))
    asking = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
    for path in ("/v1/chat/completions", "/v1/models/some-model", "/generate"):
        preflight = app.options(path, headers={"Origin": "https://app.example", **asking})
        assert preflight.status_code == 200, path  # answered before the key is asked for: a preflight carries none
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        assert "access-control-allow-credentials" not in preflight.headers  # the key is a header, never a cookie
    assert app.options("/v1/chat/completions", headers={"Origin": "https://evil.example", **asking}).status_code == 400
    refused = app.post("/v1/chat/completions", headers={"Origin": "https://app.example"}, json={})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "https://app.example"
    answered = app.get("/info", headers={"Origin": "https://app.example", **AUTH})
    assert answered.headers["access-control-allow-origin"] == "https://app.example"
    foreign = app.get("/info", headers={"Origin": "https://evil.example", **AUTH})
    assert "access-control-allow-origin" not in foreign.headers
    # without the flag no route sends CORS headers, and a preflight is a wrong method
    plain = TestClient(create_app(Registry([]), api_key=KEY, ui=False))
    assert (
        "access-control-allow-origin"
        not in plain.get("/info", headers={"Origin": "https://app.example", **AUTH}).headers
    )
    assert plain.options("/v1/chat/completions", headers={"Origin": "https://app.example", **asking}).status_code == 405


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (
            "/generate",
            {"inputs": "x", "parameters": {"top_p": 3}},
            "parameters.top_p: Input should be less than or equal to 1",
        ),
        ("/generate", {"inputs": "x", "parameters": {"max_tokens": 3}}, "parameters.max_tokens: unknown field"),
        (
            "/generate",
            {"inputs": "x", "parameters": {"stop": ["a", "b", "c", "d", "e"]}},
            "parameters.stop: List should have at most 4 items",
        ),
        (
            "/generate",
            {"inputs": "x", "parameters": {"grammar": {"type": "yaml", "value": "a"}}},
            "parameters.grammar.type: Input should be 'json', 'json_schema', 'regex', 'choice', 'grammar' or 'structural_tag'",
        ),
        ("/generate", {"parameters": {}}, "inputs: field required"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 21},
            "top_logprobs: Input should be less than or equal to 20",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}},
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content: only text content parts are supported",
        ),
        ("/v1/models", {"id": "m"}, "provider_id: field required"),
    ],
)
def test_bad_requests_are_422_naming_the_field(client: TestClient, path: str, body: dict, message: str) -> None:
    """422 on TGI's routes, 400 on OpenAI's (each in its protocol's error shape)."""
    response = client.post(path, json=body, headers=AUTH)
    assert response.status_code == (400 if path.startswith("/v1/") else 422)
    text, error_type = error_of(path, response.json())
    assert error_type == "validation"
    assert message in text


def test_invalid_json_body(client: TestClient) -> None:
    response = client.post("/generate", content=b"{nope", headers={**AUTH, "content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["error"].startswith("request body is not valid JSON")
    # json's own message ends "... at", before the offset FastAPI keeps apart: it read "(Invalid control character at)"
    raw = client.post("/generate", content=b'{"inputs": "a\x01"}', headers={**AUTH, "content-type": "application/json"})
    assert raw.json()["error"] == "request body is not valid JSON (Invalid control character at character 13)"


def test_unknown_model_and_provider(client: TestClient) -> None:
    response = client.post(
        "/v1/chat/completions", headers=AUTH, json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}
    )
    assert response.status_code == 404
    assert response.json() == {
        "error": {
            "message": "no provider serves model 'gpt-9' (served: none)",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",  # OpenAI's, which clients take as final
        }
    }
    nameless = {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}
    body = {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}], "response_format": nameless}
    refused = client.post("/v1/chat/completions", headers=AUTH, json=body)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "response_format"
    assert "json_schema.name: required" in refused.json()["error"]["message"]
    # other model errors (none named and no default, still loading, failed to load) keep our own code
    unnamed = client.post("/v1/chat/completions", headers=AUTH, json={"messages": [{"role": "user", "content": "x"}]})
    assert unnamed.status_code == 404 and unnamed.json()["error"]["code"] == "model"
    response = client.post("/v1/models", headers=AUTH, json={"id": "m", "provider_id": "far"})
    assert response.status_code == 403  # loading is off: the same refusal whatever it names (the configured
    assert "far" not in response.json()["error"]["message"]  # providers were listed in a 404 before)


def test_unknown_route_uses_the_same_shape(client: TestClient) -> None:
    response = client.get("/v2/nothing")
    assert response.status_code == 404
    assert response.json() == {"error": "Not Found", "error_type": "not_found"}


def test_huggingface_hub_s_clients_get_tgi_s_error_shape_on_the_openai_routes_too() -> None:
    """Its exceptions show `error` when it is a string (OpenAI's object came out as `{'message': ...}`); the status
    stays the route's, and every other client keeps OpenAI's shape."""
    app = TestClient(create_app(Registry([]), api_key=KEY, ui=False, allowed_hosts=["testserver"]))
    hub = {"user-agent": "unknown/None; hf_hub/1.1.4; python/3.11.7"}
    openai_sdk = {"user-agent": "OpenAI/Python 2.8.1"}
    chat = {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}
    cases = [  # (headers, body): a field the route refuses, a model nobody serves, the key, a Host not this server's
        ({**AUTH}, {**chat, "temperature": -1}),
        ({**AUTH}, chat),
        ({}, chat),
        ({**AUTH, "host": "evil.example"}, chat),
    ]
    kinds = []
    for sent, body in cases:
        tgi = app.post("/v1/chat/completions", headers={**sent, **hub}, json=body)
        openai = app.post("/v1/chat/completions", headers={**sent, **openai_sdk}, json=body)
        assert tgi.status_code == openai.status_code != 422, (sent, tgi.json())
        assert tgi.json() == {"error": openai.json()["error"]["message"], "error_type": tgi.json()["error_type"]}
        kinds.append(tgi.json()["error_type"])
    # TGI's words: a refused request is `validation` (what huggingface_hub's ValidationError reads), as on /generate
    assert kinds == ["validation", "model", "authentication", "forbidden_host"]


def test_validation_message_joins_every_error() -> None:
    errors = [
        {"loc": ("body", "parameters", "seed"), "msg": "Input should be greater than or equal to 0", "type": "x"},
        {"loc": ("body", "messages", 0, "role"), "msg": "Value error, bad role", "type": "value_error"},
    ]
    assert validation_message(errors) == (
        "parameters.seed: Input should be greater than or equal to 0; messages[0].role: bad role"
    )


CLOCK = {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}
NOW, SUN = ({"type": "function", "function": {"name": name}} for name in ("now", "sun"))


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"stop": 5}, "stop", "stop: give a string or a list of strings"),
        ({"guided_json": 5}, "guided_json", "guided_json: Input should be a valid dictionary"),
        (
            {"tool_choice": {"type": "function", "function": {}}},
            "tool_choice.function.name",
            "tool_choice.function.name: field required",
        ),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "messages[0].content: Input should be"),
        (
            {
                "tools": [CLOCK],
                "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "x", "tools": [NOW]}},
            },
            "tool_choice.allowed_tools.mode",
            "tool_choice.allowed_tools.mode: Input should be 'auto' or 'required'",
        ),
        (
            {
                "tools": [CLOCK],
                "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [SUN]}},
            },
            "tool_choice.allowed_tools.tools[0].function.name",
            "tool_choice.allowed_tools.tools[0].function.name: 'sun' is not one of `tools`",
        ),
    ],
)
def test_a_bad_field_is_named_as_the_client_wrote_it_not_by_pydantic_s_union_member(
    client: TestClient, body: dict, param: str, message: str
) -> None:
    response = client.post(
        "/v1/chat/completions", headers=AUTH, json={"messages": [{"role": "user", "content": "x"}], **body}
    )
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == param, error
    assert message in error["message"] and "constrained-str" not in error["message"] and "dict[" not in error["message"]
    assert "NamedToolChoice" not in error["message"]


def test_a_body_that_is_not_json_names_no_param(client: TestClient) -> None:
    response = client.post(
        "/v1/chat/completions", content=b'{"messages": [}', headers={**AUTH, "content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["param"] is None


def test_a_stream_that_fails_after_it_started_ends_with_an_error_in_its_routes_shape() -> None:
    from playground.errors import ParameterError
    from playground.server.errors import exception_event

    failure = ParameterError("logit_bias: token id 99 is not in the vocabulary", field="logit_bias")
    tgi = json.loads(exception_event(failure).removeprefix("data: "))
    assert tgi == {"error": "logit_bias: token id 99 is not in the vocabulary", "error_type": "validation"}
    openai = json.loads(exception_event(failure, openai=True).removeprefix("data: "))
    assert openai == {
        "error": {
            "message": "logit_bias: token id 99 is not in the vocabulary",
            "type": "invalid_request_error",
            "param": "logit_bias",
            "code": "validation",
        },
        "error_type": "validation",  # TGI's, beside it
    }


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/next_token", {"inputs": "x"}),
        ("/check", {"grammar": {"type": "regex", "value": "a"}, "text": "a"}),
        ("/reason", {"grammar": {"type": "regex", "value": "a"}, "tokens": [1]}),
        ("/inspect", {"grammar": {"type": "regex", "value": "a"}}),
        ("/score", {"inputs": "x", "parameters": {"grammar": {"type": "choice", "value": ["a"]}}}),
        ("/evaluate", {"prompts": ["x"], "parameters": {"grammar": {"type": "choice", "value": ["a"]}}}),
    ],
)
def test_model_in_the_query_picks_the_model_as_on_tgi_s_routes(client: TestClient, path: str, body: dict) -> None:
    """`?model=NAME` works on every route that takes a model, not only /generate: never the default in silence."""
    response = client.post(f"{path}?model=nobody-serves-this", headers=AUTH, json=body)
    assert response.status_code == 404, response.text
    assert "nobody-serves-this" in response.json()["error"]
