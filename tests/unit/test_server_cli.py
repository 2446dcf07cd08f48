"""app.py: documented flags, their defaults, the API key from the environment, and a clear plugin failure."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import fields
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

from playground import cli
from playground.constraints.compile_pool import CompileLimits
from playground.options import LocalOptions, ServerOptions
from tests.support import REPO_ROOT, child_env, run_app

FLAGS = [
    "--model",
    "--host",
    "--port",
    "--providers",
    "--custom-modules",
    "--api-key",
    "--device",
    "--dtype",
    "--threads",
    "--trust-remote-code",
    "--compile-timeout",
    "--max-new-tokens",
    "--prefix-cache-tokens",
    "--no-ui",
]


def test_help_documents_every_flag() -> None:
    out = run_app("--help")
    assert out.returncode == 0
    for flag in FLAGS:
        assert flag in out.stdout, flag
    assert "127.0.0.1" in out.stdout and "7860" in out.stdout


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLAYGROUND_API_KEY", raising=False)
    monkeypatch.delenv("PLAYGROUND_THREADS", raising=False)
    args = cli.parse_args([])
    assert (args.model, args.host, args.port, args.api_key, args.threads) == ("embedded", "127.0.0.1", 7860, None, 1)
    assert (args.compile_timeout, args.trust_remote_code, args.no_ui) == (10.0, False, False)


def test_api_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLAYGROUND_API_KEY", "from-env")
    assert cli.parse_args([]).api_key == "from-env"
    assert cli.parse_args(["--api-key", "flag"]).api_key == "flag"
    # a secrets file's newline: a header cannot carry it, so every request was a 401 and a guess against the limiter
    monkeypatch.setenv("PLAYGROUND_API_KEY", "from-file\n")
    assert cli.parse_args([]).api_key == "from-file"
    monkeypatch.setenv("PLAYGROUND_API_KEY", "")
    assert cli.parse_args([]).api_key is None  # set but empty: no key, as unset


@pytest.mark.parametrize("key", ["", "  ", "\n"])
def test_a_blank_api_key_flag_is_refused_not_an_open_server(key: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(["--api-key", key])
    assert exited.value.code == 2
    assert (
        "argument --api-key: empty: leave it out (and $PLAYGROUND_API_KEY unset) for a server"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(("key", "odd"), [("sécret", 1), ("ab\tc", 2)])
def test_an_api_key_no_header_can_carry_is_refused(key: str, odd: int, capsys: pytest.CaptureFixture[str]) -> None:
    """`sécret` was taken, and every API request then got 401: Starlette reads a header as Latin-1, the openai
    SDK sends none but ASCII."""
    with pytest.raises(SystemExit):
        cli.parse_args(["--api-key", key])
    err = capsys.readouterr().err  # (the secret's characters are never printed)
    assert (
        f"argument --api-key: printable ASCII only (an HTTP header cannot carry it otherwise): character {odd} is not"
        in err
    )
    assert key[odd] not in err.split("--api-key:")[1]
    assert cli.parse_args(["--api-key", "sk-Z9 ~!"]).api_key == "sk-Z9 ~!"


def test_a_custom_module_that_fails_stops_start_up_with_exit_2() -> None:
    out = run_app("--no-ui", "--custom-modules", "no_such_plugin_module")
    assert out.returncode == 2
    assert "cannot import custom module 'no_such_plugin_module'" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_port_in_use_or_a_host_not_here_stops_start_up_before_the_model_loads() -> None:
    """Both were found by uvicorn after the ~20 s load and a "ready" line; the model named here cannot load at all,
    so an error about it would mean the load came first."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_app("--no-ui", "--port", str(port), "--model", "/no/such/model/folder")
    assert out.returncode == 1 and f"error: cannot bind 127.0.0.1:{port}: " in out.stderr, out.stderr
    assert "Address already in use" in out.stderr and "cannot load the model" not in out.stderr
    assert "Traceback" not in out.stderr
    with pytest.raises(OSError):  # a host this machine does not have: the same path, without a second start
        cli.bind("bogus.invalid", 0)


def test_prefix_cache_budget_reaches_the_local_engines() -> None:
    from playground.options import LocalOptions

    assert LocalOptions.from_flags(cli.parse_args([])).prefix_cache_tokens == 4096
    assert LocalOptions.from_flags(cli.parse_args(["--prefix-cache-tokens", "0"])).prefix_cache_tokens == 0
    with pytest.raises(SystemExit):
        cli.parse_args(["--prefix-cache-tokens", "-1"])


