"""Guessing the API key or the UI login is slow: ten wrong keys in a minute, then a minute of 429 for that client."""

from __future__ import annotations

from fastapi.testclient import TestClient

from playground.providers.registry import Registry
from playground.server import create_app
from playground.server.guesses import KeyGuesses

KEY = "s3cret"


def test_wrong_keys_get_429_with_retry_after_and_then_even_the_right_key_waits() -> None:
    client = TestClient(create_app(Registry([]), api_key=KEY, ui=False))
    statuses = [client.get("/info", headers={"Authorization": f"Bearer guess{i}"}).status_code for i in range(10)]
    assert statuses == [401] * 10
    refused = client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"  # OpenAI's shape on /v1/*
    assert refused.json()["error"]["code"] == "too_many_attempts"
    assert refused.json()["error"]["message"].startswith(
        "too many wrong API keys from this client (10 in 60 s); retry in "
    )
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert client.get("/health").status_code == 200


def test_ui_login_guessing_gets_429_too() -> None:
    client = TestClient(create_app(Registry([]), api_key=KEY, ui=True))
    wrong = [client.post("/login", data={"username": "a", "password": f"guess{i}"}).status_code for i in range(10)]
    assert wrong == [400] * 10
    for path in ("/login", "/login/"):  # Gradio answers both
        refused = client.post(path, data={"username": "a", "password": KEY})
        assert refused.status_code == 429, path
        assert refused.json()["error_type"] == "too_many_attempts"
        assert "retry-after" in refused.headers


def test_a_login_without_its_form_guesses_nothing_and_is_not_counted() -> None:
    """A JSON body (no username/password form) is FastAPI's 422: it counted as a wrong key."""
    client = TestClient(create_app(Registry([]), api_key=KEY, ui=True))
    malformed = [client.post("/login", json={"password": f"guess{i}"}).status_code for i in range(12)]
    assert malformed == [422] * 12
    assert client.post("/login", data={"username": "a", "password": KEY}).json() == {"success": True}


def test_guesses_at_login_with_a_trailing_slash_count_too() -> None:
    client = TestClient(create_app(Registry([]), api_key=KEY, ui=True))
    wrong = [client.post("/login/", data={"username": "a", "password": f"guess{i}"}).status_code for i in range(10)]
    assert wrong == [400] * 10
    assert client.post("/login/", data={"username": "a", "password": KEY}).status_code == 429


def test_the_wait_ends_and_old_failures_are_forgotten() -> None:
    now = [0.0]
    guesses = KeyGuesses(max_failures=3, window_s=60, block_s=30, clock=lambda: now[0])
    guesses.failed("a")
    guesses.failed("a")
    now[0] = 61.0  # the first two fall out of the window
    guesses.failed("a")
    assert guesses.retry_after_s("a") == 0
    guesses.failed("a")
    guesses.failed("a")
    assert guesses.retry_after_s("a") == 30 and guesses.retry_after_s("b") == 0
    now[0] = 91.5
    assert guesses.retry_after_s("a") == 0
