"""A benchmark's per-request log, replayed (workload kind `replay`): what each request of a real run sent and when.

The log is JSON lines (a file ending in .gz is gzip), one request per line, one JSON object each:

    {"arrival": 0.123, "prompt_tokens": 547, "output_tokens": 248, "prompt": 17, "prefix": 7, "prefix_tokens": 104}

- `arrival` (required): seconds from the start of the run, a number >= 0.
- `prompt_tokens` (required): the prompt's tokens, a whole number >= 1.
- `output_tokens` (required): the tokens generated, a whole number >= 1.
- `prefix` and `prefix_tokens` (optional, together): the prompt starts with the first `prefix_tokens` tokens
  (1..prompt_tokens) of the text named `prefix`. Requests with the same prefix share min(their prefix_tokens) tokens:
  a system prompt, a document, a repository that several prompts start with.
- `prompt` (optional): names the prompt. Every request with the same prompt id has the same prefix and
  prefix_tokens, and its text after the prefix is the same text: two of them with the same prompt_tokens send the
  same prompt token for token (a shorter one is the start of a longer one). A request without a prompt id sends
  text no other request sends after its prefix.

- `stage`, `ttft`, `e2e` (optional): what the benchmark measured, for `kvplan calibrate --requests`
  (kvplan.gpufit.requests): the load stage the request belonged to (a whole number; stages run back to back),
  and its time to first token and end-to-end latency in seconds (numbers > 0, ttft <= e2e). The simulator does
  not read them: a replay sends the same requests whatever they measured.

Ids are whole numbers from 0 to 2^53. The generated tokens of two requests are never shared. A request's content
(kvplan.sim.content) is the runs (LOG_PREFIX, prefix), (LOG_PROMPT, prompt) or, without a prompt id, (USER_TEXT, n),
then (OUTPUT, n), n the request's place among the file's requests; kvplan bench sends them as token ids
(kvplan.live.tokens), so the real stack sees the reuse the simulator sees.

The whole file is checked before anything runs: every bad line is a SpecError naming `file:line` and what is wrong
(the first 10, and how many more), never the line's content. Requests are replayed in arrival order (a stable sort:
file order breaks ties); `limit` keeps the first N lines of the file, `time_scale` multiplies the arrival times.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..errors import Problem, SpecError, did_you_mean
from ..named_file import not_regular
from .content import LOG_PREFIX, LOG_PROMPT, OUTPUT, USER_TEXT, Segments

FIELDS = ("arrival", "prompt_tokens", "output_tokens", "prompt", "prefix", "prefix_tokens", "stage", "ttft", "e2e")
"""Every field a line may have."""
_REQUEST = FIELDS[:6]
"""The fields that say what a request sent (the rest say what was measured)."""
MAX_LOG_BYTES = 1 << 30
"""The largest log kvplan reads, uncompressed (a million requests take about 100 MB)."""
MAX_ID = 1 << 53
"""The largest id, and the largest number of tokens, a line may give (the integers a float holds exactly)."""
_ABSENT = {"prompt": -1, "prefix": -1, "stage": -1, "ttft": math.nan, "e2e": math.nan}
"""What a field left out of a line is recorded as (0 for prefix_tokens)."""
_MAX_PROBLEMS = 10
_GZIP_MAGIC = b"\x1f\x8b"
FIX_FORMAT = "write one JSON object per line: {\"arrival\": 0.5, \"prompt_tokens\": 500, \"output_tokens\": 100} " \
             "(docs/benchmarks.md, the replay log)"


class Log(NamedTuple):
    """A per-request log as read, in file order: one entry per line with a request."""

    arrival: np.ndarray
    """Seconds from the start (float64)."""
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prompt: np.ndarray
    """Prompt id, -1 for none (int64)."""
    prefix: np.ndarray
    """Prefix id, -1 for none."""
    prefix_tokens: np.ndarray
    """Tokens of the prefix the prompt starts with, 0 for none."""
    lines: np.ndarray
    """Each request's line number in the file (from 1)."""
    stage: np.ndarray
    """The load stage it was measured in, -1 where the line does not say (int64)."""
    ttft: np.ndarray
    """Measured time to first token, seconds; NaN where the line does not say (float64)."""
    e2e: np.ndarray
    """Measured end-to-end latency, seconds; NaN where the line does not say (float64)."""

    def __len__(self) -> int:
        return len(self.arrival)

    def content(self, i: int) -> Segments:
        """The tokens of the request on entry `i` (file order): its prefix, its own text, its output."""
        prefix_tokens = int(self.prefix_tokens[i])
        own = int(self.prompt_tokens[i]) - prefix_tokens
        prompt = int(self.prompt[i])
        parts = []
        if prefix_tokens:
            parts.append(((LOG_PREFIX, int(self.prefix[i])), prefix_tokens))
        if own:
            parts.append(((LOG_PROMPT, prompt) if prompt >= 0 else (USER_TEXT, i), own))
        parts.append(((OUTPUT, i), int(self.output_tokens[i])))
        return Segments(tuple(parts))