def test_the_console_script_runs_the_composition_root() -> None:
    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "structured-playground"]
    assert script.load() is cli.main
    out = subprocess.run(
        [str(Path(sys.executable).with_name("structured-playground")), "--help"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "--compile-timeout" in out.stdout, out.stderr


def test_every_flag_comes_from_one_options_field_with_its_default() -> None:
    args = vars(cli.parse_args([]))
    declared = {f.name: f for options in (ServerOptions, LocalOptions) for f in fields(options)}
    assert set(args) == set(declared)
    local = LocalOptions()
    for name in ("compile_timeout", "compile_memory", "compile_workers", "prefix_cache_tokens", "max_new_tokens"):
        assert args[name] == getattr(local, name), name
    assert CompileLimits() == CompileLimits(local.compile_timeout, local.compile_memory, local.compile_workers)


def test_a_loopback_bind_answers_to_loopback_names_unless_told_otherwise() -> None:
    assert cli.allowed_hosts(cli.parse_args([])) == ["127.0.0.1", "localhost", "::1"]
    assert cli.allowed_hosts(cli.parse_args(["--host", "0.0.0.0"])) is None  # a Space, a LAN: any name
    assert cli.allowed_hosts(cli.parse_args(["--allowed-hosts", "box.lan,127.0.0.1"])) == ["box.lan", "127.0.0.1"]
    assert cli.allowed_hosts(cli.parse_args(["--allowed-hosts", "*"])) is None
    # all of 127.0.0.0/8 is this machine: it lost the rebinding check, and loading models needed a key there
    assert cli.allowed_hosts(cli.parse_args(["--host", "127.0.0.2"])) == ["127.0.0.1", "localhost", "::1", "127.0.0.2"]
    assert cli.allowed_hosts(cli.parse_args(["--host", "::1"])) == ["127.0.0.1", "localhost", "::1"]
    from playground.providers.loading import loading_problem

    assert loading_problem(True, "127.0.0.2", None) is None and loading_problem(True, "10.0.0.2", None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--threads", "0"], "argument --threads: must be at least 1, got 0"),
        (["--max-concurrent", "-1"], "argument --max-concurrent: must be at least 1, got -1"),  # was "0 or more"
        (["--port", "70000"], "argument --port: must be 0 to 65535, got 70000"),
        (["--stall-timeout", "-1"], "argument --stall-timeout: must be a number of seconds above 0"),
        (["--compile-timeout", "nan"], "argument --compile-timeout: must be a number of seconds above 0"),
        # past the clock's range (or a C long of bytes) every constrained request failed, blamed on memory
        (["--compile-timeout", "1e300"], "argument --compile-timeout: must be a number of seconds above 0, at most"),
        (["--compile-memory", "10000000000000"], "argument --compile-memory: must be from 64 to 1048576 (MB)"),
        (["--max-new-tokens", "0"], "argument --max-new-tokens: must be at least 1"),
        (["--reasoning", "a,b,c"], "argument --reasoning: 'a,b,c' is not auto, none, a family name or START,END"),
        # every request a 400 forbidden_host, /health included; a proxy never matched
        (["--allowed-hosts", ",,"], "argument --allowed-hosts: no names in ',,': comma-separated names, or *"),
        (["--allowed-hosts", "a.com,http://b.com"], "argument --allowed-hosts: 'http://b.com' is not a host name"),
        (["--forwarded-allow-ips", "not an ip"], "argument --forwarded-allow-ips: 'not an ip' is not an IP address"),
        # the embedded model loaded and was listed as ""; no providers file at all
        (["--model", " "], "argument --model: empty: 'embedded', a hub id, a local folder or a .gguf file"),
        (["--providers", ""], "argument --providers: empty: the path of a file"),
        # no browser sends an Origin with a path (a trailing slash) or without a scheme: CORS never answered them
        (["--cors-allow-origin", "https://app.example.com/"], "'https://app.example.com/' is not a web origin"),
        (["--cors-allow-origin", "*,localhost:3000"], "'localhost:3000' is not a web origin: scheme://host[:port]"),
        (["--cors-allow-origin", "not a url"], "argument --cors-allow-origin: 'not a url' is not a web origin"),
        (["--cors-allow-origin", "http://h:port"], "'http://h:port' is not a web origin"),
        (["--cors-allow-origin", ","], "argument --cors-allow-origin: no names in ','"),
        # Starlette has no wildcard hosts; 'null' is what every sandboxed frame sends
        (["--cors-allow-origin", "https://*.example.com"], "'https://*.example.com' is not a web origin"),
        (["--cors-allow-origin", "http://exa mple.com"], "'http://exa mple.com' is not a web origin"),
        (["--cors-allow-origin", "null"], "argument --cors-allow-origin: 'null' is refused: every sandboxed frame"),
    ],
)
def test_a_flag_no_server_can_work_with_is_refused_by_name(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each started a server that failed later: a traceback at bind or at set_num_threads, /health 503 for ever
    (stall timeout -1), compiles never stopped (nan), every unset max_new_tokens an empty answer."""
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_cors_origins_are_written_as_browsers_send_them() -> None:
    """Starlette compares the Origin header as it is: browsers send the scheme and host lower-cased."""
    args = cli.parse_args(["--cors-allow-origin", "https://App.Example.com, http://localhost:3000,*,http://[::1]:8080"])
    assert args.cors_allow_origin == "https://app.example.com,http://localhost:3000,*,http://[::1]:8080"
    # a default port is left out, an IDN host is sent in punycode
    args = cli.parse_args(
        ["--cors-allow-origin", "https://a.com:443,http://a.com:80,https://a.com:8443,https://bücher.de"]
    )
    assert args.cors_allow_origin == "https://a.com,http://a.com,https://a.com:8443,https://xn--bcher-kva.de"
    assert cli.parse_args(["--model", " embedded "]).model == "embedded"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("  ", "argument --api-key: empty: leave it out (and $PLAYGROUND_API_KEY unset) for a server without a key"),
        ("sécret", "argument --api-key: printable ASCII only (an HTTP header cannot carry it otherwise): character 1"),
    ],
)
def test_a_bad_api_key_variable_is_named_as_the_variable(
    value: str, message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator never typed --api-key: the error names where the key came from (and never the key)."""
    monkeypatch.setenv("PLAYGROUND_API_KEY", value)
    with pytest.raises(SystemExit) as exited:
        cli.parse_args([])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and "(from $PLAYGROUND_API_KEY)" in err
    assert "sécret" not in err
    with pytest.raises(SystemExit):  # the flag typed is named as the flag
        cli.parse_args(["--api-key", " "])
    assert "PLAYGROUND_API_KEY)\n" not in capsys.readouterr().err
    assert cli.parse_args(["--api-key", "flag"]).api_key == "flag"  # the flag wins over a bad variable


def test_a_bad_threads_variable_is_named_and_help_still_runs(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("PLAYGROUND_THREADS", "abc")
    assert run_app("--help", env={"PLAYGROUND_THREADS": "abc"}).returncode == 0
    with pytest.raises(SystemExit):
        cli.parse_args([])
    assert "argument --threads: not an integer: 'abc' (from $PLAYGROUND_THREADS)" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the flag typed is named as the flag
        cli.parse_args(["--threads", "0"])
    assert "argument --threads: must be at least 1, got 0\n" in capsys.readouterr().err
    monkeypatch.setenv("PLAYGROUND_THREADS", " ")  # set but blank: unset, as PLAYGROUND_API_KEY (it stopped start-up)
    assert cli.parse_args([]).threads == 1
    monkeypatch.setenv("PLAYGROUND_THREADS", "3")
    assert cli.parse_args([]).threads == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "foo"], "error: --device 'foo': not a device"),
        (["--model", "/no/such/folder"], "error: no such model folder or file: /no/such/folder"),
        (["--reasoning", "foo"], "error: --reasoning 'foo': not auto, none, a family ("),
        (["--adapters", "some-org/lora,/no/such/lora"], "error: --adapters '/no/such/lora': no such adapter folder"),
        (["--adapters", "my lora"], "error: --adapters 'my lora': not a folder here, nor a hub id ("),
        (["--dtype", "float17"], "error: --dtype 'float17': not a floating-point torch dtype"),
    ],
)
def test_start_up_failures_are_one_line_not_a_traceback(argv: list[str], message: str, tmp_path: Path) -> None:
    out = run_app("--no-ui", "--port", "0", *argv)
    assert out.returncode in (1, 2) and message in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_device_this_machine_lacks_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any machine, GPU or not: the check reads what torch reports (it was a 27-line traceback from `.to()`)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.device_problem("cuda") == "--device 'cuda': this torch build or machine has no CUDA device"
    assert cli.device_problem("cuda:1") == "--device 'cuda:1': this torch build or machine has no CUDA device"
    assert cli.device_problem("cpu") is None and cli.device_problem(None) is None
    # a device torch knows but this server does not use (it said only "cuda, cuda:N, mps or cpu")
    assert (
        cli.device_problem("meta")
        == "--device 'meta': not a device this server can use (meta: cuda, cuda:N, mps or cpu)"
    )


