"""The published OpenAPI document: our error answers in our shape; the docs behind the key; unknown routes
and methods answered in our shape with the UI mounted too."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app
from tests.support import error_of

KEY = "s3cret"
AUTH = {"Authorization": f"Bearer {KEY}"}
ERRORS = {"401", "403", "404", "413", "422", "424", "429", "502"}


@pytest.fixture(scope="module")
def spec() -> dict:
    return TestClient(create_app(Registry([]), ui=False)).get("/openapi.json").json()


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/redoc"])
def test_the_docs_need_the_key_like_the_api(path: str) -> None:
    client = TestClient(create_app(Registry([]), api_key=KEY, ui=False))
    refused = client.get(path)
    assert refused.status_code == 401
    assert refused.json()["error_type"] == "authentication"
    assert client.get(path, headers=AUTH).status_code == 200


def test_every_api_operation_lists_our_errors_in_our_shape(spec: dict) -> None:
    """TGI's shape and 422 on TGI's routes; OpenAI's shape and 400 (no 422) on /v1/*."""
    for path, operations in spec["paths"].items():
        if path == "/health":
            continue
        openai = path.startswith("/v1/")
        errors = (ERRORS - {"422"}) | {"400"} if openai else ERRORS
        shape = "OpenAIErrorResponse" if openai else "ErrorResponse"
        for method, operation in operations.items():
            responses = operation["responses"]
            assert errors <= set(responses), (method, path)
            assert not (openai and "422" in responses), (method, path)
            for status in errors:
                schema = responses[status]["content"]["application/json"]["schema"]
                assert schema == {"$ref": f"#/components/schemas/{shape}"}, (method, path, status)
    error = spec["components"]["schemas"]["ErrorResponse"]
    assert set(error["required"]) == {"error", "error_type"}
    openai_error = spec["components"]["schemas"]["OpenAIError"]
    assert set(openai_error["required"]) == {"message", "type", "param", "code"}
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_health_documents_its_503_and_streams_their_events(spec: dict) -> None:
    assert spec["paths"]["/health"]["get"]["responses"]["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"
    }
    assert "text/event-stream" in spec["paths"]["/generate_stream"]["post"]["responses"]["200"]["content"]
    for path in ("/", "/v1/chat/completions"):
        content = spec["paths"][path]["post"]["responses"]["200"]["content"]
        assert {"application/json", "text/event-stream"} <= set(content), path


@pytest.mark.parametrize(
    ("method", "path", "status", "error_type"),
    [
        ("GET", "/v2/nothing", 404, "not_found"),
        ("POST", "/v1/nothing", 404, "not_found"),
        ("GET", "/gradio_api/nothing", 404, "not_found"),
        ("PUT", "/", 405, "method_not_allowed"),
    ],
)
def test_with_the_ui_unknown_routes_answer_in_our_shape(method: str, path: str, status: int, error_type: str) -> None:
    client = TestClient(create_app(Registry([]), ui=True))
    response = client.request(method, path)
    assert response.status_code == status
    assert error_of(path, response.json())[1] == error_type
