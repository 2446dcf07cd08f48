"""Hub models for requests: from the cache, else fetched file by file, every call under a time limit.

huggingface_hub's snapshot_download asks the hub for the repository and its file tree without a
timeout, so a hub that accepts connections and never answers would hold a request (and every model
load behind it) for ever; here each call has `timeout_s`.
"""

from __future__ import annotations

import fnmatch
import os

from playground.errors import ModelError, first_line

# What a request's hub load fetches: configs, tokenizers and safetensors weights; no pickles, no code.
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]
TRUE_VALUES = ("1", "true", "yes", "on")


def looks_like_path(name: str) -> bool:
    """A local path by its spelling alone: absolute, relative with a dot, home, a .gguf, or deeper than org/name."""
    return (
        name.startswith(("/", ".", "~"))
        or name.endswith(".gguf")
        or "\\" in name
        or name.count("/") > 1
        or name.endswith("/")
    )


def hub_snapshot(repo_id: str, *, timeout_s: float = 10.0) -> str:
    """A hub model's folder: from the local cache, else fetched once; never a folder of this machine's own.

    Fails at once when offline, and within `timeout_s` per call when the hub cannot be reached, naming which.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return snapshot_download(repo_id, allow_patterns=HUB_FILES, local_files_only=True)
    except HFValidationError as exc:
        raise ModelError(f"{repo_id!r} is not a hub id (org/name): {first_line(exc)}") from None
    except LocalEntryNotFoundError:
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in TRUE_VALUES:
            raise ModelError(
                f"model {repo_id!r} is not in the local Hugging Face cache (this server is offline)"
            ) from None
    return _fetch(repo_id, timeout_s)


def _fetch(repo_id: str, timeout_s: float) -> str:
    """The repository's files that HUB_FILES names, at one commit, each call time-limited."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        info = HfApi().model_info(repo_id, timeout=timeout_s)
        names = [s.rfilename for s in info.siblings or [] if any(fnmatch.fnmatch(s.rfilename, p) for p in HUB_FILES)]
        for name in names:
            hf_hub_download(repo_id, name, revision=info.sha, etag_timeout=timeout_s)
        return snapshot_download(repo_id, revision=info.sha, allow_patterns=HUB_FILES, local_files_only=True)
    except (RepositoryNotFoundError, GatedRepoError):
        raise ModelError(f"no model {repo_id!r} on the Hugging Face hub (or it is private or gated)") from None
    except Exception as exc:  # httpx's timeouts and connection errors, OSError, the hub's HTTP errors
        raise ModelError(
            f"model {repo_id!r} is not in the local Hugging Face cache and the hub cannot be reached "
            f"within {timeout_s:g} s: {first_line(exc)}"
        ) from None