class Planned(NamedTuple):
    """The requests of a replay as numbers, in arrival order, and the entry of the log each one is."""

    arrival: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    entry: np.ndarray
    """The request's entry in the log (file order), for `Log.content`."""


def planned(log: Log, time_scale: float = 1.0, limit: int | None = None, requests: int | None = None,
            duration: float | None = None) -> Planned:
    """The requests a replay sends: the first `limit` entries of the file, their arrivals times `time_scale`, sorted
    by arrival (file order breaks ties), those after `duration` dropped, then the first `requests` kept."""
    n = len(log) if limit is None else min(limit, len(log))
    arrival = log.arrival[:n] * time_scale
    order = np.argsort(arrival, kind="stable")
    if duration is not None:
        order = order[arrival[order] <= duration]
    if requests is not None:
        order = order[:requests]
    return Planned(arrival[order], log.prompt_tokens[order], log.output_tokens[order], order)


def read_log(path: str) -> Log:
    """The per-request log at `path` (the module docstring has the format), every line checked; SpecError for a file
    that cannot be read or any bad line."""
    file = Path(path)
    text = _text(file)
    columns: dict[str, list] = {f: [] for f in (*FIELDS, "line")}
    problems: list[Problem] = []
    bad = 0
    prompts: dict[int, tuple[int, int, int]] = {}        # prompt id -> (prefix, prefix_tokens, first line)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row, error = _parse(line)
        if error is None:
            error = _same_prompt(row, number, prompts)
        if error is None:
            for name in FIELDS:
                columns[name].append(row.get(name, _ABSENT.get(name, 0)))
            columns["line"].append(number)
            continue
        bad += 1
        if len(problems) < _MAX_PROBLEMS:
            problems.append(Problem(f"{file}:{number}", error[0], fix=error[1]))
    if bad > len(problems):
        problems.append(Problem(str(file), f"... and {bad - len(problems)} more bad lines",
                                fix="fix the lines above first"))
    if not problems and not columns["line"]:
        problems.append(Problem(str(file), "the log has no requests", fix=FIX_FORMAT))
    if problems:
        raise SpecError(problems)
    ints = {name: np.array(columns[name], dtype=np.int64) for name in (*_REQUEST[1:], "stage", "line")}
    floats = {name: np.array(columns[name], dtype=np.float64) for name in ("arrival", "ttft", "e2e")}
    return Log(floats["arrival"], ints["prompt_tokens"], ints["output_tokens"], ints["prompt"], ints["prefix"],
               ints["prefix_tokens"], ints["line"], ints["stage"], floats["ttft"], floats["e2e"])


def _text(file: Path) -> str:
    """The log's text: gzip when the name ends in .gz (and only then), at most MAX_LOG_BYTES of it, UTF-8."""
    claims_gzip = file.suffix == ".gz"
    kind = not_regular(file)
    if kind is not None:                         # a FIFO would block the open below, a device never end
        raise _unreadable(file, f"is {kind}, not a file", "point workload.replay.path at a per-request log")
    try:
        with file.open("rb") as raw:
            is_gzip = raw.read(2) == _GZIP_MAGIC
        if claims_gzip and not is_gzip:
            raise _unreadable(file, "is named .gz but is not gzip-compressed", "compress it with gzip, or drop the .gz")
        if is_gzip and not claims_gzip:
            raise _unreadable(file, "is gzip-compressed but its name does not end in .gz", "name it <log>.jsonl.gz")
        opener = gzip.open if is_gzip else open
        with opener(file, "rb") as stream:
            data = stream.read(MAX_LOG_BYTES + 1)
    except FileNotFoundError:
        raise _unreadable(file, "not found", "point workload.replay.path at a per-request log") from None
    except (OSError, EOFError, zlib.error) as exc:      # a damaged or cut-off gzip stream, an unreadable file
        raise _unreadable(file, f"cannot be read ({type(exc).__name__})",
                          "give a per-request log (JSON lines, or JSON lines compressed with gzip)") from None
    if len(data) > MAX_LOG_BYTES:
        raise _unreadable(file, f"holds more than the {MAX_LOG_BYTES:,} bytes kvplan reads",
                          "replay a part of it (cut the file, or workload.replay.limit on a shorter file)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _unreadable(file, f"is not UTF-8 text (at byte offset {exc.start:,})",
                          "give a per-request log: JSON lines in UTF-8") from None


