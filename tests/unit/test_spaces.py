"""The Space card, the deploy script (without network) and the Space-only space."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import pytest
from huggingface_hub import SpaceCard
from huggingface_hub.repocard import metadata_load
from packaging.requirements import Requirement

from playground import space
from tests.support import REPO_ROOT, child_env

CARD = REPO_ROOT / "spaces" / "README.md"
DEPLOY = REPO_ROOT / "spaces" / "deploy.py"

# What assemble() copies from make_source_tree(): what the Space runs, nothing else.
ASSEMBLED = [
    "README.md",
    "app.py",
    "playground/__init__.py",
    "playground/ui/render.py",
    "requirements.txt",
    "widgets/static/view.js",
]


def load_deploy() -> ModuleType:
    """Import spaces/deploy.py by path: a package named `spaces` would shadow Hugging Face's."""
    spec = importlib.util.spec_from_file_location("playground_space_deploy", DEPLOY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_card_parses_with_required_keys() -> None:
    meta = metadata_load(CARD)
    data = SpaceCard.load(CARD).data
    assert set(load_deploy().CARD_KEYS) <= set(meta)
    assert (data.sdk, data.app_file, data.license) == ("gradio", "app.py", "apache-2.0")
    assert data.models == ["HuggingFaceTB/SmolLM2-135M-Instruct"]
    assert data.models[0] == space.SPACE_DEFAULT_MODEL
    assert len(meta["short_description"]) <= 60
    assert "# Structured Playground" in SpaceCard.load(CARD).text


def test_card_sdk_version_matches_requirements_and_installed_gradio() -> None:
    lines = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    gradio = [Requirement(line) for line in lines if line.strip().lower().startswith("gradio")]
    sdk_version = metadata_load(CARD)["sdk_version"]
    assert len(gradio) == 1 and gradio[0].specifier.contains(sdk_version)
    assert version("gradio") == sdk_version


def test_spaces_folder_is_not_a_package() -> None:
    assert not (REPO_ROOT / "spaces" / "__init__.py").exists()


def make_source_tree(root: Path) -> None:
    """A small repository with everything the Space needs and everything it must leave out."""
    for rel in (
        "app.py",
        "requirements.txt",
        "playground/__init__.py",
        "playground/ui/render.py",
        "playground/__pycache__/x.cpython-311.pyc",
        "widgets/static/view.js",
        "tests/test_x.py",
        ".venv/bin/python",
        "Makefile",
        "benchmarks/decode.py",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n")


def test_assemble_copies_what_the_space_runs_and_nothing_else(tmp_path: Path) -> None:
    make_source_tree(tmp_path / "src")
    files = load_deploy().assemble(tmp_path / "out", root=tmp_path / "src", card=CARD)
    assert files == ASSEMBLED
    assert (tmp_path / "out" / "README.md").read_text() == CARD.read_text()


def test_assemble_refuses_a_tree_without_app_py(tmp_path: Path) -> None:
    make_source_tree(tmp_path / "src")
    (tmp_path / "src" / "app.py").unlink()
    deploy = load_deploy()
    with pytest.raises(deploy.DeployError, match="app.py is missing"):
        deploy.assemble(tmp_path / "out", root=tmp_path / "src", card=CARD)


def run_deploy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DEPLOY), *args],
        cwd=REPO_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dry_run_prints_files_and_card_without_network() -> None:
    done = run_deploy("--repo-id", "someone/structured-playground", "--dry-run")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    files = report["files"]
    assert {
        "README.md",
        "app.py",
        "requirements.txt",
        "playground/__init__.py",
        "playground/models/__init__.py",
    } <= set(files)
    assert not [f for f in files if f.startswith(("tests/", ".venv/", "spaces/")) or "__pycache__" in f]
    assert all(f.split("/")[0] in {"README.md", "app.py", "requirements.txt", "playground", "widgets"} for f in files)
    assert report["card"] == metadata_load(CARD)
    assert (report["repo_id"], report["private"]) == ("someone/structured-playground", False)
    assert report["hardware"] == {
        "suggested_hardware": "cpu-basic",
        "duplicate": "https://huggingface.co/spaces/someone/structured-playground?duplicate=true",
    }


