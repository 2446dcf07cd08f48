"""The composition root: flags -> providers -> one FastAPI app (HTTP API + Gradio UI) -> uvicorn.

The console script `structured-playground` and `python app.py` (Spaces) both run `main`.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn

from playground import options
from playground.options import LocalOptions, ServerOptions, add_flags

if TYPE_CHECKING:
    from playground.providers.config import LocalConfig
    from playground.providers.loading import LoadingPolicy
    from playground.providers.local import LocalProvider
    from playground.providers.registry import Registry

log = logging.getLogger("playground")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, one per field of ServerOptions and LocalOptions."""
    parser = argparse.ArgumentParser(
        prog="structured-playground",
        description="Constrained-decoding playground: Gradio UI at / and TGI/OpenAI-compatible API on one port.",
    )
    add_flags(parser, ServerOptions, LocalOptions)
    return parser.parse_args(argv)


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
        background = getattr(args, "load_in_background", False)
        local = make_local(args, None if background else args.model)
        if background:  # a Space: the page is served while the model downloads or converts
            registry = Registry([])
            registry.startup = local.load_in_background(args.model, lambda _: registry.add_provider(local))
            registry.add_provider(local)
        else:
            registry = Registry([local])
        registry.default_model = local.list_models()[0]
        serve_load_name(registry, local, args.model)
        return registry
    from playground.providers.config import ProvidersFileError, load_registry

    locals_made: list[tuple[LocalProvider, str]] = []

    def local_factory(config: LocalConfig) -> LocalProvider:
        local = make_local(
            args,
            config.model,
            device=config.device or args.device,
            dtype=config.dtype or args.dtype,
            trust_remote_code=config.trust_remote_code,
            reasoning=config.reasoning or args.reasoning,
        )
        locals_made.append((local, config.model))
        return local

    registry = load_registry(args.providers, local_factory=local_factory)
    if not locals_made:
        local = make_local(args, args.model)
        served = {model: provider_id for provider_id, model in registry.models()}
        # the local model would take the remote one's requests in silence, or (its --model name) lose them
        clash = next((model for model in [*local.list_models(), args.model] if model in served), None)
        if clash is not None:
            raise ProvidersFileError(
                f"{args.providers}: model {clash!r} is served by both {served[clash]!r} and the local model "
                f"(--model {args.model}); set model_prefix in the config of {served[clash]!r}"
            )
        registry.add_provider(local)
        locals_made.append((local, args.model))
        registry.default_model = registry.default_model or local.list_models()[0]
    for local, name in locals_made:
        serve_load_name(registry, local, name)
    return registry


def make_local(args: argparse.Namespace, model: str | None, **load: Any) -> LocalProvider:
    """A local provider serving `model`, loaded with the flags (a providers file's entry may override some)."""
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
    from playground.ui.state import UISettings

    settings = UISettings(
        allow_local_paths=getattr(args, "allow_local_paths", True),
        allow_model_loading=args.allow_model_loading,
        base_url=f"http://{args.host}:{args.port}",
        local=LocalOptions.from_flags(args),
    )
    return {"settings": settings}


def _stop(message: str, code: int) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def device_problem(device: str | None) -> str | None:
    """Why --device cannot work here (a name torch does not know, no CUDA or MPS in this build or machine)."""
    problem = options.device_problem(device)
    return f"--device {device!r}: {problem}" if problem else None


def dtype_problem(dtype: str | None) -> str | None:
    """Why --dtype cannot work: a name torch has no dtype for."""
    problem = options.dtype_problem(dtype)
    return f"--dtype {dtype!r}: {problem}" if problem else None


def adapters_problem(adapters: tuple[str, ...] | None) -> str | None:
    """Why an --adapters entry cannot work, found at start as vLLM finds a LoRA module's (each was accepted and
    listed, and every request naming it failed): a path to no folder, a folder with no adapter in it, a name that
    is no hub id."""
    from playground.models.adapters import adapter_problem

    for adapter in adapters or ():
        problem = adapter_problem(adapter)
        if problem:
            return f"--adapters {adapter!r}: {problem}"
    return None


def reasoning_problem(setting: str) -> str | None:
    """Why --reasoning names no family (START,END and auto/none are read as they are)."""
    from playground.decoding.reasoning_formats import setting_problem

    problem = setting_problem(setting)
    return f"--reasoning {setting!r}: {problem}" if problem else None


