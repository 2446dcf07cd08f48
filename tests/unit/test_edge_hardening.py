"""Edge rules a public port needs: no blocking work on the event loop, no trust in a forwarded address,
no counting of requests that sent no key as guesses, no unbounded answers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from playground import cli
from playground.constraints import Constraint
from playground.decoding.engine import Engine
from playground.errors import PromptTooLongError
from playground.providers.registry import Registry
from playground.server import create_app

KEY = "s3cret"


def test_requests_without_any_key_are_not_counted_as_guesses() -> None:
    client = TestClient(create_app(Registry([]), api_key=KEY, ui=False))
    assert [client.get("/info").status_code for _ in range(15)] == [401] * 15
    assert client.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_forwarded_addresses_are_believed_only_from_proxies_the_operator_names() -> None:
    default = cli.uvicorn_options(cli.parse_args([]))
    assert default["proxy_headers"] is False  # uvicorn's default believes loopback
    named = cli.uvicorn_options(cli.parse_args(["--forwarded-allow-ips", "10.0.0.1"]))
    assert named["proxy_headers"] is True and named["forwarded_allow_ips"] == "10.0.0.1"


def test_inspect_reads_the_constraint_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    from playground.server import inspect as inspect_route

    seen = []

    def parse(grammar):  # records whether it ran on the event loop's thread
        try:
            asyncio.get_running_loop()
            seen.append("event loop")
        except RuntimeError:
            seen.append("worker thread")
        raise PromptTooLongError("stop here")

    monkeypatch.setattr(Constraint, "from_grammar", staticmethod(parse))
    monkeypatch.setattr(inspect_route, "local_engine", lambda *a: SimpleNamespace(compiler=None))
    client = TestClient(create_app(Registry([]), ui=False))
    client.post("/inspect", json={"grammar": {"type": "regex", "value": "a"}})
    assert seen == ["worker thread"]


def test_tokenize_answers_at_most_the_models_context() -> None:
    ids = list(range(5000))
    tokenizer = lambda text, **kw: {"input_ids": ids, "offset_mapping": [(i, i + 1) for i in ids]}  # noqa: E731
    engine = SimpleNamespace(tokenizer=tokenizer, max_input_tokens=4096)
    with pytest.raises(PromptTooLongError, match="at most 4096"):
        Engine.tokenize(engine, "x" * 5000)


def test_gradio_uploads_are_bounded_in_size_and_rate() -> None:
    client = TestClient(create_app(Registry([]), ui=True))
    big = client.post("/gradio_api/upload", files={"files": ("s.json", b"x" * (5 << 20), "application/json")})
    assert big.status_code == 413
    statuses = [
        client.post("/gradio_api/upload", files={"files": ("s.json", b"{}", "application/json")}).status_code
        for _ in range(25)
    ]
    assert statuses[:5] == [200] * 5 and statuses[-1] == 429


@pytest.mark.parametrize("named", ["a server file", "/dev/zero"])
def test_a_ui_file_input_takes_only_what_was_uploaded(tmp_path, named: str) -> None:
    """Gradio checks an input file's path only after `launch()`, which a mounted app never calls: a call naming a
    server path read it (a .jsonl's prompts came back) or, for /dev/zero, froze the server hashing it."""
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"prompt": "SECRET-LINE"}\n')
    file = {"path": str(secret) if named == "a server file" else named, "meta": {"_type": "gradio.FileData"}}
    with TestClient(create_app(Registry([]), ui=True)) as client:
        event = client.post("/gradio_api/call/on_upload", json={"data": [file]}).json()["event_id"]
        answer = client.get(f"/gradio_api/call/on_upload/{event}", timeout=30).text
    assert answer.startswith("event: error") and "was not uploaded by a user" in answer
    assert "SECRET-LINE" not in answer


def test_a_ui_file_input_is_never_fetched_from_a_url() -> None:
    """Gradio downloads an input file named by an http(s) URL (public addresses) before any handler runs: a call
    made this server fetch what it named. Refused before Gradio reads the body, on every call route."""
    file = {"path": "https://example.com/prompts.jsonl", "meta": {"_type": "gradio.FileData"}}
    with TestClient(create_app(Registry([]), ui=True)) as client:
        for path, body in [
            ("/gradio_api/call/on_upload", {"data": [file]}),
            ("/gradio_api/queue/join", {"data": [file], "fn_index": 0, "session_hash": "x"}),
        ]:
            refused = client.post(path, json=body)
            assert refused.status_code == 400, (path, refused.text)
            assert refused.json()["error"].startswith("an input file must be uploaded here, not fetched: https://")
        assert client.post("/gradio_api/call/on_upload", content=b" " * (5 << 20)).status_code == 413


@pytest.mark.parametrize(("name", "data"), [("on_upload", [None]), ("on_load", [5, None])])
def test_ui_calls_with_values_the_page_never_sends_end_without_a_traceback(name: str, data: list) -> None:
    """A cleared file (None) raised AttributeError, and a stored session that is no text a TypeError shown as
    "model failure"; both printed a traceback to the server's log."""
    with TestClient(create_app(Registry([]), ui=True)) as client:
        event = client.post(f"/gradio_api/call/{name}", json={"data": data}).json()["event_id"]
        answer = client.get(f"/gradio_api/call/{name}/{event}", timeout=30).text
    assert answer.startswith("event: complete") and "model failure" not in answer
