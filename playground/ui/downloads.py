"""Files the UI writes for the browser to download (a session, an evaluation's rows), kept bounded.

Each export used to stay in /tmp for good: Gradio's delete_cache removes only the copies in its own cache, so
exports piled up (five calls with a 3 MiB constraint left 16 MB). Here the server process writes them into one
folder of its own inside Gradio's cache, which Gradio then serves without copying them; before each write,
exports older than MAX_AGE_S go, and the oldest go while more than MAX_FILES or MAX_BYTES would stay. Gradio
deletes the files it served when the server stops; a process that was killed leaves its folder, which the next
one removes once it has expired.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

PREFIX = "playground-downloads-"
MAX_AGE_S = 600.0  # as long as Gradio keeps uploads (create_ui's delete_cache): time enough to download
MAX_FILES = 256  # exports at once, in all
MAX_BYTES = 256 << 20  # a session file is at most a 4 MiB call body plus the conversation


class Downloads:
    """One server process's exports: one subfolder per export, the whole folder bounded by age, count and size."""

    def __init__(
        self, cache: str | Path, *, max_age_s: float = MAX_AGE_S, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES
    ) -> None:
        self.cache = Path(cache)
        self.max_age_s = max_age_s
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._root: Path | None = None
        self._lock = threading.Lock()

    def write(self, files: dict[str, str]) -> list[str]:
        """Write one export (its files by name, UTF-8) and return their paths, after pruning the older ones."""
        size = sum(len(text.encode("utf-8")) for text in files.values())
        with self._lock:
            root = self._folder()
            self._prune(root, size)
            export = Path(tempfile.mkdtemp(prefix="export-", dir=root))
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

    def _prune(self, root: Path, incoming: int) -> None:
        """Delete expired exports, then the oldest while the new one would not fit under the bounds."""
        now = time.time()
        exports = sorted(_measure(path) for path in root.iterdir())
        kept = []
        for created, size, path in exports:
            if now - created > self.max_age_s:
                shutil.rmtree(path, ignore_errors=True)
            else:
                kept.append((size, path))
        total = sum(size for size, _ in kept) + incoming
        while kept and (len(kept) >= self.max_files or total > self.max_bytes):
            size, path = kept.pop(0)
            total -= size
            shutil.rmtree(path, ignore_errors=True)


def _measure(export: Path) -> tuple[float, int, Path]:
    """When an export was written, and its bytes (Gradio may be deleting its files meanwhile)."""
    try:
        return export.stat().st_mtime, sum(f.stat().st_size for f in export.iterdir()), export
    except OSError:
        return 0.0, 0, export
