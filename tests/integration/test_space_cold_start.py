"""A Space's cold start: the page and /health answer at once while the model loads, and a turn waits for it.

The load is the real one's result (the session's embedded model) handed over when the test opens a gate,
so "while it loads" lasts exactly as long as the test needs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from playground.models import EMBEDDED_NAME
from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.server import create_app
from playground.ui import handlers, startup
from playground.ui.state import ChatState, Form
from tests.support import serving


class GatedLoad:
    """A loader that hands over the already loaded model once `gate` is set (or raises `failure`)."""

    def __init__(self, loaded: Any, failure: Exception | None = None) -> None:
        self.loaded, self.failure = loaded, failure
        self.gate = threading.Event()

    def __call__(self, name: str, **options: Any) -> Any:
        self.gate.wait(120)
        if self.failure is not None:
            raise self.failure
        return self.loaded


def cold_registry(load: GatedLoad) -> Registry:
    """What cli.build_registry makes on a Space: the model answers to its name while it loads."""
    local = LocalProvider(loader=load)
    registry = Registry([])
    registry.startup = local.load_in_background("embedded", lambda _: registry.add_provider(local))
    registry.add_provider(local)
    registry.default_model = "embedded"
    registry.startup.start()
    return registry


@pytest.fixture
def gated(loaded_model: Any) -> Iterator[GatedLoad]:
    load = GatedLoad(loaded_model)
    yield load
    load.gate.set()


def test_page_and_health_answer_while_the_model_loads_and_requests_wait(gated: GatedLoad) -> None:
    registry = cold_registry(gated)
    with serving(create_app(registry)) as url, httpx.Client(base_url=url, timeout=120) as client:
        page = client.get("/")
        assert page.status_code == 200
        config = client.get("/config").text
        assert "Loading embedded" in config and "model-status" in config
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["startup"]["state"] == "loading"
        with ThreadPoolExecutor(2) as pool:
            body = {"inputs": "Yes or no?", "parameters": {"max_new_tokens": 3}}
            answer = pool.submit(client.post, "/generate", json=body)
            form = Form(model="embedded", max_new_tokens=3, kind="choice", constraint_text="yes\nno")
            turn = pool.submit(lambda: list(handlers.chat(registry, form, ChatState(), "Yes or no?"))[-1])
            assert not answer.done() and not turn.done()  # they wait for the model...
            gated.gate.set()
            assert answer.result().status_code == 200, answer.result().text  # ...and answered once it is loaded
            assert turn.result().error == "" and "valid" in turn.result().verdict
        assert client.get("/health").status_code == 200
        assert client.get("/info").json()["model_id"] == EMBEDDED_NAME
        assert startup.banner_html(registry) == ""
        assert ("local", EMBEDDED_NAME) in registry.models()


def test_a_failed_load_is_said_on_the_page_and_to_every_request(loaded_model: Any) -> None:
    load = GatedLoad(loaded_model, failure=OSError("disk full while converting"))
    registry = cold_registry(load)
    load.gate.set()
    with serving(create_app(registry, ui=False)) as url, httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/generate", json={"inputs": "hi", "parameters": {"max_new_tokens": 2}})
        assert answer.status_code == 404 and "failed to load: disk full while converting" in answer.json()["error"]
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["startup"]["state"] == "failed"
    assert 'role="alert"' in startup.banner_html(registry) and "disk full" in startup.banner_html(registry)
