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
