"""Fixtures shared by every tier: the embedded model, the engine, live servers and a browser."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.support import CHROMIUM, CHROMIUM_ARGS, REPO_ROOT, TEST_ENV, LiveServer, start_app

# Set before anything imports huggingface_hub or torch, so nothing in the suite can download.
for _key, _value in TEST_ENV.items():
    os.environ.setdefault(_key, _value)

TIERS = ("unit", "integration", "browser")
StartServer = Callable[..., str]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier (its folder), so `-m unit` runs the fast tier alone."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        for tier in TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def loaded_model():
    """The embedded model, loaded once per session (from the on-disk cache after the first run)."""
    from playground.models import load_model

    return load_model("embedded", threads=1)


@pytest.fixture(scope="session")
def engine(loaded_model):
    """The local engine on the embedded model."""
    from playground.decoding.engine import Engine

    return Engine(loaded_model)


def _server_factory(servers: list[LiveServer]) -> StartServer:
    def start(*args: str, env: Mapping[str, str | None] | None = None, cwd: Path | None = None) -> str:
        server = start_app(*args, env=env, cwd=cwd or REPO_ROOT)
        servers.append(server)
        return server.url

    return start


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """Start `app.py ARGS` (e.g. --api-key K) for one test; returns its base URL; stopped after the test."""
    servers: list[LiveServer] = []
    yield _server_factory(servers)
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def thinking_model_dir(loaded_model, tmp_path_factory) -> Path:
    """A tiny thinking model folder (Qwen3-style template with `<think>` and `<tool_call>`), written once per session."""
    from tests.thinking_model import save_thinking_model

    return save_thinking_model(tmp_path_factory.mktemp("thinking-model"), loaded_model.tokenizer)


@pytest.fixture(scope="session")
def thinking_model(thinking_model_dir: Path):
    """The tiny thinking model, loaded through the playground's loader as a local folder would be."""
    from playground.models import load_model

    return load_model(str(thinking_model_dir), threads=1)


@pytest.fixture(scope="session")
def start_session_server() -> Iterator[StartServer]:
    """Like start_server, but each distinct (args, env) runs once and is shared for the whole session."""
    servers: list[LiveServer] = []
    started: dict[tuple, str] = {}
    factory = _server_factory(servers)

    def start(*args: str, env: Mapping[str, str | None] | None = None, cwd: Path | None = None) -> str:
        key = (args, tuple(sorted((env or {}).items())), str(cwd))
        if key not in started:
            started[key] = factory(*args, env=env, cwd=cwd)
        return started[key]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def server_url(start_session_server: StartServer) -> str:
    """The default app (embedded model, no API key) on 127.0.0.1, shared by the session."""
    return start_session_server("--model", "embedded")


@pytest.fixture(scope="session")
def thinking_url(start_session_server: StartServer, thinking_model_dir: Path) -> str:
    """The app on the tiny thinking model's folder (no flag, no trust_remote_code), shared by the session."""
    return start_session_server("--model", str(thinking_model_dir))


@pytest.fixture(scope="session")
def chromium_launch_args() -> dict:
    """How every browser test launches Debian's Chromium: headless, no sandbox, no background traffic."""
    if not os.access(CHROMIUM, os.X_OK):
        raise RuntimeError(f"{CHROMIUM} is missing: run `make test` (it installs Debian's chromium)")
    return {"executable_path": CHROMIUM, "headless": True, "args": list(CHROMIUM_ARGS)}


@pytest.fixture(scope="module")
def browser(chromium_launch_args: dict):
    """A headless Chromium per module, driven by playwright's sync API.

    Not per session: while playwright's sync API is active the main thread has a running event loop,
    which would break every later test that calls asyncio.run.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(**chromium_launch_args)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A fresh browser context and page per test, so tests share no cookies or storage."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    yield tab
    context.close()


@pytest.fixture
def registered() -> Iterator[list[str]]:
    """Logits-processor names a test registers; removed afterwards so tests stay independent."""
    from playground import processors

    names: list[str] = []
    yield names
    for name in names:
        if name in {info.name for info in processors.list_factories()}:
            processors.unregister_factory(name)
