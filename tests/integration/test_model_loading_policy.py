"""Loading models at run time is the operator's act: off by default, never probing paths, one copy per
folder, capped, failing fast offline, and never for keyless visitors on a public interface or a Space."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from playground.models import cache_root, embedded_gguf_path
from tests.support import REPO_ROOT, LiveServer, free_port, run_app, start_app

DISABLED = "loading models at run time is disabled on this server (the operator enables it with --allow-model-loading)"


def load(url: str, name: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/models", json={"id": name, "provider_id": "local"}, timeout=180)


def converted_folder() -> Path:
    """The embedded model converted to a transformers folder (the cache every start reads)."""
    return next(p for p in cache_root().glob("gguf-*") if not p.suffix and (p / "model.safetensors").is_file())


@pytest.fixture(scope="module")
def loading_server() -> Iterator[LiveServer]:
    live = start_app("--no-ui", "--allow-model-loading", "--max-models", "2")
    yield live
    live.stop()


@pytest.mark.parametrize("name", ["/etc/passwd", "/no/such/folder", "/tmp", "no-org/no-model", "../../etc"])
def test_by_default_requests_load_nothing_and_learn_nothing(server_url: str, name: str) -> None:
    response = load(server_url, name)
    assert response.status_code == 403
    assert response.json() == {
        "error": {"message": DISABLED, "type": "permission_error", "param": None, "code": "forbidden"}
    }


def test_a_served_model_is_still_answered_when_loading_is_off(server_url: str) -> None:
    assert load(server_url, "embedded").json()["owned_by"] == "local"
    assert load(server_url, "no-org/no-model").status_code == 403


def test_loading_on_a_public_interface_without_a_key_is_refused_at_start() -> None:
    done = run_app("--host", "0.0.0.0", "--port", str(free_port()), "--allow-model-loading")
    assert done.returncode == 2
    assert "--allow-model-loading on 0.0.0.0 (not a loopback address) needs --api-key" in done.stderr


def test_on_a_space_the_api_cannot_load_either() -> None:
    port = free_port()
    env = {"SPACE_ID": "someone/structured-playground", "PLAYGROUND_MODEL": "embedded", "PORT": str(port)}
    server = LiveServer(["--no-ui", "--allow-model-loading", "--api-key", "k"], port=port, env=env)
    try:
        server.wait_healthy()
        response = httpx.post(
            f"{server.url}/v1/models",
            json={"id": "HuggingFaceTB/SmolLM2-360M-Instruct", "provider_id": "local"},
            headers={"Authorization": "Bearer k"},
            timeout=60,
        )
        assert response.status_code == 403
        assert response.json()["error"]["message"] == DISABLED
    finally:
        server.stop()


def test_paths_that_exist_or_not_fail_alike(loading_server: LiveServer) -> None:
    answers = {name: load(loading_server.url, name) for name in ("/etc/passwd", "/etc", "/no/such/folder")}
    assert {r.status_code for r in answers.values()} == {404}
    assert {r.json()["error"]["message"].replace(repr(name), "NAME") for name, r in answers.items()} == {
        "cannot load model NAME: not a model folder or .gguf file this server can load"
    }


def test_an_unknown_hub_id_fails_at_once_when_offline(loading_server: LiveServer) -> None:
    response = load(loading_server.url, "no-org/no-model")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == (
        "model 'no-org/no-model' is not in the local Hugging Face cache (this server is offline)"
    )


def test_every_spelling_of_a_folder_loads_one_copy_and_the_cap_holds(loading_server: LiveServer) -> None:
    """Each spelling used to be listed as a model of its own, in /v1/models, /health and every 404, without bound."""
    folder = converted_folder()
    spellings = [
        str(folder),
        f"{folder}/",
        f"{folder}/./",
        f"{folder.parent}//{folder.name}",
        os.path.relpath(folder, REPO_ROOT),
    ]
    before = httpx.get(f"{loading_server.url}/health", timeout=10).json()["models"]
    ids = {load(loading_server.url, spelling).json()["id"] for spelling in spellings}
    assert ids == {str(folder.resolve())}
    listed = [m["id"] for m in httpx.get(f"{loading_server.url}/v1/models", timeout=10).json()["data"]]
    assert listed.count(str(folder.resolve())) == 1 and not set(spellings[1:]) & set(listed)
    assert httpx.get(f"{loading_server.url}/health", timeout=10).json()["models"] == before + 1
    for spelling in spellings:  # each still names the model
        body = {"model": spelling, "prompt": "The capital of France is", "max_tokens": 2}
        answer = httpx.post(f"{loading_server.url}/v1/completions", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
    missing = httpx.post(f"{loading_server.url}/v1/completions", json={"model": "org/nothing", "prompt": "x"})
    assert not any(repr(spelling) in missing.json()["error"]["message"] for spelling in spellings[1:])
    refused = load(loading_server.url, str(embedded_gguf_path()))  # a third model: over --max-models 2
    assert refused.status_code == 403
    assert "already holds 2 models, its limit (--max-models 2)" in refused.json()["error"]["message"]


def test_two_gguf_files_named_alike_are_two_models(loaded_model, tmp_path: Path) -> None:
    """A GGUF model goes by its file name; a second file of that name, elsewhere, goes by its whole path. Before,
    the second load was thrown away and its path answered by the first file's model."""
    from dataclasses import replace

    from playground.providers.local import LocalProvider

    def load(name: str, **options: object):
        return replace(loaded_model, model_id=Path(name).name, source=name)

    local = LocalProvider(loader=load)
    first, second = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    assert local.add_model(str(first)) == "model.gguf"
    assert local.add_model(str(second)) == str(second)
    assert local.engine(str(first)).loaded.source == str(first)
    assert local.engine(str(second)).loaded.source == str(second)
    assert sorted(local.list_models()) == sorted(["model.gguf", str(second)])
    assert local.add_model(str(tmp_path / "b" / ".." / "b" / "model.gguf")) == str(second)  # one model per file
