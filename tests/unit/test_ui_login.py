"""--api-key protects the UI too: a login page at "/", and nothing under /gradio_api/ answers before a login."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app
from playground.server.auth import ui_login

KEY = "s3cret"
UNICODE_KEY = "s3cret-ключ"  # a key with non-ASCII characters works as a password too


@pytest.fixture(scope="module")
def locked() -> TestClient:
    return TestClient(create_app(Registry([]), api_key=KEY, ui=True))


def test_the_ui_page_is_a_login_page_without_the_app(locked: TestClient) -> None:
    page = locked.get("/")
    assert page.status_code == 200
    assert '"auth_required":true' in page.text.replace(" ", "")
    assert "log in with any user name and the API key" in page.text
    assert "chat-input" not in page.text
    assert locked.get("/config").status_code == 401


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/gradio_api/queue/join"),
        ("POST", "/gradio_api/call/chat"),
        ("POST", "/gradio_api/run/chat"),
        ("POST", "/gradio_api/cancel"),
        ("GET", "/gradio_api/heartbeat/abc"),
        ("POST", "/gradio_api/stream/abc"),
        ("GET", "/gradio_api/info"),
        ("POST", "/gradio_api/upload"),
        ("POST", "/gradio_api/reset"),
    ],
)
def test_gradio_api_refuses_calls_without_the_login_cookie(locked: TestClient, method: str, path: str) -> None:
    response = locked.request(method, path, json={"data": [], "fn_index": 0, "session_hash": "x"})
    assert response.status_code == 401, path
    assert response.json()["error_type"] == "authentication"
    assert "log in" in response.json()["error"]


def test_a_bearer_header_does_not_replace_the_ui_login(locked: TestClient) -> None:
    response = locked.post("/gradio_api/call/chat", json={"data": []}, headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 401


def test_login_with_the_key_opens_the_ui_and_health_stays_open() -> None:
    client = TestClient(create_app(Registry([]), api_key=UNICODE_KEY, ui=True))
    assert client.get("/health").json()["status"] == "ok"
    assert client.post("/login", data={"username": "anyone", "password": "wrong"}).status_code == 400
    assert client.get("/config").status_code == 401
    assert client.post("/login", data={"username": "anyone", "password": UNICODE_KEY}).json() == {"success": True}
    config = client.get("/config")
    assert config.status_code == 200
    assert "chat-input" in {c.get("props", {}).get("elem_id") for c in config.json()["components"]}
    assert client.get("/gradio_api/info").status_code == 200
    assert client.get("/info").status_code == 401  # the API routes still want the Bearer header


def test_without_a_key_the_ui_needs_no_login() -> None:
    client = TestClient(create_app(Registry([]), ui=True))
    assert client.get("/config").status_code == 200
    assert client.get("/gradio_api/info").status_code == 200


def test_ui_login_takes_any_user_name_and_only_the_key() -> None:
    check = ui_login(UNICODE_KEY)
    assert check("", UNICODE_KEY) and check("someone", UNICODE_KEY)
    assert not check("someone", UNICODE_KEY + " ") and not check(UNICODE_KEY, "") and not check("x", "s3cret")


def test_a_server_with_a_key_gives_the_code_tab_keyed_snippets(monkeypatch) -> None:
    """create_app knows the key; the snippets' settings came only from the CLI (create_app(api_key=...) gave 401s)."""
    import playground.ui

    seen = []
    real = playground.ui.create_ui
    monkeypatch.setattr(playground.ui, "create_ui", lambda registry, **options: seen.append(options) or real(registry))
    create_app(Registry([]), api_key=KEY, ui=True)
    create_app(Registry([]), ui=True)
    assert [options.get("settings") and options["settings"].keyed for options in seen] == [True, None]
