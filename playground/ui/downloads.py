"""Files the UI writes for the browser to download (a session, an evaluation's rows), kept bounded.

Each export used to stay in /tmp for good: Gradio's delete_cache removes only the copies in its own cache, so
exports piled up (five calls with a 3 MiB constraint left 16 MB). Here the server process writes them into one
folder of its own inside Gradio's cache, which Gradio then serves without copying them; before each write,
exports older than MAX_AGE_S go, then the writing client's own oldest while it would hold more than its share
(1/SHARES of the files and bytes: one client's flood pushes out its own exports, not other users'), then the oldest
of all while more than MAX_FILES or MAX_BYTES would stay. Gradio
deletes the files it served when the server stops; a process that was killed leaves its folder, which the next
one removes once it has expired.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PREFIX = "playground-downloads-"
MAX_AGE_S = 600.0  # as long as Gradio keeps uploads (create_ui's delete_cache): time enough to download
MAX_FILES = 256  # exports at once, in all
MAX_BYTES = 256 << 20  # a session file is at most a 4 MiB call body plus the conversation
SHARES = 8  # one client holds at most this fraction of the bounds: 32 exports, 32 MiB


class Downloads:
    """One server process's exports: one subfolder per export, the whole folder bounded by age, count and size."""

    def __init__(
        self,
        cache: str | Path,
        *,
        max_age_s: float = MAX_AGE_S,
        max_files: int = MAX_FILES,
        max_bytes: int = MAX_BYTES,
        shares: int = SHARES,
    ) -> None:
        self.cache = Path(cache)
        self.max_age_s = max_age_s
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.shares = shares
        self._root: Path | None = None
        self._lock = threading.Lock()
        self._owners: dict[Path, str] = {}  # each export's client (this process's exports only)

    def write(self, files: dict[str, str], client: str = "") -> list[str]:
        """Write one export (its files by name, UTF-8) for `client` (its address) and return their paths, after
        pruning the older ones."""
        size = sum(len(text.encode("utf-8")) for text in files.values())
        with self._lock:
            root = self._folder()
            self._prune(root, size, client)
            export = Path(tempfile.mkdtemp(prefix="export-", dir=root))
            self._owners[export] = client
            paths = [export / name for name in files]
            for path, text in zip(paths, files.values()):
                path.write_text(text, encoding="utf-8")
        return [str(path) for path in paths]

    def _folder(self) -> Path:
        """This process's folder, made at its first export; stale folders of processes gone before are removed."""
        if self._root is None or not self._root.is_dir():
            self.cache.mkdir(parents=True, exist_ok=True)
            for stale in self.cache.glob(f"{PREFIX}*"):  # untouched for MAX_AGE_S: every export in it has expired
                if _measure(stale)[0] < time.time() - self.max_age_s:
                    shutil.rmtree(stale, ignore_errors=True)
            self._root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=self.cache))
        return self._root

    def _prune(self, root: Path, incoming: int, client: str) -> None:
        """Delete expired exports, then `client`'s oldest while the new one would not fit in its share, then the
        oldest of all while it would not fit under the bounds."""
        now = time.time()
        exports = sorted(_measure(path) for path in root.iterdir())
        kept = []
        for created, size, path in exports:
            if now - created > self.max_age_s:
                self._delete(path)
            else:
                kept.append((size, path))
        self._owners = {path: owner for path, owner in self._owners.items() if path.exists()}
        own = [(size, path) for size, path in kept if self._owners.get(path) == client]
        files, total = max(1, self.max_files // self.shares), sum(size for size, _ in own) + incoming
        while own and (len(own) >= files or total > self.max_bytes // self.shares):
            size, path = own.pop(0)
            total -= size
            kept.remove((size, path))
            self._delete(path)
        total = sum(size for size, _ in kept) + incoming
        while kept and (len(kept) >= self.max_files or total > self.max_bytes):
            size, path = kept.pop(0)
            total -= size
            self._delete(path)

    def _delete(self, export: Path) -> None:
        shutil.rmtree(export, ignore_errors=True)
        self._owners.pop(export, None)


def _measure(export: Path) -> tuple[float, int, Path]:
    """When an export was written, and its bytes (Gradio may be deleting its files meanwhile)."""
    try:
        return export.stat().st_mtime, sum(f.stat().st_size for f in export.iterdir()), export
    except OSError:
        return 0.0, 0, export


def client_of(request: Any) -> str:
    """The address of the client behind a Gradio event's request (`gr.Request`), as the API tells clients apart;
    "" without one (a handler called directly)."""
    client = getattr(request, "client", None)
    return str(getattr(client, "host", "") or "")
