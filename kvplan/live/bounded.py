"""A bounded HTTP read: how kvplan asks a live server anything (observe, bench, doctor). (Not named http.py: a
script run from this folder, tinymodel.py, would find it in place of the standard library's http.)

A server kvplan reads is not trusted to be well-behaved. Three rules hold for every request:

- A deadline: the whole request (connect, headers, body) ends within its `timeout`, and within the
  command's overall `Deadline` when one is given. A server that drips its answer one byte at a time
  cannot stretch it, since every socket read waits at most for what is left of the deadline (a
  per-read timeout alone is reset by each byte). Crossing it raises `DeadlineExceeded`, a
  TimeoutError.
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
    """A request did not end within its deadline (the request's, or the command's overall one)."""


class BodyTooLarge(http.client.HTTPException):
    """A server's answer is longer than kvplan reads."""


@dataclass(frozen=True)
class Deadline:
    """A point in time (time.monotonic) that a command's reads of live servers end by, and how it was set."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> "Deadline":
        return cls(time.monotonic() + seconds, seconds)

    def left(self) -> float:
        return self.at - time.monotonic()


class _Guard:
    """The end of one request and what crossing it says; every socket operation waits at most until then (and at
    most `timeout` when the timeout is per read, not for the whole request)."""

    def __init__(self, timeout: float, deadline: Deadline | None, whole: bool = True):
        end = time.monotonic() + timeout if whole else float("inf")
        self.overall = deadline is not None and deadline.at < end
        self.end = deadline.at if self.overall else end
        self.timeout, self.whole = timeout, whole
        self.deadline = deadline

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise self.exceeded()
        return left if self.whole else min(left, self.timeout)

    def exceeded(self) -> DeadlineExceeded:
        if self.overall:
            return DeadlineExceeded(f"not answered before the command's deadline ({self.deadline.seconds:g} s)")
        return DeadlineExceeded(f"no complete answer within {self.timeout:g} s (a request's deadline, however "
                                "slowly the server sends)")


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


def connect(target: "Target", timeout: float, deadline: Deadline | None = None, *,
            whole: bool = True) -> http.client.HTTPConnection:
    """A connection to `target` (TLS for https://) whose request must end within `timeout` seconds from now (with
    `whole` False: may wait at most `timeout` for each read), and before `deadline`."""
    guard = _Guard(timeout, deadline, whole)
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
    return conn


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
