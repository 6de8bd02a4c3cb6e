"""A bounded HTTP read: how kvplan asks a live server anything (observe, bench, doctor). (Not named http.py: a
script run from this folder, tinymodel.py, would find it in place of the standard library's http.)

A server kvplan reads is not trusted to be well-behaved. Three rules hold for every request:

- A deadline: the whole request (connect, headers, body) ends within its `timeout`, and within the
  command's overall `Deadline` when one is given. A server that drips its answer one byte at a time
  cannot stretch it, since every socket read waits at most for what is left of the deadline (a
  per-read timeout alone is reset by each byte). Crossing it raises `DeadlineExceeded`, a
  TimeoutError. A streamed answer gives each of its events a `timeout` of its own (`restart`) and
  ends by its overall `Deadline`. (A TLS handshake is bounded per read only: the ssl module does it
  before the guard can take the socket.)
- A size cap: a body longer than `limit` (MAX_BODY unless given) is refused with `BodyTooLarge` as
  soon as its Content-Length says so, or once `limit` bytes have come, and never held whole.
- JSON is parsed by `json_body`: nesting too deep for Python's parser is a ValueError like any other
  text that is not JSON (json.loads raises RecursionError for it).

What the body says is checked by its reader for type and shape before it is used.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .target import Target

MAX_BODY = 16 * 2**20
"""Bytes a server's answer (a model list, /metrics, LMCache's /status) may have: vLLM's /metrics is some hundred KiB
with many engines, a model list a few KiB. 16 MiB leaves room for that and bounds what a hostile server can make
kvplan hold."""

MAX_LINE = 2**20
"""Bytes one line of a completion stream (one SSE event) may have."""


class DeadlineExceeded(TimeoutError):
    """A request did not end within its deadline: `overall` when it is a Deadline's (the command's, or a stream's
    in all), else its `timeout` (for a stream, that of its part under way)."""

    def __init__(self, message: str, overall: bool = False):
        super().__init__(message)
        self.overall = overall


class BodyTooLarge(http.client.HTTPException):
    """A server's answer is longer than kvplan reads."""


@dataclass(frozen=True)
class Deadline:
    """A point in time (time.monotonic) that reads of live servers end by, how it was set and whose it is."""

    at: float
    seconds: float
    what: str = "the command's deadline"

    @classmethod
    def after(cls, seconds: float, what: str = "the command's deadline") -> "Deadline":
        return cls(time.monotonic() + seconds, seconds, what)

    def left(self) -> float:
        return self.at - time.monotonic()


class _Guard:
    """The end of one request (or of its part under way: `restart`) and what crossing it says; every socket
    operation waits at most until then."""

    def __init__(self, timeout: float, deadline: Deadline | None):
        self.deadline = deadline
        self.restart(timeout)

    def restart(self, timeout: float) -> None:
        """The next part of the answer (a streamed event) must come whole within `timeout` seconds from now, and
        before the deadline."""
        end = time.monotonic() + timeout
        self.overall = self.deadline is not None and self.deadline.at < end
        self.end = self.deadline.at if self.overall else end
        self.timeout = timeout

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise self.exceeded()
        return left

    def exceeded(self) -> DeadlineExceeded:
        if self.overall:
            return DeadlineExceeded(f"not answered before {self.deadline.what} ({self.deadline.seconds:g} s)", True)
        return DeadlineExceeded(f"no complete answer within {self.timeout:g} s (a deadline for the whole answer, "
                                "however slowly the server sends)")


class _GuardedSocket:
    """A connected socket whose reads and writes wait at most until the guard's end."""

    def __init__(self, sock: socket.socket, guard: _Guard):
        self._sock, self._guard = sock, guard

    def _arm(self) -> None:
        self._sock.settimeout(self._guard.left())

    def sendall(self, data) -> None:
        self._arm()
        try:
            self._sock.sendall(data)
        except socket.timeout:
            raise self._guard.exceeded() from None

    def makefile(self, mode: str = "rb", *args, **kwargs):
        """What http.client reads a response from: the socket's own file (it keeps the socket open until the
        response is closed), each read armed with what is left of the deadline."""
        return io.BufferedReader(_Reader(self._sock.makefile("rb", buffering=0), self))

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


class _Reader(io.RawIOBase):
    def __init__(self, raw, sock: _GuardedSocket):
        self._raw, self._sock = raw, sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self._sock._arm()
        try:
            return self._raw.readinto(buffer)
        except socket.timeout:
            guard = self._sock._guard
            if time.monotonic() >= guard.end:
                raise guard.exceeded() from None
            raise

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


def connect(target: "Target", timeout: float, deadline: Deadline | None = None) -> http.client.HTTPConnection:
    """A connection to `target` (TLS for https://) whose request must end within `timeout` seconds from now, and
    before `deadline`. `restart(conn, timeout)` gives a streamed answer's next event its own `timeout`."""
    guard = _Guard(timeout, deadline)
    conn = target.connect(min(timeout, guard.left()))
    try:
        conn.connect()
    except socket.timeout:
        conn.close()
        raise guard.exceeded() if time.monotonic() >= guard.end else socket.timeout("timed out") from None
    except BaseException:
        conn.close()
        raise
    conn.sock = _GuardedSocket(conn.sock, guard)
    conn.kvplan_guard = guard              # the response may outlive conn.sock (http.client drops it on Connection: close)
    return conn


def restart(conn: http.client.HTTPConnection, timeout: float) -> None:
    """The next part of `conn`'s answer must come whole within `timeout` seconds from now (never past the deadline
    it was opened with)."""
    conn.kvplan_guard.restart(timeout)


def read_body(resp: http.client.HTTPResponse, limit: int = MAX_BODY) -> bytes:
    """The body of `resp`, or BodyTooLarge when it is longer than `limit` bytes (told by its Content-Length, or
    found reading it: never more than `limit` + 64 KiB is held)."""
    if resp.length is not None and resp.length > limit:
        raise BodyTooLarge(f"its answer is {resp.length:,} bytes, more than the {limit:,} kvplan reads")
    parts, size = [], 0
    while size <= limit:
        chunk = resp.read(min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
    raise BodyTooLarge(f"its answer is longer than the {limit:,} bytes kvplan reads")


def fetch(target: "Target", path: str, timeout: float, deadline: Deadline | None = None,
          limit: int = MAX_BODY) -> tuple[int, bytes]:
    """GET `path` of `target`: (status, body), the whole request within `timeout` seconds and before `deadline`,
    the body at most `limit` bytes. Raises OSError (DeadlineExceeded is one) or http.client.HTTPException
    (BodyTooLarge is one)."""
    conn = connect(target, timeout, deadline)
    try:
        conn.request("GET", f"{target.base}{path}", headers=target.headers())
        resp = conn.getresponse()
        return resp.status, read_body(resp, limit)
    finally:
        conn.close()


def json_body(body: bytes):
    """A body parsed as JSON; ValueError for one that is not JSON or nests deeper than the parser goes."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("its JSON nests too deep") from None
