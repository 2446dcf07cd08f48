"""The providers file: strict validation, discovery, unreachable providers, run-time registration."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from playground.errors import ModelError, ParameterError, ProviderError
from playground.providers.base import Capabilities, Provider
from playground.providers.config import (
    REMOTE_TYPES,
    LocalConfig,
    ProvidersFileError,
    build_registry,
    load_registry,
    read_providers_file,
)
from playground.providers.http import RemoteClient
from playground.providers.loading import LoadingPolicy, LoadingRefused
from playground.providers.registry import Registry
from playground.providers.tgi import TGIProvider
from playground.providers.vllm import VLLMProvider
from playground.types import GenerateParameters
from tests.fakes import FakeProvider
from tests.stub_server import StubReply, models_list, serve, tgi_info  # noqa: F401 (fixture)
from tests.support import REPO_ROOT, free_port


class FakeLocal:
    """Stands in for LocalProvider in the unit tier (no model here); records what it was built with."""

    provider_type = "local::transformers"
    capabilities = Capabilities(model_loading=True, decodes_here=True)

    def __init__(self, config: LocalConfig) -> None:
        self.provider_id = "local"
        self.config = config
        self.loaded = ["SmolLM2-embedded"]

    def list_models(self) -> list[str]:
        return list(self.loaded)

    def add_model(self, name: str, policy: LoadingPolicy | None = None) -> str:
        self.loaded.append(name)
        return name


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "providers.yaml"
    path.write_text(text)
    return path


def build(tmp_path: Path, text: str):
    return build_registry(write(tmp_path, text), local_factory=FakeLocal)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "providers:\n  - {provider_id: v, provider_type: remote::vllm, config: {base_ur: http://x}}\n",
            "providers[0].config.base_ur: unknown field (allowed: base_url, api_key_env, timeout_s, model, model_prefix",
        ),
        (
            "providers:\n  - {provider_id: v, provider_type: remote::vllm, config: {}}\n",
            "providers[0].config.base_url: field required",
        ),
        (  # a server that can never be asked: it only warned, and started
            "providers:\n  - {provider_id: v, provider_type: remote::vllm, config: {base_url: not a url}}\n",
            "providers[0].config.base_url: not an http:// or https:// URL with a host: 'not a url'",
        ),
        (
            "providers:\n  - {provider_id: v, provider_type: remote::llama, config: {}}\n",
            "providers[0].provider_type: Input should be 'local::transformers', 'remote::openai', 'remote::vllm', 'remote::tgi' or 'remote::hf-inference'",
        ),
        (
            "providers:\n  - {provider_id: v, provider_type: remote::tgi, config: {base_url: http://x, timeout_s: 0}}\n",
            "providers[0].config.timeout_s: Input should be greater than 0",
        ),
        (
            "providers:\n  - {provider_id: l, provider_type: local::transformers, config: {modle: x}}\n",
            "providers[0].config.modle: unknown field (allowed: model, device, dtype, trust_remote_code, reasoning)",
        ),
        (  # as --device and --reasoning are checked: torch's error came after the load, the other without the file
            "providers:\n  - {provider_id: l, provider_type: local::transformers, config: {device: foo}}\n",
            "providers[0].config.device: 'foo': not a device (cuda, cuda:N, mps or cpu)",
        ),
        (  # (found after the load's first seconds, as a ModelError without the file's field)
            "providers:\n  - {provider_id: l, provider_type: local::transformers, config: {dtype: int8}}\n",
            "providers[0].config.dtype: 'int8': not a floating-point torch dtype (e.g. float32, bfloat16 or float16)",
        ),
        (
            "providers:\n  - {provider_id: l, provider_type: local::transformers, config: {reasoning: bogus}}\n",
            "providers[0].config.reasoning: 'bogus': not auto, none, a family (",
        ),
        (
            "provider:\n  - {provider_id: l, provider_type: local::transformers}\n",
            "provider: unknown field (allowed: providers, models, default_model)",
        ),
        (  # a misspelt key of an entry: its keys were not listed (a config's and the top level's were)
            "providers:\n  - {provider_id: l, provider_type: local::transformers, models: [m]}\n",
            "providers[0].models: unknown field (allowed: provider_id, provider_type, config)",
        ),
        (
            "providers:\n  - {provider_id: l, provider_type: local::transformers}\nmodels:\n  - {model: m}\n",
            "models[0].model: unknown field (allowed: model_id, provider_id)",
        ),
        ("providers: []\n", "providers: List should have at least 1 item"),
        (
            "providers:\n  - {provider_id: a, provider_type: local::transformers}\n  - {provider_id: a, provider_type: local::transformers}\n",
            "provider_id 'a' is used by more than one provider",
        ),
        (
            "providers:\n  - {provider_id: a, provider_type: local::transformers}\nmodels:\n  - {model_id: m, provider_id: b}\n",
            "models[0].provider_id: unknown provider 'b' (configured: a)",
        ),
        ("providers:\n  - {provider_id: a, provider_type: local::transformers\n", "not valid YAML"),
        ("- just a list\n", "expected a mapping with `providers:`"),
        # what started, then failed with a traceback or served nonsense
        (
            "providers:\n  - {provider_id: v, provider_type: remote::vllm, config: {base_url: 'http://127.0.0.1:abc/v1'}}\n",
            "providers[0].config.base_url: not a URL the server can be asked at: 'http://127.0.0.1:abc/v1'",
        ),
        (
            "providers:\n  - {provider_id: v, provider_type: remote::vllm, config: {base_url: 'http://h:99999/v1'}}\n",
            "providers[0].config.base_url: not a URL the server can be asked at",
        ),
        (
            "providers:\n  - {provider_id: v, provider_type: remote::tgi, config: {base_url: http://x, timeout_s: 1e10}}\n",
            "providers[0].config.timeout_s: Input should be less than or equal to 86400",
        ),
        (
            "providers:\n  - {provider_id: l, provider_type: local::transformers, config: {model: ''}}\n",
            "providers[0].config.model: String should have at least 1 character",
        ),
        (  # the last one won without a word: the first block's providers were gone
            "providers:\n  - {provider_id: a, provider_type: local::transformers}\nproviders:\n  - {provider_id: b, provider_type: local::transformers}\n",
            "found the key 'providers' twice at line 3, column 1",
        ),
        (
            "providers:\n  - {provider_id: v, provider_type: remote::vllm, config: {base_url: http://a, base_url: http://b}}\n",
            "found the key 'base_url' twice",
        ),
    ],
)
def test_mistakes_name_the_file_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ProvidersFileError) as caught:
        read_providers_file(path)
    assert caught.value.message.startswith(str(path))
    assert message in caught.value.message


def test_yaml_merge_keys_still_merge_and_an_unhashable_key_is_named(tmp_path: Path) -> None:
    """The duplicate-key check built `<<` as a key (no constructor: merge keys were refused) and hashed a list."""
    text = (
        "base: &base {provider_type: remote::vllm, config: {base_url: 'http://127.0.0.1:9'}}\n"
        "providers:\n  - <<: *base\n    provider_id: v\n"
    )
    with pytest.raises(ProvidersFileError, match="base: unknown field"):  # merged and read: only `base` is foreign
        read_providers_file(write(tmp_path, text))
    with pytest.raises(ProvidersFileError, match="not valid YAML: found unhashable key"):
        read_providers_file(write(tmp_path, "? [a, b]\n: 1\n"))


def test_a_file_past_a_mebibyte_is_refused_unread(tmp_path: Path) -> None:
    """/dev/zero was read until memory ran out."""
    with pytest.raises(ProvidersFileError, match="larger than 1 MiB; not a providers file"):
        read_providers_file("/dev/zero")


@pytest.mark.parametrize("key", ["sk-SECRET\r\nX", "sk-SEC RET", "sécret", "sk-\x00SECRET"])
def test_an_api_key_a_header_cannot_carry_stops_start_up_without_showing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """httpx refused such a header and its message quoted the key, in the log and in every client's 502."""
    monkeypatch.setenv("PROBE_KEY", key.replace("\x00", "\x01"))  # (the environment takes no NUL: a control alike)
    path = write(
        tmp_path,
        "providers:\n  - {provider_id: v, provider_type: remote::vllm,"
        " config: {base_url: 'http://127.0.0.1:9', api_key_env: PROBE_KEY}}\n",
    )
    with pytest.raises(ProvidersFileError) as caught:
        build_registry(path, local_factory=lambda config: pytest.fail("no local entry"))
    assert "provider 'v': the API key in PROBE_KEY (api_key_env) holds a character" in caught.value.message
    assert "SECRET" not in caught.value.message and "cret" not in caught.value.message