def test_dry_run_counts_exactly_the_bytes_it_would_upload(tmp_path: Path) -> None:
    done = run_deploy("--repo-id", "a/b", "--dry-run", "--output", str(tmp_path / "out"))
    report = json.loads(done.stdout)
    on_disk = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert report["files"] == on_disk
    assert report["upload"] == {
        "files": len(on_disk),
        "bytes": sum((tmp_path / "out" / f).stat().st_size for f in on_disk),
    }


def test_a_card_without_known_hardware_is_refused(tmp_path: Path) -> None:
    deploy = load_deploy()
    (tmp_path / "app.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text(
        CARD.read_text().replace("suggested_hardware: cpu-basic", "suggested_hardware: a-toaster")
    )
    with pytest.raises(deploy.DeployError, match="'a-toaster' is not a Space hardware"):
        deploy.card_metadata(tmp_path)


def test_the_card_states_every_hardware_default() -> None:
    text = CARD.read_text()
    for key in space.HARDWARE_DEFAULTS["cpu"]:
        cpu, zero, gpu = (space.HARDWARE_DEFAULTS[kind][key] for kind in ("cpu", "zero-gpu", "gpu"))
        assert f"| `{key}` | {cpu} | {zero} | {gpu} |" in text, key
    assert "| `threads` | vCPUs | vCPUs | vCPUs |" in text


@pytest.mark.parametrize(
    "repo_id,message",
    [
        ("bad id", "not a valid OWNER/NAME"),
        ("no-owner", "needs an owner"),
    ],
)
def test_bad_repo_id_is_refused_clearly(repo_id: str, message: str) -> None:
    done = run_deploy("--repo-id", repo_id, "--dry-run")
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr


def test_output_folder_must_be_empty(tmp_path: Path) -> None:
    (tmp_path / "stale.txt").write_text("old")
    done = run_deploy("--repo-id", "a/b", "--dry-run", "--output", str(tmp_path))
    assert done.returncode == 1 and "is not empty" in done.stderr
    (tmp_path / "a-file").write_text("x")  # a file, not a folder: a NotADirectoryError traceback
    done = run_deploy("--repo-id", "a/b", "--dry-run", "--output", str(tmp_path / "a-file"))
    assert done.returncode == 1 and "is not a folder" in done.stderr and "Traceback" not in done.stderr


class RecordingHfApi:
    """Stands in for the Hub (no network here); records each call and the folder's files at upload."""

    calls: list[tuple[str, tuple, dict]] = []

    def __init__(self, token: str | None = None) -> None:
        self.calls.append(("init", (), {"token": token}))

    def create_repo(self, *args: object, **kwargs: object) -> str:
        self.calls.append(("create_repo", args, kwargs))
        return f"https://huggingface.co/spaces/{args[0]}"

    def upload_folder(self, **kwargs: object) -> None:
        folder = Path(str(kwargs["folder_path"]))
        files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        self.calls.append(("upload_folder", (), {**kwargs, "files": files}))


def deploy_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """spaces/deploy.py with its repository root at a fresh source tree under tmp_path."""
    deploy = load_deploy()
    make_source_tree(tmp_path)
    monkeypatch.setattr(deploy, "REPO_ROOT", tmp_path)
    return deploy


def test_upload_creates_the_space_and_uploads_the_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy = deploy_from(tmp_path, monkeypatch)
    RecordingHfApi.calls = []
    monkeypatch.setattr(deploy, "HfApi", RecordingHfApi)
    assert deploy.main(["--repo-id", "me/pg", "--private", "--token", "hf_test"]) == 0
    report = json.loads(capsys.readouterr().out)
    names = [name for name, _, _ in RecordingHfApi.calls]
    assert names == ["init", "create_repo", "upload_folder"]
    assert RecordingHfApi.calls[0][2] == {"token": "hf_test"}
    assert RecordingHfApi.calls[1][1:] == (
        ("me/pg",),
        {"repo_type": "space", "space_sdk": "gradio", "exist_ok": True, "private": True},
    )
    upload = RecordingHfApi.calls[2][2]
    assert (upload["repo_id"], upload["repo_type"]) == ("me/pg", "space")
    assert upload["files"] == report["files"] == ASSEMBLED
    assert report["url"] == "https://huggingface.co/spaces/me/pg"


