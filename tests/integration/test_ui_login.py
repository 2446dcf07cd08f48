"""A live server with --api-key: the UI and Gradio's API want a login with the key; /health stays open."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AuthenticationError

KEY = "live-key-42"


def test_api_key_locks_the_ui_until_login(start_server: Any) -> None:
    url = start_server("--api-key", KEY)
    assert httpx.get(f"{url}/health", timeout=30).json()["status"] == "ok"
    page = httpx.get(f"{url}/", timeout=30)
    assert page.status_code == 200 and "auth_required" in page.text and "chat-input" not in page.text
    # nor the UI's API description (every endpoint with its choices: the served models, the processors)
    empty = 'window.gradio_api_info = {"named_endpoints": {}, "unnamed_endpoints": {}};</script>'
    assert empty in page.text and page.text.count("named_endpoints") == 2
    assert int(page.headers["content-length"]) == len(page.content)
    assert httpx.get(f"{url}/config", timeout=30).status_code == 401
    refused = httpx.post(f"{url}/gradio_api/call/constraint_status", json={"data": ["regex", "a+"]}, timeout=30)
    assert refused.status_code == 401 and refused.json()["error_type"] == "authentication"
    assert (
        httpx.post(
            f"{url}/gradio_api/queue/join", json={"data": [], "fn_index": 0, "session_hash": "s"}, timeout=30
        ).status_code
        == 401
    )
    with pytest.raises(AuthenticationError):
        Client(f"{url}/", verbose=False)
    with httpx.Client(base_url=url, timeout=60) as browser:
        assert browser.post("/login", data={"username": "me", "password": "wrong"}).status_code == 400
        assert browser.post("/login", data={"username": "me", "password": KEY}).json() == {"success": True}
        config = browser.get("/config")
        assert config.status_code == 200
        assert "named_endpoints" in browser.get("/").text  # logged in, the page is Gradio's own
        assert "chat-input" in {c.get("props", {}).get("elem_id") for c in config.json()["components"]}
    client = Client(f"{url}/", auth=("anyone", KEY), verbose=False)
    status = client.predict("regex", "[a-z", api_name="/constraint_status")
    assert "invalid regex at position 0" in status