def test_a_provider_error_never_shows_its_api_key() -> None:
    client = RemoteClient("v", "http://127.0.0.1:9", api_key="sk-SECRET")
    assert "sk-SECRET" not in client.fail("Illegal header value b'Bearer sk-SECRET'").message


def test_yaml_errors_say_where_and_missing_files_say_so(tmp_path: Path) -> None:
    with pytest.raises(ProvidersFileError, match=r"expected .* at line 3, column 1 \(while parsing a flow mapping\)"):
        read_providers_file(write(tmp_path, "providers:\n  - {provider_id: a, provider_type: x\n"))
    with pytest.raises(ProvidersFileError, match="cannot read providers file .*nope.yaml: No such file"):
        read_providers_file(tmp_path / "nope.yaml")


def test_the_example_file_is_valid() -> None:
    parsed, configs = read_providers_file(REPO_ROOT / "examples" / "providers.yaml")
    assert [p.provider_type for p in parsed.providers] == [
        "local::transformers",
        "remote::vllm",
        "remote::tgi",
        "remote::openai",
        "remote::hf-inference",
    ]
    assert configs[2].model_prefix == "tgi/"
    assert configs[4].base_url == "https://router.huggingface.co/v1"


def test_discovery_prefixes_declared_models_and_the_local_factory(serve, tmp_path: Path) -> None:
    stub = serve(
        {
            "GET /v1/models": StubReply(json=models_list("qwen", "llama")),
            "GET /info": StubReply(json=tgi_info("t/model")),
        }
    )
    registry, problems = build(
        tmp_path,
        f"""
providers:
  - {{provider_id: mine, provider_type: local::transformers, config: {{model: embedded, device: cpu}}}}
  - {{provider_id: v, provider_type: remote::vllm, config: {{base_url: "{stub.url}/v1"}}}}
  - {{provider_id: t, provider_type: remote::tgi, config: {{base_url: "{stub.url}", model_prefix: "tgi/"}}}}
models:
  - {{model_id: llama, provider_id: v}}
  - {{model_id: t/model, provider_id: t}}
""",
    )
    assert problems == []
    assert registry.models() == [
        ("mine", "SmolLM2-embedded"),
        ("mine", "embedded"),
        ("t", "tgi/t/model"),
        ("v", "llama"),
        ("v", "qwen"),
    ]
    local = registry.providers["mine"]
    assert (local.provider_id, local.config.model, local.config.device) == ("mine", "embedded", "cpu")
    provider, model = registry.resolve("tgi/t/model")
    assert isinstance(provider, TGIProvider) and provider.upstream(model) == "t/model"
    assert registry.default_model == "SmolLM2-embedded"