def test_upload_failure_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deploy = deploy_from(tmp_path, monkeypatch)

    class Unreachable(RecordingHfApi):
        def create_repo(self, *args: object, **kwargs: object) -> str:
            raise ConnectionError("huggingface.co unreachable")

    monkeypatch.setattr(deploy, "HfApi", Unreachable)
    assert deploy.main(["--repo-id", "me/pg"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "deploy: upload to me/pg failed: ConnectionError: huggingface.co unreachable"


# --- settings on a Space --------------------------------------------------------------------


@pytest.mark.parametrize(
    "env,expected",
    [
        ({}, False),
        ({"SPACE_ID": "me/pg"}, True),
        ({"SYSTEM": "spaces"}, True),
        ({"SYSTEM": "linux", "SPACE_ID": ""}, False),
    ],
)
def test_on_space_reads_the_space_environment(env: dict[str, str], expected: bool) -> None:
    assert space.on_space(env) is expected


def test_space_overrides_defaults() -> None:
    assert space.space_overrides({"SPACE_ID": "me/pg"}) == {
        "host": "0.0.0.0",
        "port": 7860,
        "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "allow_custom_modules": False,
        "allow_local_paths": False,
        "allow_model_loading": False,
        "load_in_background": True,
        "forwarded_allow_ips": space.SPACE_PROXIES,
    }


def test_on_a_space_each_visitor_is_the_address_the_platform_s_proxy_saw() -> None:
    """Every visitor was the proxy's address (one client: one shared evaluation, queue share, key-guess lockout)."""
    import asyncio

    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    from playground.cli import uvicorn_options

    args = space.apply_space_settings(argparse.Namespace(forwarded_allow_ips=None), {"SPACE_ID": "me/pg"}, cuda=False)
    options = uvicorn_options(args)
    assert options["proxy_headers"] is True
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["client"][0])

    middleware = ProxyHeadersMiddleware(app, trusted_hosts=options["forwarded_allow_ips"])
    for forwarded in ("203.0.113.9", "1.2.3.4, 203.0.113.9", "10.9.9.9, 203.0.113.9, 10.16.3.80"):
        scope = {"type": "http", "client": ("10.16.3.80", 4000), "headers": [(b"x-forwarded-for", forwarded.encode())]}
        asyncio.run(middleware(scope, None, None))
    assert seen == ["203.0.113.9"] * 3  # a visitor's own header (1.2.3.4, 10.9.9.9) names nobody
    mine = space.space_overrides({"SPACE_ID": "me/pg", "PLAYGROUND_FORWARDED_ALLOW_IPS": "10.1.0.0/16"})
    assert mine["forwarded_allow_ips"] == "10.1.0.0/16"
    assert space.space_overrides({"PLAYGROUND_FORWARDED_ALLOW_IPS": " "})["forwarded_allow_ips"] is None  # nobody's
    for wrong in ("10.0.0.1/8", "proxy.local"):  # uvicorn would never match them: every visitor one client again
        with pytest.raises(ValueError, match=f"PLAYGROUND_FORWARDED_ALLOW_IPS: '{re.escape(wrong)}' is not an IP"):
            space.space_overrides({"PLAYGROUND_FORWARDED_ALLOW_IPS": wrong})


def test_space_overrides_take_port_and_model_from_env() -> None:
    got = space.space_overrides({"PORT": "8080", "PLAYGROUND_MODEL": "embedded"})
    assert (got["port"], got["model"]) == (8080, "embedded")
    # set but blank is unset, as every other variable (it loaded a model named "  ")
    assert space.space_overrides({"PLAYGROUND_MODEL": "  "})["model"] == space.SPACE_DEFAULT_MODEL
    assert space.space_overrides({"PLAYGROUND_MODEL": " org/model\n"})["model"] == "org/model"


def test_space_overrides_fall_back_to_gradios_port_variable() -> None:
    assert space.space_overrides({"GRADIO_SERVER_PORT": "7861"})["port"] == 7861
    assert space.space_overrides({"PORT": "8080", "GRADIO_SERVER_PORT": "7861"})["port"] == 8080


def test_space_overrides_reject_a_bad_port() -> None:
    with pytest.raises(ValueError, match="PORT must be an integer, got 'eighty'"):
        space.space_overrides({"PORT": "eighty"})
    for port in ("99999", "-5", "0"):  # bind() refused them with a traceback
        with pytest.raises(ValueError, match=f"PORT must be a port number from 1 to 65535, got {port}"):
            space.space_overrides({"PORT": port})


def test_apply_space_settings_only_on_a_space() -> None:
    args = argparse.Namespace(host="127.0.0.1", port=7860, model="embedded", api_key="k")
    assert space.apply_space_settings(args, {}) is args
    applied = space.apply_space_settings(args, {"SPACE_ID": "me/pg", "PORT": "9000"}, cuda=False)
    assert (applied.host, applied.port, applied.model, applied.api_key) == (
        "0.0.0.0",
        9000,
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "k",
    )
    assert applied.allow_custom_modules is False and applied.allow_local_paths is False
    assert applied.allow_model_loading is False
    assert (applied.max_batch_size, applied.compile_workers, applied.max_concurrent) == (8, 1, 4)
    assert applied.threads == min(space.MAX_THREADS, space.container_cpus())


@pytest.mark.parametrize(
    "env,cuda,kind",
    [({}, False, "cpu"), ({}, True, "gpu"), ({"SPACES_ZERO_GPU": "true"}, True, "zero-gpu")],
)
def test_hardware_is_read_from_the_space(env: dict[str, str], cuda: bool, kind: str) -> None:
    assert space.hardware(env, cuda) == kind


def test_hardware_defaults_take_the_containers_cpus_unless_the_operator_says() -> None:
    assert space.hardware_defaults("cpu", {}, cpus=2)["threads"] == 2
    assert space.hardware_defaults("gpu", {}, cpus=64)["threads"] == space.MAX_THREADS
    assert "threads" not in space.hardware_defaults("cpu", {"PLAYGROUND_THREADS": "3"}, cpus=2)


STAND_IN = '''
calls = []

def GPU(fn=None, **kwargs):
    """Records what it wraps, like spaces.GPU, and calls through."""
    def wrap(f):
        def run(*args, **kw):
            calls.append((f.__name__, args, kwargs))
            return f(*args, **kw)
        return run
    return wrap(fn) if fn is not None else wrap
'''


@pytest.fixture
def fresh_spaces_import(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test imports `spaces` anew and leaves no `spaces` module behind for later tests."""
    monkeypatch.delitem(sys.modules, "spaces", raising=False)
    yield
    sys.modules.pop("spaces", None)


@pytest.fixture
def stand_in_spaces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_spaces_import: None) -> Path:
    """Hugging Face's `spaces` package cannot run here; a stand-in with the same GPU entry point can."""
    (tmp_path / "spaces").mkdir()
    (tmp_path / "spaces" / "__init__.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_zero_gpu_uses_spaces_gpu(stand_in_spaces: Path) -> None:
    decorator = space.gpu_decorator({"SPACES_ZERO_GPU": "true"})
    spaces = sys.modules["spaces"]
    assert decorator is spaces.GPU

    @decorator
    def generate(prompt: str) -> str:
        return prompt.upper()

    assert generate("hi") == "HI"
    assert spaces.calls == [("generate", ("hi",), {})]


def test_without_zero_gpu_hardware_the_decorator_is_identity(stand_in_spaces: Path) -> None:
    def generate() -> str:
        return "x"

    assert space.gpu_decorator({})(generate) is generate
    assert "spaces" not in sys.modules


def test_zero_gpu_without_the_spaces_package_is_identity(
    monkeypatch: pytest.MonkeyPatch, fresh_spaces_import: None
) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != REPO_ROOT])
    monkeypatch.chdir(REPO_ROOT.parent)

    def generate() -> str:
        return "x"

    assert space.gpu_decorator({"SPACES_ZERO_GPU": "1"})(generate) is generate


def test_our_spaces_folder_does_not_pass_for_huggingface_spaces(
    monkeypatch: pytest.MonkeyPatch, fresh_spaces_import: None
) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT))

    def generate() -> str:
        return "x"

    assert space.gpu_decorator({"SPACES_ZERO_GPU": "1"})(generate) is generate
    assert getattr(sys.modules["spaces"], "__file__", None) is None


