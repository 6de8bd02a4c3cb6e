"""A hostile HTTP server for the tests of kvplan's live reads: on 127.0.0.1:<ephemeral>, in daemon threads,
written on raw sockets so that it can misbehave below HTTP.

Each path gets one behaviour (`answers`, else `default`):
- `canned(status, body)`: a well-formed answer with a Content-Length.
- `drip(body, interval, pad)`: the whole answer, status line and headers (padded by `pad` bytes)
  included, one byte every `interval` seconds; a per-read timeout never fires on it.
- `huge(size, chunked)`: a 200 whose body is `size` bytes, made as it is sent (64 KiB at a time: neither
  side of the test holds it), announced by Content-Length or sent chunked without one.
- `endless_line()`: a 200 event stream whose first line never ends.
- `heartbeat(interval)`: a 200 event stream of empty lines, each on time, never a token.

`benchmarks/hostile_endpoints.py` serves its 2 GB body with it too.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable

Behaviour = Callable[[socket.socket, "HostileServer"], None]


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def canned(status: int, body: bytes, content_type: str = "application/json") -> Behaviour:
    def send(conn: socket.socket, server: "HostileServer") -> None:
        conn.sendall(_head(status, {"Content-Type": content_type, "Content-Length": str(len(body)),
                                    "Connection": "close"}) + body)
    return send


def drip(body: bytes = b'{"data": [{"id": "kvplan-tiny-llama"}]}', interval: float = 0.05, pad: int = 600) -> Behaviour:
    """The answer takes (about 100 + `pad` + len(body)) x `interval` seconds: 37 s by default."""
    def send(conn: socket.socket, server: "HostileServer") -> None:
        data = _head(200, {"Content-Length": str(len(body)), "Connection": "close", "X-Pad": "p" * pad}) + body
        for i in range(len(data)):
            if server.stopped.wait(interval):
                return
            conn.sendall(data[i:i + 1])
    return send


def huge(size: int = 2 * 2**30, chunked: bool = False, start: bytes = b'{"data": [') -> Behaviour:
    piece = b'{"id": "m", "object": "model"}, ' * 2048          # 64 KiB, sent again and again
    def send(conn: socket.socket, server: "HostileServer") -> None:
        headers = {"Content-Type": "application/json", "Connection": "close"}
        headers.update({"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(size)})
        conn.sendall(_head(200, headers))
        sent = 0
        while sent < size and not server.stopped.is_set():
            block = (start + piece)[:size - sent] if sent == 0 else piece[:size - sent]
            conn.sendall(f"{len(block):x}\r\n".encode() + block + b"\r\n" if chunked else block)
            sent += len(block)
            server.sent += len(block)
        if chunked:
            conn.sendall(b"0\r\n\r\n")
    return send


def heartbeat(interval: float = 0.05) -> Behaviour:
    """A 200 event stream of empty lines, one every `interval` seconds, without end and without a token."""
    def send(conn: socket.socket, server: "HostileServer") -> None:
        conn.sendall(_head(200, {"Content-Type": "text/event-stream", "Connection": "close"}))
        while not server.stopped.wait(interval):
            conn.sendall(b"\n")
    return send


def endless_line() -> Behaviour:
    def send(conn: socket.socket, server: "HostileServer") -> None:
        conn.sendall(_head(200, {"Content-Type": "text/event-stream", "Connection": "close"}) + b"data: ")
        while not server.stopped.is_set():
            conn.sendall(b"1" * 65536)
            server.sent += 65536
    return send


class HostileServer:
    """Accepts connections until stopped; each request's path picks its behaviour. Use as a context manager."""

    def __init__(self, answers: dict[str, Behaviour] | None = None, default: Behaviour | None = None):
        self.answers = dict(answers or {})
        self.default = default or canned(404, b"")
        self.stopped = threading.Event()
        self.sent = 0
        """Body bytes the huge and endless behaviours have sent so far (all connections)."""
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(10)
                request = b""
                while b"\r\n\r\n" not in request:
                    data = conn.recv(4096)
                    if not data:
                        return
                    request += data
                path = request.split(b" ", 2)[1].decode()
                self.answers.get(path, self.default)(conn, self)
            except OSError:                        # the client hung up: what these tests want it to do
                return

    def __enter__(self) -> "HostileServer":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        time.sleep(0.15)
        self.listener.close()
