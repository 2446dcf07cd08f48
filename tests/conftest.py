"""Fixtures shared by every tier: the embedded model, the engine, live servers and a browser."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psutil
import pytest
from filelock import FileLock

from tests.support import CHROMIUM, CHROMIUM_ARGS, EXPECT_TIMEOUT_MS, REPO_ROOT, TEST_ENV, LiveServer, start_app

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


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """Under pytest-xdist, the folder every worker of this run sees (the workers' temp folders' parent); else None."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return tmp_path_factory.getbasetemp().parent


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In the xdist controller, once every worker is done: stop the session servers the workers shared."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not session.config.pluginmanager.hasplugin("dsession"):
        return
    folder = session.config._tmp_path_factory.getbasetemp()
    records = [json.loads(path.read_text()) for path in folder.glob("server-*.json")]
    servers = [psutil.Process(record["pid"]) for record in records if psutil.pid_exists(record["pid"])]
    for server in servers:
        server.terminate()
    _, alive = psutil.wait_procs(servers, timeout=15)
    for server in alive:
        server.kill()
    for record in records:
        Path(record["log"]).unlink(missing_ok=True)


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


def _servers_until_teardown() -> Iterator[StartServer]:
    servers: list[LiveServer] = []
    yield _server_factory(servers)
    for server in servers:
        server.stop()


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    """Start `app.py ARGS` (e.g. --api-key K) for one test; returns its base URL; stopped after the test."""
    yield from _servers_until_teardown()


@pytest.fixture(scope="module")
def start_module_server() -> Iterator[StartServer]:
    """Like start_server, but the servers run until the test module ends."""
    yield from _servers_until_teardown()


@pytest.fixture(scope="session")
def thinking_model_dir(loaded_model, tmp_path_factory) -> Path:
    """A tiny thinking model folder (Qwen3-style template with `<think>` and `<tool_call>`), written once per run."""
    from tests.thinking_model import save_thinking_model

    shared = _run_folder(tmp_path_factory)
    if shared is None:
        return save_thinking_model(tmp_path_factory.mktemp("thinking-model"), loaded_model.tokenizer)
    folder = shared / "thinking-model"
    with FileLock(shared / "thinking-model.lock"):  # one worker writes it, every worker (and server) reads it
        if not (folder / "done").exists():
            save_thinking_model(folder, loaded_model.tokenizer)
            (folder / "done").touch()
    return folder


@pytest.fixture(scope="session")
def thinking_model(thinking_model_dir: Path):
    """The tiny thinking model, loaded through the playground's loader as a local folder would be."""
    from playground.models import load_model

    return load_model(str(thinking_model_dir), threads=1)


@pytest.fixture(scope="session")
def start_session_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartServer]:
    """Like start_server, but each distinct (args, env) runs once and is shared for the whole run.

    Under pytest-xdist the first worker to ask starts it and writes down its address; the others use the
    same server (a second copy of each would double the memory), and the controller stops it at the end.
    """
    servers: list[LiveServer] = []
    started: dict[tuple, str] = {}
    factory = _server_factory(servers)
    shared = _run_folder(tmp_path_factory)

    def start_shared(key: tuple, *args: str, env: Mapping[str, str | None] | None, cwd: Path | None) -> str:
        assert shared is not None
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        record = shared / f"server-{name}.json"
        with FileLock(shared / f"server-{name}.lock"):
            if record.exists():
                return json.loads(record.read_text())["url"]
            server = start_app(*args, env=env, cwd=cwd or REPO_ROOT)
            record.write_text(json.dumps({"url": server.url, "pid": server.proc.pid, "log": server.log_path}))
            return server.url

    def start(*args: str, env: Mapping[str, str | None] | None = None, cwd: Path | None = None) -> str:
        key = (args, tuple(sorted((env or {}).items())), str(cwd))
        if key not in started:
            if shared is None:
                started[key] = factory(*args, env=env, cwd=cwd)
            else:
                started[key] = start_shared(key, *args, env=env, cwd=cwd)
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
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
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