def test_a_forked_child_gets_compile_workers_of_its_own() -> None:
    """ZeroGPU runs each lease in a forked worker: it must not share the parent's compile pipes or wait on its compiles."""
    from playground.constraints.compiler import ConstraintCompiler

    compiler = ConstraintCompiler(tokenizer=None)
    compiler._pools = inherited = {False: object()}  # the parent's workers (real ones would take seconds to start)
    compiler._inflight = {"key": "a compile the parent is running"}
    read, write = os.pipe()
    with compiler._lock:  # a parent thread holds the lock at the moment of the fork
        pid = os.fork()
        if pid == 0:  # the child: report and leave at once, running nothing else
            fresh = compiler._pools == {} and compiler._inflight == {} and not compiler._lock.locked()
            os.write(write, b"1" if fresh else b"0")
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert compiler._pools is inherited and compiler._inflight  # the parent keeps its own


PROBE = (
    "import sys; from playground import space; space.import_spaces_first(); "
    "from playground.providers.local import LocalProvider; "
    "m = sys.modules.get('spaces'); print(getattr(m, '__file__', None), LocalProvider().leased)"
)


@pytest.mark.parametrize("zero_gpu", [False, True])
def test_an_installed_spaces_package_is_used_on_zero_gpu_only_and_never_shadowed(
    tmp_path: Path, zero_gpu: bool
) -> None:
    """Installed after the repository on the path (as site-packages is), from the repository root whose own
    `spaces/` folder comes first: Hugging Face's package still wins, and off ZeroGPU it is never imported."""
    (tmp_path / "spaces").mkdir()
    (tmp_path / "spaces" / "__init__.py").write_text(STAND_IN)
    env = child_env({"PYTHONPATH": str(tmp_path), "SPACES_ZERO_GPU": "true" if zero_gpu else None, "SPACE_ID": None})
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    expected = f"{tmp_path / 'spaces' / '__init__.py'} True" if zero_gpu else "None False"
    assert done.stdout.strip() == expected


def test_a_request_that_outwaits_the_load_is_told_to_come_back() -> None:
    from playground.errors import ModelLoadingError
    from playground.providers.startup import Startup

    pending = Startup("m", lambda: None, clock=iter([0.0, 42.0]).__next__)  # never started: it never ends
    with pytest.raises(ModelLoadingError, match=r"model 'm' is still loading \(42 s so far") as raised:
        pending.wait(0)
    assert (raised.value.status, raised.value.error_type) == (503, "loading")


def test_caches_go_to_persistent_storage_when_the_space_has_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert space.storage_dirs({}, persistent=data) == {}  # no /data: the container's own cache
    data.mkdir()
    assert space.storage_dirs({}, persistent=data) == {
        "PLAYGROUND_CACHE": str(data / "structured-playground"),
        "HF_HOME": str(data / ".huggingface"),
    }
    assert space.storage_dirs({"HF_HOME": "/mine"}, persistent=data) == {
        "PLAYGROUND_CACHE": str(data / "structured-playground")
    }
    env = {"HF_HOME": "/mine"}
    space.use_persistent_storage(env)
    assert env == {"HF_HOME": "/mine"}  # not a Space: nothing changes
