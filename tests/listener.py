"""A local TCP listener that counts connections: what the server must never contact."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Listener:
    """Accepts and counts every connection, answering a small JSON schema as a web server would."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.sendall(b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"type": "string"}')
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@contextmanager
def listening() -> Iterator[Listener]:
    server = Listener()
    try:
        yield server
    finally:
        server.close()