def test_a_providers_file_s_mistake_exits_2_and_a_local_model_that_cannot_load_names_the_file_and_entry(
    tmp_path: Path,
) -> None:
    """The file is configuration, as flags are (exit 2; it was 1); a local entry's missing folder named neither (a
    model that cannot load exits 1, as --model's: the file may be right and the model missing)."""
    path = tmp_path / "providers.yaml"
    path.write_text(
        "providers:\n  - {provider_id: mine, provider_type: local::transformers, config: {model: /no/such/folder}}\n"
    )
    out = run_app("--no-ui", "--port", "0", "--providers", str(path))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"error: {path}: provider 'mine': no such model folder or file: /no/such/folder" in out.stderr
    path.write_text("providers: [")
    out = run_app("--no-ui", "--port", "0", "--providers", str(path))
    assert out.returncode == 2 and f"error: {path}: not valid YAML" in out.stderr, out.stderr
    # said before torch and the models load (~6 s of imports): the file is read first
    check = "import sys\nfrom playground import cli\ntry:\n    cli.main(sys.argv[1:])\nexcept SystemExit as e:\n"
    check += "    print(e.code, 'torch' in sys.modules)\n"
    out = subprocess.run(
        [sys.executable, "-c", check, "--no-ui", "--providers", str(path)],
        cwd=REPO_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.split() == ["2", "False"], out.stderr


def test_a_file_that_is_no_gguf_is_one_line(tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"garbage")
    out = run_app("--no-ui", "--port", "0", "--model", str(fake))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"error: cannot load GGUF file {fake}: " in out.stderr and "not a GGUF file" in out.stderr