def _unreadable(file: Path, what: str, fix: str) -> SpecError:
    return SpecError([Problem(str(file), f"the replay log {what}", fix=fix)])


def _parse(line: str) -> tuple[dict[str, Any], None] | tuple[None, tuple[str, str]]:
    """One line as a request's fields, or (message, fix) saying what is wrong with it, in words of the format."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, (f"not JSON ({exc.msg} at column {exc.colno})", FIX_FORMAT)
    except (ValueError, RecursionError):          # an integer past Python's digit limit, nesting past its stack
        return None, ("not a request: a number too long or nesting too deep", FIX_FORMAT)
    if not isinstance(row, dict):
        return None, (f"a JSON {_kind(row)}, not an object", FIX_FORMAT)
    unknown = [key for key in row if key not in FIELDS]
    if unknown:
        guesses = sorted({g for g in (did_you_mean(k, FIELDS) for k in unknown) if g is not None and g not in row})
        hint = f" (did you mean {', '.join(guesses)}?)" if guesses else ""
        return None, (f"{len(unknown)} field{'s' if len(unknown) > 1 else ''} the format does not have{hint}",
                      f"use only {', '.join(FIELDS)}")
    missing = [f for f in FIELDS[:3] if f not in row]
    if missing:
        return None, (f"no {' and no '.join(missing)}", "every line needs arrival, prompt_tokens and output_tokens")
    arrival = row["arrival"]
    if type(arrival) not in (int, float) or not math.isfinite(arrival) or not 0 <= arrival <= MAX_ID:
        why = f"a JSON {_kind(arrival)}" if type(arrival) not in (int, float) else "out of range"
        return None, (f"arrival is {why}: it must be seconds from the start, a number from 0 to {MAX_ID:,}",
                      "write arrival as seconds, e.g. 0.25")
    for name, low in (("prompt_tokens", 1), ("output_tokens", 1), ("prompt", 0), ("prefix", 0), ("prefix_tokens", 1),
                      ("stage", 0)):
        if name in row:
            value = row[name]
            if type(value) is not int:
                return None, (f"{name} is a JSON {_kind(value)}, not a whole number", f"write {name} as a whole number")
            if not low <= value <= MAX_ID:
                return None, (f"{name} is out of range: it must be from {low} to {MAX_ID:,}",
                              f"write a {name} of at least {low}")
    if ("prefix" in row) != ("prefix_tokens" in row):
        given, other = ("prefix", "prefix_tokens") if "prefix" in row else ("prefix_tokens", "prefix")
        return None, (f"{given} without {other}: a prefix is named and measured together",
                      "give both prefix and prefix_tokens, or neither")
    if row.get("prefix_tokens", 0) > row["prompt_tokens"]:
        return None, ("prefix_tokens is more than prompt_tokens: the prefix is the start of the prompt",
                      "make prefix_tokens at most prompt_tokens")
    for name in ("ttft", "e2e"):
        value = row.get(name, 1.0)
        if type(value) not in (int, float) or not math.isfinite(value) or not 0 < value <= MAX_ID:
            why = f"a JSON {_kind(value)}" if type(value) not in (int, float) else "out of range"
            return None, (f"{name} is {why}: it must be the measured seconds, a number above 0",
                          f"write {name} as seconds, e.g. 0.042, or leave it out")
    if row.get("ttft", 0) > row.get("e2e", math.inf):
        return None, ("ttft is more than e2e: the first token comes before the last",
                      "write each request's own ttft and e2e, in seconds")
    return row, None


def _same_prompt(row: dict[str, Any], number: int, prompts: dict[int, tuple[int, int, int]]) -> tuple[str, str] | None:
    """What is wrong with the line's prompt id, or None: a prompt id names one prompt, so every line with it starts
    with the same prefix, as long. Records the first line of each prompt id in `prompts`."""
    if "prompt" not in row:
        return None
    prefix = (row.get("prefix", -1), row.get("prefix_tokens", 0))
    first = prompts.setdefault(row["prompt"], (*prefix, number))
    if first[:2] == prefix:
        return None
    return (f"prompt {row['prompt']} starts with another prefix here than on line {first[2]} (prefix and prefix_tokens "
            "differ): a prompt id names one prompt", "give the two prompts different ids, or the same prefix")


def _kind(value: Any) -> str:
    """The JSON type of a parsed value, in JSON's words."""
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}[type(value)]