def test_a_declared_model_the_provider_does_not_serve_is_refused(serve, tmp_path: Path) -> None:
    stub = serve({"GET /v1/models": StubReply(json=models_list("qwen"))})
    with pytest.raises(
        ProvidersFileError, match=r"models\[0\]: provider 'v' does not serve model 'gpt-9' \(it serves: qwen\)"
    ):
        build(
            tmp_path,
            f"""
providers: [{{provider_id: v, provider_type: remote::vllm, config: {{base_url: "{stub.url}/v1"}}}}]
models: [{{model_id: gpt-9, provider_id: v}}]
""",
        )


def test_two_providers_claiming_one_name_must_use_a_prefix(serve, tmp_path: Path) -> None:
    stub = serve({"GET /v1/models": StubReply(json=models_list("qwen"))})
    with pytest.raises(ProvidersFileError, match="model 'qwen' is served by both 'a' and 'b'; set model_prefix"):
        build(
            tmp_path,
            f"""
providers:
  - {{provider_id: a, provider_type: remote::vllm, config: {{base_url: "{stub.url}/v1"}}}}
  - {{provider_id: b, provider_type: remote::openai, config: {{base_url: "{stub.url}/v1", api_key_env: null}}}}
""",
        )


def test_a_local_load_name_claimed_by_a_remote_is_a_conflict(serve, tmp_path: Path) -> None:
    stub = serve({"GET /v1/models": StubReply(json=models_list("embedded"))})
    with pytest.raises(
        ProvidersFileError, match="model 'embedded' is served by both 'local' and 'v'; set model_prefix"
    ):
        build(
            tmp_path,
            f"""
providers:
  - {{provider_id: local, provider_type: local::transformers, config: {{model: embedded}}}}
  - {{provider_id: v, provider_type: remote::vllm, config: {{base_url: "{stub.url}/v1"}}}}
""",
        )


def test_the_flag_s_local_model_named_like_a_remote_one_stops_start_up(serve, tmp_path: Path, monkeypatch) -> None:
    """No local entry in the file: --model's local model joins it; a name a remote serves would be taken in silence."""
    from playground import cli

    stub = serve({"GET /v1/models": StubReply(json=models_list("SmolLM2-embedded"))})
    path = write(
        tmp_path,
        f'providers:\n  - {{provider_id: v, provider_type: remote::vllm, config: {{base_url: "{stub.url}/v1"}}}}\n',
    )
    monkeypatch.setattr(cli, "make_local", lambda args, model, **load: FakeLocal(LocalConfig(model=model)))
    with pytest.raises(ProvidersFileError, match="model 'SmolLM2-embedded' is served by both 'v' and the local model"):
        cli.build_registry(cli.parse_args(["--providers", str(path)]))
    # the name --model gives it too: the remote took requests for "embedded" in silence
    stub.routes["GET /v1/models"] = StubReply(json=models_list("embedded"))
    with pytest.raises(ProvidersFileError, match="model 'embedded' is served by both 'v' and the local model"):
        cli.build_registry(cli.parse_args(["--providers", str(path)]))


