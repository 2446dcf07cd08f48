"""Loading a model at run time is the operator's call: who may, what names, how many, and no path probing.

Every check here looks at the name's spelling and the policy only, never at the file system, so a
refusal reads the same whether or not a path exists.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from playground.errors import PlaygroundError
from playground.models.hub import looks_like_path
from playground.options import SERVER

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address: all of 127.0.0.0/8 (127.0.0.2 is this machine too) and ::1."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


DISABLED = "loading models at run time is disabled on this server (the operator enables it with --allow-model-loading)"


class LoadingRefused(PlaygroundError):
    """A request asked to load a model or adapter that this server's policy does not allow."""

    status = 403
    error_type = "forbidden"


@dataclass(frozen=True)
class LoadingPolicy:
    """What requests (the UI's model picker, POST /v1/models) may load; the operator's --model always loads."""

    allow_requests: bool = False
    allow_local_paths: bool = True
    max_models: int = SERVER.max_models


def check_request(policy: LoadingPolicy, name: str) -> None:
    """Refuse a request's load before anything is read or fetched; the same answer for any path."""
    if not policy.allow_requests:
        raise LoadingRefused(DISABLED)
    if not policy.allow_local_paths and looks_like_path(name):
        raise LoadingRefused("loading local paths is disabled on this server; give a hub id (org/name)")


def check_room(policy: LoadingPolicy, loaded: int) -> None:
    """One more model must fit under the operator's cap."""
    if loaded >= policy.max_models:
        raise LoadingRefused(
            f"this server already holds {loaded} models, its limit (--max-models {policy.max_models}); "
            "loading more is refused"
        )


def load_key(name: str) -> str:
    """One key per model: every spelling of a folder or file is its resolved path; a name not written as a path is
    a hub id, as it is, even where a folder of that name exists (a request cannot reach one by leaving out `./`)."""
    if name in ("", "embedded"):
        return "embedded"
    if looks_like_path(name):
        try:
            return str(Path(name).expanduser().resolve())
        except (ValueError, RuntimeError, OSError):  # a NUL byte, `~nobody/`, a symlink loop: no folder, as written
            return name
    return name


def operator_key(name: str) -> str:
    """The key of the operator's model (--model, the providers file): a name that is a folder here is that folder,
    as transformers reads it; a request's name is one only by its spelling (load_key)."""
    key = load_key(name)
    if key == name != "embedded" and os.path.exists(name):
        return str(Path(name).resolve())
    return key


def loading_problem(allowed: bool, host: str, api_key: str | None) -> str | None:
    """Why loading may not be switched on here: never for visitors without a key on a public interface."""
    if allowed and not is_loopback(host) and not api_key:
        return (
            f"--allow-model-loading on {host} (not a loopback address) needs --api-key: "
            "without a key any visitor could load models"
        )
    return None
