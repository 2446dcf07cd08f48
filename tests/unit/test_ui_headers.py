"""Headers on the UI's answers: who may frame the page (clickjacking); the API's routes keep theirs."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app


@pytest.mark.parametrize(
    ("env", "policy"),
    [
        ({}, "frame-ancestors 'self'"),
        ({"SPACE_ID": "owner/name"}, "frame-ancestors 'self' https://huggingface.co https://*.hf.space"),
    ],
)
def test_only_this_server_and_on_a_space_the_hub_may_frame_the_ui(monkeypatch, env, policy) -> None:
    """`/` sent no X-Frame-Options and no frame-ancestors: any site could frame the UI."""
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("SYSTEM", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    client = TestClient(create_app(Registry([]), ui=True))
    for path in ("/", "/gradio_api/info"):
        assert client.get(path).headers["content-security-policy"] == policy, path
    for path in ("/health", "/v1/models", "/info"):
        assert "content-security-policy" not in client.get(path).headers, path


def test_gradio_grants_no_other_origin_a_read_with_the_login_cookie() -> None:
    """Gradio answered any localhost Origin (the Host being loopback) with that origin and Allow-Credentials, so
    another local web app could read /gradio_api/* with the visitor's login cookie."""
    client = TestClient(create_app(Registry([]), api_key="s3cret", ui=True), base_url="http://127.0.0.1:7860")
    assert client.post("/login", data={"username": "a", "password": "s3cret"}).status_code == 200
    for origin in ("http://127.0.0.1:1234", "http://localhost:7860", "https://evil.example"):
        answer = client.get("/gradio_api/info", headers={"Origin": origin})
        assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers, origin
        assert "access-control-allow-credentials" not in answer.headers, origin
        preflight = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        assert "access-control-allow-origin" not in client.options("/gradio_api/queue/join", headers=preflight).headers
    own = client.get("/gradio_api/info", headers={"Origin": "http://127.0.0.1:7860"})  # the UI's own page
    assert own.headers["access-control-allow-origin"] == "http://127.0.0.1:7860"


def test_a_stream_gradio_refuses_after_it_started_answers_without_a_traceback(caplog) -> None:
    """queue/data for an unknown session: the client gets `session_not_found`, and Gradio's 404 raised after that
    wrote ~110 lines of traceback per request to the log (anyone could flood it)."""
    client = TestClient(create_app(Registry([]), ui=True))
    with caplog.at_level("INFO"):
        answer = client.get("/gradio_api/queue/data?session_hash=nobody")
    assert answer.status_code == 200 and '"session_not_found":true' in answer.text.replace(" ", "")
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL") or r.exc_info]
    assert any("404 Not Found after the answer started" in r.getMessage() for r in caplog.records)


def test_a_refused_stream_is_ended_for_its_client() -> None:
    """Left open, uvicorn logged "ASGI callable returned without completing response" at ERROR for each one."""
    import asyncio

    from starlette.exceptions import HTTPException

    from playground.server.ui_headers import LateRefusals

    async def gradio(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
        try:
            raise HTTPException(404)
        except HTTPException as exc:
            raise RuntimeError("Caught handled exception, but response already started.") from exc

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(LateRefusals(gradio)({"type": "http", "method": "GET", "path": "/gradio_api/queue/data"}, None, send))
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def test_an_address_gradio_cannot_read_is_a_414_naming_the_limit(caplog) -> None:
    """Past 65,536 characters Gradio's page raised httpx's InvalidURL: a 500 and two tracebacks per request."""
    client = TestClient(create_app(Registry([]), ui=True))
    long = "A" * 64_500  # (httpx, the test's client too, refuses past 65,536)
    for answer in (client.get(f"/?session={long}"), client.post(f"/gradio_api/queue/join?session={long}", json={})):
        assert answer.status_code == 414 and "at most 64000 here (a share link holds at most 60000" in answer.text
    assert client.get("/?session=" + "A" * 61_000).status_code == 200  # the link's own check names it on the page
    assert not [r for r in caplog.records if r.exc_info]
