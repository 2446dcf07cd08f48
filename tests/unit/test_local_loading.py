"""What a request's load hands the model loader: a hub id from the hub, a folder only when written as a path."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground.errors import ModelError
from playground.options import LocalOptions
from playground.providers import local as local_module
from playground.providers.loading import LoadingPolicy
from playground.providers.local import LocalProvider, make_local

ALLOWED = LoadingPolicy(allow_requests=True)


class Refusing:
    """A model loader that records what it was asked to load, then fails as a folder of no model does."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, name: str, **options: object) -> None:
        self.calls.append((name, options))
        raise ModelError(f"cannot load model {name!r}: no config.json here")


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hub ids a load asked the hub (or its cache) for; none is there."""
    asked: list[str] = []

    def snapshot(repo_id: str) -> str:
        asked.append(repo_id)
        raise ModelError(f"model {repo_id!r} is not in the local Hugging Face cache (this server is offline)")

    monkeypatch.setattr(local_module, "hub_snapshot", snapshot)
    return asked


def test_a_hub_id_is_never_the_folder_of_that_name_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hub: list[str]
) -> None:
    """Before, `models/llama3b` loaded the server's ./models/llama3b when it existed (README: never a folder)."""
    (tmp_path / "models" / "llama3b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    loader = Refusing()
    local = LocalProvider(loader=loader)
    with pytest.raises(ModelError, match="not in the local Hugging Face cache"):
        local.add_model("models/llama3b", ALLOWED)
    assert hub == ["models/llama3b"] and loader.calls == []
    for spelling in ("./models/llama3b", "models/llama3b/", str(tmp_path / "models" / "llama3b")):
        with pytest.raises(ModelError, match="not a model folder"):
            local.add_model(spelling, ALLOWED)
    assert hub == ["models/llama3b"]
    assert [name for name, _ in loader.calls] == [str(tmp_path / "models" / "llama3b")] * 3


def test_the_operators_model_is_a_folder_where_one_of_that_name_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hub: list[str]
) -> None:
    """--model models/llama3b reads the folder, as transformers does; only requests are held to spelling."""
    (tmp_path / "models" / "llama3b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    loader = Refusing()
    with pytest.raises(ModelError):
        LocalProvider(loader=loader).add_model("models/llama3b")
    assert hub == [] and [name for name, _ in loader.calls] == [str(tmp_path / "models" / "llama3b")]


def test_trust_remote_code_is_for_the_operators_models_never_a_requests(tmp_path: Path, hub: list[str]) -> None:
    """Before, with --trust-remote-code and --allow-model-loading any client's POST /v1/models of a folder ran
    that folder's configuration_*.py."""
    local = make_local(LocalOptions(trust_remote_code=True))
    local._loader = loader = Refusing()
    with pytest.raises(ModelError):
        local.add_model(str(tmp_path), ALLOWED)
    with pytest.raises(ModelError):
        local.add_model(str(tmp_path / "operators"))
    assert [(name, options["trust_remote_code"]) for name, options in loader.calls] == [
        (str(tmp_path), False),
        (str(tmp_path / "operators"), True),
    ]


def test_a_failed_load_tells_the_client_little_and_the_log_why(
    tmp_path: Path, hub: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The client's 404 is the same for every path; before, the server's log said nothing either."""
    with pytest.raises(ModelError) as refused, caplog.at_level("WARNING", logger="playground.providers"):
        LocalProvider(loader=Refusing()).add_model(str(tmp_path), ALLOWED)
    assert "no config.json" not in refused.value.message
    assert (
        f"loading {str(tmp_path)!r} for a request failed: cannot load model {str(tmp_path)!r}: no config.json here"
        in (caplog.messages)
    )
