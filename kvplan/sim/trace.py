"""A trace file: Mooncake's JSON lines (one request a line: timestamp, input/output length, prefix-chained hash_ids)
read as the requests the simulator replays.

The file is read as what it claims to be and nothing else: a regular file (a FIFO, device or folder is refused
without blocking), at most MAX_TRACE_BYTES, UTF-8, every line checked. An error says what is wrong with a line by its
number and kind (not JSON, a missing field, a string where a number belongs) and never quotes the file's text: a
path that names some other file (a password file, /proc/self/environ) must not be printed back.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import Problem, SpecError
from ..spec.workload import hash_ids_needed
from .content import TraceBlocks
from .request import Request, RequestList, _gc_paused

__all__ = ["read_trace", "MAX_TRACE_BYTES", "MAX_TRACE_NUMBER"]

_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_MAX_PROBLEMS = 10
MAX_TRACE_BYTES = 1 << 30
"""A trace file kvplan replays (Mooncake's are a few MB; a gigabyte is millions of requests)."""
MAX_TRACE_NUMBER = 1 << 53
"""Largest timestamp, length or hash id of a trace line (the integers a float holds exactly)."""


def read_trace(path: str, block_size: int = 512, time_scale: float = 1.0, limit: int | None = None) -> RequestList:
    """Mooncake JSONL -> Requests, sorted by arrival (stable, so file order breaks ties), ids 0..n-1.

    Each non-blank line is a JSON object with integer `timestamp` (ms, >= 0), `input_length` (>= 1),
    `output_length` (>= 0) and `hash_ids` (non-negative ints, exactly ceil(input_length/block_size)
    of them). Arrival = timestamp / 1000 x time_scale; `limit` keeps the first N requests of the file.
    The whole file is checked first (also past `limit`): any bad line raises SpecError naming `file:line` (the first 10
    problems, and how many more), and nothing is returned. No length limit is applied here.
    """
    file = Path(path)
    text = _trace_text(file)
    with _gc_paused():
        rows = _parse_trace(text, file, block_size)[:limit]
        order = sorted(range(len(rows)), key=lambda i: rows[i][0])
        result = RequestList()
        scale = time_scale / 1000.0
        for i in order:
            ts, n_in, n_out, ids = rows[i]
            result.append(Request(len(result), ts * scale, n_in, n_out, TraceBlocks(ids, n_in, n_out, block_size, i)))
    return result


def _trace_text(file: Path) -> str:
    """The trace's text: a regular file (not a FIFO, device or folder, which would block or never end), at most
    MAX_TRACE_BYTES of it read, UTF-8. A file of another kind is refused by what is wrong with it, never by what is in it."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)     # a FIFO's open would wait for a writer
        with os.fdopen(fd, "rb") as raw:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _unreadable(file, "is not a regular file (a FIFO, device or folder)",
                                  "point workload.trace.path at a Mooncake JSONL file")
            data = raw.read(MAX_TRACE_BYTES + 1)
    except FileNotFoundError:
        raise _unreadable(file, "not found", "point workload.trace.path at a Mooncake JSONL file") from None
    except OSError as exc:
        raise _unreadable(file, f"cannot be read ({exc.strerror or type(exc).__name__})",
                          "give a UTF-8 Mooncake JSONL file") from None
    if len(data) > MAX_TRACE_BYTES:
        raise _unreadable(file, f"holds more than the {MAX_TRACE_BYTES:,} bytes kvplan reads",
                          "replay a part of it (cut the file, or workload.trace.limit on a shorter file)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _unreadable(file, f"is not UTF-8 text (at byte offset {exc.start:,})",
                          "give a Mooncake JSONL file: JSON lines in UTF-8") from None


def _unreadable(file: Path, what: str, fix: str) -> SpecError:
    return SpecError([Problem(str(file), f"the trace file {what}", fix=fix)])


def _parse_trace(text: str, file: Path, block_size: int) -> list[tuple[int, int, int, list[int]]]:
    """(timestamp, input_length, output_length, hash_ids) per request line; SpecError for bad lines."""
    rows: list[tuple[int, int, int, list[int]]] = []
    problems: list[Problem] = []
    bad = 0
    follows: dict[int, int] = {}                 # hash id -> the id before it (_check_chain)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        error = None
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            error = (f"not JSON: {exc.msg} at column {exc.colno}", "write one JSON object per line")
        except (ValueError, RecursionError):            # an integer past Python's digit limit, nesting past its stack
            error = ("not a trace line: a number too long or nesting too deep", "write one flat JSON object of integers per line")
        else:
            error = _check_row(row, block_size) or _check_chain(row["hash_ids"], follows)
        if error is None:
            rows.append((row["timestamp"], row["input_length"], row["output_length"], row["hash_ids"]))
            continue
        bad += 1
        if len(problems) < _MAX_PROBLEMS:
            problems.append(Problem(f"{file}:{number}", error[0], fix=error[1]))    # the line's kind, never its text
    if bad > len(problems):
        problems.append(Problem(str(file), f"... and {bad - len(problems)} more bad lines", fix="fix the lines above first"))
    if not problems and not rows:
        problems.append(Problem(str(file), "the trace has no requests",
                                fix="give a Mooncake JSONL file with one request per line"))
    if problems:
        raise SpecError(problems)
    return rows


def _check_row(row: Any, block_size: int) -> tuple[str, str] | None:
    """What is wrong with one parsed trace line (message, fix), or None."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got a JSON {_json_kind(row)}", "write {\"timestamp\": ..., \"input_length\": ..., ...}"
    missing = [f for f in _FIELDS if f not in row]
    if missing:
        return f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}", \
            "every line needs timestamp (ms), input_length, output_length and hash_ids"
    for name, low in (("timestamp", 0), ("input_length", 1), ("output_length", 0)):
        value = row[name]
        if type(value) is not int:
            return f"{name} must be an integer, got a JSON {_json_kind(value)}", f"write {name} as a whole number"
        if not low <= value <= MAX_TRACE_NUMBER:
            return (f"{name} must be between {low} and {MAX_TRACE_NUMBER:,}, got one {'below' if value < low else 'above'}",
                    f"write a {name} of at least {low}")
    ids = row["hash_ids"]
    if type(ids) is not list or not all(type(h) is int and 0 <= h <= MAX_TRACE_NUMBER for h in ids):
        return "hash_ids must be a list of non-negative integers", "write hash_ids as [0, 1, 2, ...]"
    need = hash_ids_needed(row["input_length"], block_size)
    if len(ids) != need:
        return (f"{len(ids)} hash_ids for input_length {row['input_length']}, but {block_size}-token blocks need {need}",
                "check workload.trace.block_size (512 for the Mooncake traces)")
    return None


def _json_kind(value: Any) -> str:
    """A JSON value's kind in the format's words (string, number, ...): what a trace error says of a value, not the value."""
    if isinstance(value, bool) or value is None:
        return "boolean" if value is not None else "null"
    return {str: "string", float: "number", int: "number", list: "array", dict: "object"}.get(type(value), "value")


def _check_chain(ids: list[int], follows: dict[int, int]) -> tuple[str, str] | None:
    """What is wrong with a line's hash_ids as prefix-chained ids, or None: an id names its block and every
    block before it, so it always follows the same id (or always starts a request). The prefix cache relies
    on it: two chains that part never meet again. Records the line's ids in `follows` (id -> the id before
    it, -1 first in a request)."""
    before = [-1, *ids[:-1]]
    if list(map(follows.setdefault, ids, before)) == before:
        return None
    h, here = next((h, b) for h, b in zip(ids, before) if follows[h] != b)
    where = f"follows {here}" if here >= 0 else "starts the request"
    then = f"follows {follows[h]}" if follows[h] >= 0 else "starts a request"
    return (f"hash id {h} {where} here but {then} on an earlier line: hash_ids must be prefix-chained",
            "give each block an id of its whole prefix, as Mooncake's traces do")
