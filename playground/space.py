"""Where the app runs decides some settings: on a Hugging Face Space the platform, not the CLI, does."""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

SPACE_DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
# A Space's container is reached only through the platform's proxies, on private networks: their X-Forwarded-For
# names the visitor (uvicorn takes the last address not among these, which a visitor's own header cannot forge);
# believing nobody's would make every visitor one client, sharing each per-client limit. $PLAYGROUND_FORWARDED_ALLOW_IPS
# replaces the list.
SPACE_PROXIES = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,127.0.0.0/8,::1,fc00::/7"
TRUE_VALUES = {"1", "true", "yes", "on"}
MAX_THREADS = 8
PERSISTENT = Path("/data")  # where a Space with persistent storage mounts it
# Defaults per kind of Space hardware, each stated (with its reason) in the card, spaces/README.md.
# torch threads are the container's vCPUs (at most MAX_THREADS) everywhere; $PLAYGROUND_THREADS wins.
HARDWARE_DEFAULTS: dict[str, dict[str, Any]] = {
    # CPU Basic (2 vCPU, 16 GB) and CPU Upgrade: the decode and the compiles share few cores
    "cpu": {
        "cpu_batch_weights": "auto",
        "compile_workers": 1,
        "max_batch_size": 8,
        "max_concurrent": 4,
        "max_queue": 16,
    },
    # ZeroGPU: each request decodes alone in its own lease (playground/providers/local.py); leases queue at the hub
    "zero-gpu": {
        "cpu_batch_weights": "off",
        "compile_workers": 1,
        "max_batch_size": 8,
        "max_concurrent": 4,
        "max_queue": 16,
    },
    # a dedicated GPU: the batch is cheap to widen
    "gpu": {
        "cpu_batch_weights": "off",
        "compile_workers": 2,
        "max_batch_size": 32,
        "max_concurrent": 8,
        "max_queue": 16,
    },
}


def on_space(env: Mapping[str, str] = os.environ) -> bool:
    """A Space sets SPACE_ID (and SYSTEM=spaces) in every container it runs."""
    return bool(env.get("SPACE_ID")) or env.get("SYSTEM") == "spaces"


def hardware(env: Mapping[str, str] = os.environ, cuda: bool | None = None) -> str:
    """The kind of hardware, as HARDWARE_DEFAULTS names it (`cuda` is asked of torch when not given)."""
    if zero_gpu(env):
        return "zero-gpu"
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    return "gpu" if cuda else "cpu"


def container_cpus() -> int:
    """The vCPUs this container may use: its cgroup's CPU quota when it has one (a Space's is), else its CPU set."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            return max(1, int(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def hardware_defaults(kind: str, env: Mapping[str, str] = os.environ, cpus: int | None = None) -> dict[str, Any]:
    """The settings HARDWARE_DEFAULTS gives `kind`, with the threads this container has."""
    settings = dict(HARDWARE_DEFAULTS[kind])
    if not env.get("PLAYGROUND_THREADS"):
        settings["threads"] = min(MAX_THREADS, cpus or container_cpus())
    return settings


def storage_dirs(env: Mapping[str, str] = os.environ, persistent: Path = PERSISTENT) -> dict[str, str]:
    """Cache folders in the Space's persistent storage when it has some, so the first start alone downloads the
    model and converts a GGUF; without it, the container's own cache (a new container converts again).
    The operator's own PLAYGROUND_CACHE and HF_HOME win."""
    if not (persistent.is_dir() and os.access(persistent, os.W_OK)):
        return {}
    dirs = {"PLAYGROUND_CACHE": str(persistent / "structured-playground"), "HF_HOME": str(persistent / ".huggingface")}
    return {key: value for key, value in dirs.items() if not env.get(key)}


def use_persistent_storage(env: MutableMapping[str, str] = os.environ) -> None:
    """On a Space, point the caches at its persistent storage (before huggingface_hub reads HF_HOME)."""
    if on_space(env):
        env.update(storage_dirs(env))


def space_overrides(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Settings a Space imposes: its port on all interfaces, a hub model, no code, files or models from users."""
    port_text = env.get("PORT") or env.get("GRADIO_SERVER_PORT") or "7860"
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"PORT must be an integer, got {port_text!r}") from None
    if not 1 <= port <= 65535:  # (bind() refused it with a traceback)
        raise ValueError(f"PORT must be a port number from 1 to 65535, got {port}")
    return {
        "host": "0.0.0.0",
        "port": port,
        "model": env.get("PLAYGROUND_MODEL", "").strip() or SPACE_DEFAULT_MODEL,  # (set but blank: unset)
        "allow_custom_modules": False,
        "allow_local_paths": False,
        # every visitor shares the Space's memory: loading more models is the operator's call
        "allow_model_loading": False,
        # a cold start downloads or converts the model for tens of seconds: the page is served meanwhile
        "load_in_background": True,
        "forwarded_allow_ips": _proxies(env),
    }


def _proxies(env: Mapping[str, str]) -> str | None:
    """The proxies whose X-Forwarded-For names the visitor: $PLAYGROUND_FORWARDED_ALLOW_IPS (set but empty: nobody's),
    checked as the --forwarded-allow-ips flag is, else SPACE_PROXIES."""
    from playground.options import addresses

    text = env.get("PLAYGROUND_FORWARDED_ALLOW_IPS")
    if text is None:
        return SPACE_PROXIES
    if not text.strip():
        return None
    try:
        return addresses(text)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"PLAYGROUND_FORWARDED_ALLOW_IPS: {exc}") from None


def _identity(fn: F) -> F:
    """Off ZeroGPU, GPU work needs no wrapping."""
    return fn


def zero_gpu(env: Mapping[str, str] = os.environ) -> bool:
    """ZeroGPU hardware announces itself with SPACES_ZERO_GPU."""
    return env.get("SPACES_ZERO_GPU", "").strip().lower() in TRUE_VALUES


def gpu_decorator(env: Mapping[str, str] = os.environ) -> Callable[[F], F]:
    """`spaces.GPU` on ZeroGPU, so GPU work gets a device lease; the identity anywhere else.

    Our repository's own `spaces/` folder is a namespace package without `GPU`, so an import that
    finds it (and not Hugging Face's package) counts as absent.
    """
    if not zero_gpu(env):
        return _identity
    try:
        module = importlib.import_module("spaces")
    except ImportError:
        return _identity
    decorator = getattr(module, "GPU", None)
    return decorator if callable(decorator) else _identity


def import_spaces_first(env: Mapping[str, str] = os.environ) -> None:
    """On ZeroGPU, Hugging Face's `spaces` is imported before the model loads: it patches torch so that the
    model goes to "cuda" at start-up (held in host memory) and reaches the GPU inside each lease."""
    gpu_decorator(env)


def leases_gpu(decorator: Callable[[F], F]) -> bool:
    """Whether `decorator` (from gpu_decorator) leases the GPU per call: then work must run inside its calls."""
    return decorator is not _identity


def apply_space_settings(args: Any, env: Mapping[str, str] = os.environ, cuda: bool | None = None) -> Any:
    """On a Space the platform's settings, and the defaults of its hardware, replace the CLI's
    (argparse Namespace in, new one out)."""
    if not on_space(env):
        return args
    settings = {**hardware_defaults(hardware(env, cuda), env), **space_overrides(env)}
    return type(args)(**{**vars(args), **settings})