def providers_file_problem(path: str | None) -> None:
    """A providers file's mistake stops start-up at once (exit code 2), before torch and the models load (~6 s)."""
    if not path:
        return
    from playground.providers.config import ProvidersFileError, read_providers_file

    try:
        read_providers_file(path)
    except ProvidersFileError as exc:
        _stop(exc.message, 2)


def main(argv: list[str] | None = None) -> None:
    started = time.perf_counter()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from playground.space import apply_space_settings, import_spaces_first, use_persistent_storage

    use_persistent_storage()
    try:
        args = apply_space_settings(parse_args(argv))
    except ValueError as exc:  # a Space's environment (PORT=abc)
        _stop(str(exc), 2)
    import_spaces_first()
    providers_file_problem(args.providers)
    import torch

    torch.set_num_threads(args.threads)
    load_plugins(args)
    from playground.errors import PlaygroundError, first_line
    from playground.providers.loading import loading_problem

    problem = (
        loading_problem(args.allow_model_loading, args.host, args.api_key)
        or device_problem(args.device)
        or dtype_problem(args.dtype)
        or reasoning_problem(args.reasoning)
        or adapters_problem(args.adapters)
    )
    if problem:
        _stop(problem, 2)
    try:  # before the model loads: a port in use or a host this machine does not have is said at once
        sock = bind(args.host, args.port)
    except OSError as exc:
        _stop(f"cannot bind {args.host}:{args.port}: {exc}", 1)
    args.port = sock.getsockname()[1]  # (--port 0: the one the system chose)
    try:
        registry = build_registry(args)
    except PlaygroundError as exc:  # a providers file's mistake is the operator's, as a flag's: exit code 2
        _stop(exc.message, 2 if exc.error_type == "config" else 1)
    except (OSError, ValueError, RuntimeError, ImportError) as exc:  # a model that cannot load: one line, no wall
        _stop(f"cannot load the model: {type(exc).__name__}: {first_line(exc)}", 1)
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
        allowed_hosts=allowed_hosts(args),
        cors_origins=[o.strip() for o in (args.cors_allow_origin or "").split(",") if o.strip()] or None,
    )
    if registry.startup is not None:  # after the page is built: on 2 vCPU the load would slow its build
        registry.startup.start()
    shown = f"[{args.host}]" if ":" in args.host else args.host  # (an IPv6 address, as a URL writes it)
    log.info("ready in %.1f s: http://%s:%d (API docs at /docs)", time.perf_counter() - started, shown, args.port)
    uvicorn.Server(uvicorn.Config(app, **uvicorn_options(args))).run(sockets=[sock])


SHUTDOWN_GRACE_S = 5


def bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound as uvicorn binds one (IPv6 for an address with a colon); it listens once uvicorn
    starts, so until then a client is refused, not kept waiting."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def allowed_hosts(args: argparse.Namespace) -> list[str] | None:
    """The Host names the server answers to (None: any): --allowed-hosts, else its loopback names where it binds one."""
    from playground.providers.loading import LOOPBACK_NAMES, is_loopback
    from playground.server.guards import host_name

    if args.allowed_hosts:
        names = [n for n in args.allowed_hosts.split(",") if n.strip()]
        return None if "*" in (n.strip() for n in names) else names
    if not is_loopback(args.host):
        return None
    bound = host_name(args.host)  # (127.0.0.2: its own address besides the usual names)
    return [*LOOPBACK_NAMES, *([bound] if bound not in LOOPBACK_NAMES else [])]


def uvicorn_options(args: argparse.Namespace) -> dict[str, Any]:
    """uvicorn's settings: X-Forwarded-For is believed only from the proxies --forwarded-allow-ips names
    (uvicorn believes loopback by default: rotating the header there would reset the key-guess limiter).

    On SIGTERM or Ctrl-C, open connections get SHUTDOWN_GRACE_S to finish: uvicorn would otherwise wait for
    every one, and an open browser tab keeps Gradio's heartbeat stream open for as long as it stays open.
    """
    trusted = args.forwarded_allow_ips
    return {
        "host": args.host,
        "port": args.port,
        "log_level": "info",
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": trusted or None,
        "timeout_graceful_shutdown": SHUTDOWN_GRACE_S,
    }