def test_every_remote_provider_implements_the_protocol(serve) -> None:
    for cls in REMOTE_TYPES.values():
        provider = cls("p", cls.config_class(base_url="http://127.0.0.1:1"))
        assert isinstance(provider, Provider), cls
        assert provider.provider_type == cls.provider_type


def test_an_unreachable_provider_is_reported_and_its_declared_models_kept(tmp_path: Path, monkeypatch, caplog) -> None:
    monkeypatch.delenv("MISSING_KEY_FOR_TEST", raising=False)
    url = f"http://127.0.0.1:{free_port()}"
    text = f"""
providers:
  - {{provider_id: local, provider_type: local::transformers}}
  - {{provider_id: down, provider_type: remote::vllm, config: {{base_url: "{url}/v1", api_key_env: MISSING_KEY_FOR_TEST}}}}
models: [{{model_id: qwen, provider_id: down}}]
default_model: qwen
"""
    registry, problems = build(tmp_path, text)
    assert problems[0] == (
        "provider 'down': environment variable MISSING_KEY_FOR_TEST (api_key_env) is not set; "
        "requests go without an API key"
    )
    assert problems[1].startswith(f"provider 'down' failed: cannot connect to {url}/v1/models")
    assert problems[1].endswith("the models the file declares for it are registered unchecked")
    assert ("down", "qwen") in registry.models() and registry.default_model == "qwen"
    provider, model = registry.resolve("qwen")
    with pytest.raises(ProviderError) as caught:
        provider.generate(model, "hi", GenerateParameters())
    assert caught.value.status == 502 and "provider 'down' failed: cannot connect" in caught.value.message
    with caplog.at_level(logging.WARNING, logger="playground.providers"):
        load_registry(write(tmp_path, text), local_factory=FakeLocal)
    assert any("cannot connect" in r.getMessage() for r in caplog.records)


def test_a_provider_down_at_start_is_asked_for_its_models_again_when_they_are_asked_for(
    serve, tmp_path: Path, monkeypatch
) -> None:
    """A vLLM still loading its weights when the app starts: its models are served once it answers, no restart."""
    from playground.providers import registry as registry_module

    monkeypatch.setattr(registry_module, "RELIST_S", 0.0)
    stub = serve({"GET /v1/models": StubReply(status=503, json={"error": "loading"})})
    text = f'providers:\n  - {{provider_id: late, provider_type: remote::vllm, config: {{base_url: "{stub.url}/v1", model_prefix: "l/"}}}}\n'
    registry, problems = build(
        tmp_path,
        "providers:\n  - {provider_id: local, provider_type: local::transformers}\n"
        + text.removeprefix("providers:\n"),
    )
    assert problems and "late" in problems[0] and ("late", "l/qwen") not in registry.models()
    stub.routes["GET /v1/models"] = StubReply(json=models_list("qwen"))
    with pytest.raises(
        ModelError, match=r"no provider serves model 'l/qwen' .*the models of 'late' are not listed yet"
    ):
        registry.resolve("l/qwen")
    deadline = time.monotonic() + 10
    while ("late", "l/qwen") not in registry.models() and time.monotonic() < deadline:
        time.sleep(0.05)
    provider, model = registry.resolve("l/qwen")
    assert provider.provider_id == "late" and model == "l/qwen"
    with pytest.raises(ModelError) as caught:  # listed now: a wrong name is only that
        registry.resolve("l/nope")
    assert "not listed yet" not in caught.value.message


def test_default_model_must_be_served(tmp_path: Path) -> None:
    with pytest.raises(ProvidersFileError, match="default_model 'nope' is not served by any provider"):
        build(tmp_path, "providers: [{provider_id: l, provider_type: local::transformers}]\ndefault_model: nope\n")


