"""Structured Playground: flags -> providers -> one FastAPI app (HTTP API + Gradio UI) -> uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playground.providers.config import LocalConfig
    from playground.providers.loading import LoadingPolicy
    from playground.providers.local import LocalProvider
    from playground.providers.registry import Registry

log = logging.getLogger("playground")
MIN_COMPILE_MEMORY_MB = 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Constrained-decoding playground: Gradio UI at / and TGI/OpenAI-compatible API on one port.",
    )
    parser.add_argument(
        "--model",
        default="embedded",
        help="default model: 'embedded' (SmolLM2-135M GGUF), a hub id, a local folder or a .gguf file (default: embedded)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind; 0.0.0.0 for all (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=7860, help="port for the UI and the API (default: 7860)")
    parser.add_argument("--providers", metavar="FILE", help="YAML file of remote providers and the models they serve")
    parser.add_argument(
        "--custom-modules",
        metavar="MOD[,MOD]",
        default="",
        help="Python modules to import at start; they register logits processors",
    )
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        default=os.environ.get("PLAYGROUND_API_KEY"),
        help="require the key on the whole server except /health: API routes take "
        "`Authorization: Bearer KEY`, the UI asks for a login (any user name, KEY as the "
        "password) (default: $PLAYGROUND_API_KEY)",
    )
    parser.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")
    parser.add_argument(
        "--dtype", default=None, help="torch dtype, e.g. bfloat16 or float32 (default: bf16 on CUDA, fp32 else)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("PLAYGROUND_THREADS", "1")),
        help="torch CPU threads (default: $PLAYGROUND_THREADS or 1)",
    )
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="allow hub models that ship their own code (default: off)"
    )
    parser.add_argument(
        "--compile-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="time limit for compiling one constraint; the compile is stopped past it (default: 10)",
    )
    parser.add_argument(
        "--compile-memory",
        type=_megabytes,
        default=1024,
        metavar="MB",
        help="memory one compile may take beyond a warm compile worker; the compile is stopped past it (default: 1024)",
    )
    parser.add_argument(
        "--compile-workers",
        type=_positive,
        default=2,
        metavar="N",
        help="compile worker processes per model (default: 2)",
    )
    parser.add_argument(
        "--prefix-cache-tokens",
        type=_non_negative,
        default=4096,
        metavar="N",
        help="KV cache of recent sequences kept per local model, in tokens, so chat turns, retries and the "
        "next-token view prefill only what is new; 0 turns it off (default: 4096)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=_positive,
        default=32,
        metavar="N",
        help="rows that decode together in one batch per local model (a best_of request counts each candidate); "
        "more requests wait to join between steps (default: 32)",
    )
    parser.add_argument(
        "--cpu-batch-weights",
        choices=("auto", "on", "off"),
        default="auto",
        help="on the CPU, keep a second copy of a float32 model's linear weights in oneDNN's blocked layout, "
        "which multiplies a batch's rows about 1.3x faster; auto: when the copy takes at most an eighth of "
        "the machine's (or its container's) memory (default: auto)",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=256, help="max_new_tokens when a request leaves it unset (default: 256)"
    )
    parser.add_argument(
        "--max-concurrent",
        type=_positive,
        default=8,
        metavar="N",
        help="API requests that work at once (a local model decodes them in one batch); more wait in the queue "
        "(default: 8)",
    )
    parser.add_argument(
        "--max-queue",
        type=_non_negative,
        default=16,
        metavar="N",
        help="API requests that may wait for a turn; past that the server answers 429 with Retry-After (default: 16)",
    )
    parser.add_argument(
        "--allow-model-loading",
        action="store_true",
        help="let requests (the UI's model picker, POST /v1/models) load more models; on a host other than "
        "127.0.0.1 only with --api-key (default: off; only the operator's --model and providers file load)",
    )
    parser.add_argument(
        "--adapters",
        metavar="ID[,ID]",
        type=_names,
        default=(),
        help="PEFT adapters (hub ids or folders) that requests may name in adapter_id (default: none)",
    )
    parser.add_argument(
        "--max-models",
        type=_positive,
        default=4,
        metavar="N",
        help="most models the local provider holds when requests may load more (default: 4)",
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="/health answers 503 while running work has made no progress for this long (default: 60)",
    )
    parser.add_argument(
        "--forwarded-allow-ips",
        default=None,
        metavar="IPS",
        help="proxies (comma-separated addresses, or *) whose X-Forwarded-For names the client; "
        "by default nobody's, so clients are told apart by their own address",
    )
    parser.add_argument("--no-ui", action="store_true", help="serve only the HTTP API")
    return parser.parse_args(argv)


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _megabytes(text: str) -> int:
    value = _positive(text)
    if value < MIN_COMPILE_MEMORY_MB:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_COMPILE_MEMORY_MB} (MB), got {value}")
    return value


def load_plugins(args: argparse.Namespace) -> None:
    """Custom modules and entry points register processors; a failure stops start-up with exit code 2."""
    from playground.processors import PluginLoadError, load_custom_modules, load_entry_points

    modules = [m for m in args.custom_modules.split(",") if m.strip()]
    if modules and not getattr(args, "allow_custom_modules", True):
        log.warning("ignoring --custom-modules on a Hugging Face Space")
        modules = []
    try:
        added = load_custom_modules(modules) + load_entry_points()
    except PluginLoadError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        raise SystemExit(2) from None
    if added:
        log.info("registered processors: %s", ", ".join(added))


def build_registry(args: argparse.Namespace) -> Registry:
    """The local engine on --model, or the providers of --providers (whose local entries load their own)."""
    from playground.providers.registry import Registry

    if not args.providers:
        local = make_local(args, args.model)
        registry = Registry([local], default_model=local.list_models()[0])
        serve_load_name(registry, local, args.model)
        return registry
    from playground.providers.config import load_registry

    locals_made: list[tuple[LocalProvider, str]] = []

    def local_factory(config: LocalConfig) -> LocalProvider:
        local = make_local(
            args,
            config.model,
            device=config.device or args.device,
            dtype=config.dtype or args.dtype,
            trust_remote_code=config.trust_remote_code,
        )
        locals_made.append((local, config.model))
        return local

    registry = load_registry(args.providers, local_factory=local_factory)
    if not locals_made:
        local = make_local(args, args.model)
        registry.add_provider(local)
        locals_made.append((local, args.model))
        registry.default_model = registry.default_model or local.list_models()[0]
    for local, name in locals_made:
        serve_load_name(registry, local, name)
    return registry


def make_local(args: argparse.Namespace, model: str, **load: Any) -> LocalProvider:
    """A local provider serving `model`, loaded with the flags (a providers file's entry may override some)."""
    from playground.providers.local import LocalOptions
    from playground.providers.local import make_local as local_provider

    return local_provider(LocalOptions.from_flags(args, **load), model)


def serve_load_name(registry: Registry, local: LocalProvider, name: str) -> None:
    """Let requests name a local model as the operator did (`--model embedded`), unless the name is taken."""
    if name not in {model for _, model in registry.models()}:
        registry.register_model(name, local.provider_id)


def loading_policy(args: argparse.Namespace) -> LoadingPolicy:
    """What requests may load: the operator's flags (a Space turns loading and local paths off)."""
    from playground.providers.loading import LoadingPolicy

    return LoadingPolicy(
        allow_requests=args.allow_model_loading,
        allow_local_paths=getattr(args, "allow_local_paths", True),
        max_models=args.max_models,
    )


def ui_options(args: argparse.Namespace) -> dict[str, Any]:
    """What the UI may do here: on a Space no local paths and no loading of more models."""
    from playground.providers.local import LocalOptions
    from playground.ui.state import UISettings

    settings = UISettings(
        allow_local_paths=getattr(args, "allow_local_paths", True),
        allow_model_loading=args.allow_model_loading,
        base_url=f"http://{args.host}:{args.port}",
        local=LocalOptions.from_flags(args),
    )
    return {"settings": settings}


def main(argv: list[str] | None = None) -> None:
    started = time.perf_counter()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from playground.settings import apply_space_settings

    args = apply_space_settings(parse_args(argv))
    import torch

    torch.set_num_threads(args.threads)
    load_plugins(args)
    from playground.errors import PlaygroundError
    from playground.providers.loading import loading_problem

    problem = loading_problem(args.allow_model_loading, args.host, args.api_key)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    try:
        registry = build_registry(args)
    except PlaygroundError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        raise SystemExit(1) from None
    registry.loading = loading_policy(args)
    import uvicorn

    from playground.server import create_app
    from playground.server.admission import AdmissionLimits

    ui = not args.no_ui
    app = create_app(
        registry,
        api_key=args.api_key or None,
        ui=ui,
        ui_options=ui_options(args) if ui else None,
        admission=AdmissionLimits(max_running=args.max_concurrent, max_queue=args.max_queue),
        stall_timeout_s=args.stall_timeout,
    )
    log.info("ready in %.1f s: http://%s:%d (API docs at /docs)", time.perf_counter() - started, args.host, args.port)
    uvicorn.run(app, **uvicorn_options(args))


def uvicorn_options(args: argparse.Namespace) -> dict[str, Any]:
    """uvicorn's settings: X-Forwarded-For is believed only from the proxies --forwarded-allow-ips names
    (uvicorn believes loopback by default: rotating the header there would reset the key-guess limiter)."""
    trusted = args.forwarded_allow_ips
    return {
        "host": args.host,
        "port": args.port,
        "log_level": "info",
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": trusted or None,
    }


if __name__ == "__main__":
    main()