def test_register_model_at_run_time(serve, tmp_path: Path) -> None:
    stub = serve({"GET /v1/models": StubReply(json=models_list("qwen", "late"))})
    registry, _ = build(
        tmp_path,
        f"""
providers:
  - {{provider_id: local, provider_type: local::transformers}}
  - {{provider_id: v, provider_type: remote::vllm, config: {{base_url: "{stub.url}/v1", model_prefix: "v/"}}}}
  - {{provider_id: o, provider_type: remote::openai, config: {{base_url: "{stub.url}/v1", api_key_env: null,
      discover_models: false}}}}
""",
    )
    stub.routes["GET /v1/models"] = StubReply(json=models_list("qwen", "late", "newer"))
    with pytest.raises(LoadingRefused, match="loading models at run time is disabled on this server"):
        registry.load("newer", "v")
    registry.loading = LoadingPolicy(allow_requests=True)  # the operator's --allow-model-loading
    assert registry.load("newer", "v") == "v/newer"
    assert registry.load("v/late", "v") == "v/late"
    assert isinstance(registry.resolve("v/newer")[0], VLLMProvider)
    with pytest.raises(ModelError, match=r"provider 'v' does not serve model 'gpt-9' \(it serves: qwen, late, newer\)"):
        registry.load("gpt-9", "v")
    assert registry.load("gpt-4o-mini", "o") == "gpt-4o-mini"  # discovery off: taken as declared
    assert registry.load("HuggingFaceTB/SmolLM2-360M", "local") == "HuggingFaceTB/SmolLM2-360M"
    with pytest.raises(ModelError, match=r"unknown provider 'x' \(configured: local, o, v\)"):
        registry.load("m", "x")
    with pytest.raises(ParameterError, match="model 'gpt-4o-mini' is already served by provider 'o'"):
        registry.load("gpt-4o-mini", "local")
    stub.stop()
    with pytest.raises(ProviderError, match="provider 'v' failed: cannot connect"):
        registry.load("more", "v")


def test_a_down_providers_config_model_is_registered_and_a_file_without_local_leaves_the_default_open(
    tmp_path: Path,
) -> None:
    """`config.model` counts as a `models:` entry while its server is down (it was left out: a 404); with no local
    entry and `default_model` null the default stays unset, for --model's local model (not a remote in silence)."""
    url = f"http://127.0.0.1:{free_port()}"
    text = f"""
providers:
  - {{provider_id: down, provider_type: remote::vllm, config: {{base_url: "{url}/v1", model: m1, model_prefix: "d/"}}}}
"""
    registry, problems = build(tmp_path, text)
    assert ("down", "d/m1") in registry.models() and registry.default_model is None
    assert problems[0].endswith("the models the file declares for it are registered unchecked")


def test_a_model_named_while_it_loads_is_said_to_be_loading() -> None:
    """A turn sent while the picker's model was loading read "no provider serves model 'x' (served: ...)", as if it
    did not exist; the load then succeeded."""
    gate, entered = threading.Event(), threading.Event()

    class Slow(FakeProvider):
        def add_model(self, model: str, policy: LoadingPolicy | None = None) -> str:
            entered.set()
            gate.wait(30)
            return super().add_model(model, policy)

    registry = Registry([Slow(capabilities=Capabilities(model_loading=True), models=("a",), addable=("org/b",))])
    registry.loading = LoadingPolicy(allow_requests=True)
    loading = threading.Thread(target=registry.load, args=("org/b", "fake"))
    loading.start()
    entered.wait(30)
    with pytest.raises(ModelError, match=r"^model 'org/b' is still loading: send again once it is served$"):
        registry.resolve("org/b")
    gate.set()
    loading.join(30)
    assert registry.resolve("org/b")[1] == "org/b"
    with pytest.raises(ModelError, match="no provider serves model 'org/c'"):
        registry.resolve("org/c")


@pytest.mark.parametrize(
    ("failure", "said"),
    [
        (ModelError("no such model folder or file: /gone"), "no such model folder or file: /gone"),
        (
            OSError("We couldn't connect to the hub\nmore lines"),
            "cannot load model 'org/m': OSError: We couldn't connect",
        ),
    ],
)
def test_a_local_model_that_cannot_load_names_the_file_and_entry(tmp_path: Path, failure: Exception, said: str) -> None:
    """The message named the model alone; a model that cannot load is no mistake in the file (ModelError, exit 1)."""
    path = write(
        tmp_path, "providers:\n  - {provider_id: mine, provider_type: local::transformers, config: {model: org/m}}\n"
    )

    def local_factory(config: LocalConfig) -> Provider:
        raise failure

    with pytest.raises(ModelError) as raised:
        load_registry(path, local_factory=local_factory)
    assert not isinstance(raised.value, ProvidersFileError)
    assert raised.value.message.startswith(f"{path}: provider 'mine': {said}")
    assert "\n" not in raised.value.message and str(raised.value) == raised.value.message
