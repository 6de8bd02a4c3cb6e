"""Human units in specs and the catalog: sizes, durations, rates and bandwidths.

A spec says "64GiB", "50ms", "40/s" or "25GB/s"; the model holds plain numbers in base units
(bytes, seconds, requests per second, bytes per second). kvplan reads them with one explicit
grammar, a number and a unit from the tables below, because a general unit library reads a
planner's words wrongly (Pint takes "rps" for revolutions per second and "Gb" for gigabytes):

- a **size** is bytes: `B`, `kB`, `MB`, `GB`, `TB`, `PB` (powers of 1000) and `KiB`, `MiB`, `GiB`,
  `TiB`, `PiB` (powers of 1024). Units are case-sensitive; `Gb`, `Gbit` and the like are bits and
  are refused for a size, with the size in bytes as the fix. A bare integer is bytes.
- a **duration**: `us` (or `µs`), `ms`, `s`, `min`, `h`, `d`. A bare number is seconds.
- a **rate** counts requests: `/s`, `/min`, `/h`, `rps`, `rpm`, `rph`, `req/s`, `req/min`, `req/h`.
  A bare number is per second. `sessions/s` is refused: a rate of requests is not one of sessions.
- a **session rate** counts new sessions (`arrivals.session_rate` of a workload with sessions): `/s`,
  `/min`, `/h`, `sessions/s`, `sessions/min`, `sessions/h`. A bare number is per second. `req/s`,
  `rps` and the other request units are refused: a session brings several requests.
- a **bandwidth** is bytes or bits per second: a size unit over `/s` (`25GB/s`), a bit unit over
  `/s` (`200Gbit/s`, `200Gb/s`), `bps` forms (`200Gbps`), or a bit unit alone, per second being
  implied the way links are named (`100Gbit`). A bare number is bytes per second.

Anything else is an error that names what was wrong and the accepted forms (docs/units.md
tables every accepted and refused form, and a test reads that table).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

SIZE_UNITS = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
"""Bytes per unit of a size."""

GIB = 1024**3
"""A GiB in bytes (2^30): what LMCache's "GB" sizes and vLLM's VLLM_CPU_KVCACHE_SPACE count."""

BIT_UNITS = {"bit": 1 / 8, "b": 1 / 8, "kbit": 125, "kb": 125, "Kbit": 125, "Kb": 125, "Mbit": 125e3, "Mb": 125e3,
             "Gbit": 125e6, "Gb": 125e6, "Tbit": 125e9, "Tb": 125e9}
"""Bytes per unit of information counted in bits (a lowercase b is a bit)."""

BPS_UNITS = {"bps": 1 / 8, "kbps": 125, "Kbps": 125, "Mbps": 125e3, "Gbps": 125e6, "Tbps": 125e9}
"""Bytes per second per unit of the bits-per-second forms."""

DURATION_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
"""Seconds per unit of a duration."""

RATE_UNITS = {"/s": 1.0, "/min": 1 / 60, "/h": 1 / 3600, "rps": 1.0, "rpm": 1 / 60, "rph": 1 / 3600,
              "req/s": 1.0, "req/min": 1 / 60, "req/h": 1 / 3600}
"""Requests per second per unit of a rate."""

SESSION_RATE_UNITS = {"/s": 1.0, "/min": 1 / 60, "/h": 1 / 3600, "sessions/s": 1.0, "sessions/min": 1 / 60,
                      "sessions/h": 1 / 3600, "session/s": 1.0, "session/min": 1 / 60, "session/h": 1 / 3600}
"""New sessions per second per unit of a session rate."""

SIZE_HELP = ("a size in bytes such as '64GiB', '1.5TB' or '512MiB' (B, kB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB, "
             "case-sensitive; a bare integer is bytes)")
DURATION_HELP = "a duration such as '50ms', '2s', '10min' or '24h' (us, ms, s, min, h, d; a bare number is seconds)"
RATE_HELP = ("a request rate such as '40/s', '600/min' or '5rps' (/s, /min, /h, rps, rpm, rph, req/s, req/min, req/h; "
             "a bare number is per second)")
SESSION_RATE_HELP = ("a rate of new sessions such as '4.7sessions/s' or '300sessions/min' (/s, /min, /h, sessions/s, "
                     "sessions/min, sessions/h; a bare number is per second)")
BANDWIDTH_HELP = ("a bandwidth such as '25GB/s', '200Gbps' or '200Gbit/s' (a size unit or Gbit/Gb over /s, or bps forms; "
                  "a bit unit alone such as '100Gbit' is per second; a bare number is bytes/s)")

_QUANTITY = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(?P<unit>\S*?)\s*$")



def is_bare_number(value: object) -> bool:
    """A number without a unit: a YAML number (not a bool), or text that reads as one ('1000', '2.5')."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    try:
        float(str(value))
    except ValueError:
        return False
    return True

def _error(message: str, help_text: str, **ctx: Any) -> PydanticCustomError:
    """A unit error; `help` (what is allowed) and `example` travel in its context for the CLI."""
    example = ctx.pop("example", None) or help_text.split("'")[1]
    return PydanticCustomError("unit", message, {"help": help_text, "example": example, **ctx})


def _number(value: Any, kind: str, help_text: str) -> float | None:
    """A bare number (not bool), checked finite and non-negative; None when `value` is a string."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _error("expected {kind}, not a {type}", help_text, kind=kind, type=type(value).__name__)
    if isinstance(value, str):
        return None
    if not math.isfinite(value) or value < 0:
        raise _error("{kind} must be a finite number >= 0", help_text, kind=kind)
    return float(value)


def _split(text: str, kind: str, help_text: str) -> tuple[float, str]:
    """'25 GB/s' -> (25.0, 'GB/s'); an error when the text is not a number and a unit."""
    match = _QUANTITY.match(text) if len(text) <= 64 else None
    if match is None:
        raise _error("cannot read '{value}' as {kind}: expected a number and a unit", help_text, value=text, kind=kind)
    number = float(match["number"])
    if not math.isfinite(number):
        raise _error("'{value}' is not finite", help_text, value=text)
    return number, match["unit"]


def _unknown(text: str, unit: str, kind: str, help_text: str, units: dict[str, float]) -> PydanticCustomError:
    """An unknown unit; a unit that differs only in case gets its right spelling as the fix."""
    same = [u for u in units if u.lower() == unit.lower()]
    if same:
        number = text.strip()[: len(text.strip()) - len(unit)].strip()
        return _error("'{value}': units are case-sensitive; did you mean {right}?", help_text, value=text, right=same[0],
                      example=f"{number}{same[0]}")
    return _error("'{value}' is not {kind}: unknown unit '{unit}'", help_text, value=text, kind=kind, unit=unit)


def _in_bytes(n: float) -> str:
    """A byte count in the largest decimal unit that keeps it short: 1e9 -> '1GB'."""
    for unit in ("PB", "TB", "GB", "MB", "kB"):
        if n >= SIZE_UNITS[unit]:
            return f"{n / SIZE_UNITS[unit]:g}{unit}"
    return f"{n:g}B"


def exact_size(n: int) -> str:
    """A byte count as a spec writes it, in the largest binary unit that holds it exactly: 200 * 2**30 -> '200GiB',
    5.5 * 2**30 -> '5632MiB', 1000 -> '1000B' (parse_size reads each back to the same bytes)."""
    for unit in ("PiB", "TiB", "GiB", "MiB", "KiB"):
        if n and n % SIZE_UNITS[unit] == 0:
            return f"{n // SIZE_UNITS[unit]}{unit}"
    return f"{n}B"


def parse_size(value: Any) -> int:
    """Bytes from '64GiB', '1.5TB', or an integer."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, float):
        raise _error("a size in bytes must be a whole number", SIZE_HELP)
    number = _number(value, "a size", SIZE_HELP)
    if number is not None:
        return int(value)
    n, unit = _split(value, "a size", SIZE_HELP)
    if unit == "":
        if not n.is_integer():
            raise _error("a size in bytes must be a whole number", SIZE_HELP)
        return int(n)
    if unit in BIT_UNITS or unit in BPS_UNITS:
        bytes_ = n * BIT_UNITS.get(unit, 0) or n * BPS_UNITS.get(unit, 0)
        raise _error("'{value}' is in bits (a lowercase b is a bit); a size is bytes", SIZE_HELP, value=value,
                     example=_in_bytes(bytes_))
    if unit not in SIZE_UNITS:
        raise _unknown(value, unit, "a size", SIZE_HELP, SIZE_UNITS)
    total = n * SIZE_UNITS[unit]
    if total >= 2**80:
        raise _error("size '{value}' is too large", SIZE_HELP, value=value)
    return round(total)


def _scaled(value: Any, kind: str, help_text: str, units: dict[str, float]) -> float:
    """A bare number, or a number and one of `units` (value in base units per unit)."""
    number = _number(value, kind, help_text)
    if number is not None:
        return number
    n, unit = _split(value, kind, help_text)
    if unit == "":
        return n
    if unit not in units:
        raise _unknown(value, unit, kind, help_text, units)
    return n * units[unit]


def parse_duration(value: Any) -> float:
    """Seconds from '50ms', '24h', or a number of seconds."""
    return _scaled(value, "a duration", DURATION_HELP, DURATION_UNITS)


def parse_rate(value: Any) -> float:
    """Requests per second from '40/s', '600/min', '5rps', or a number per second."""
    if isinstance(value, str):
        n, unit = _split(value, "a request rate", RATE_HELP)
        if unit in SESSION_RATE_UNITS and unit not in RATE_UNITS:
            raise _error("'{value}' counts sessions, and this rate counts requests (a session brings several); a "
                         "workload with sessions gives its new sessions as arrivals.session_rate", RATE_HELP,
                         value=value, example=f"{n:g}/s")
    return _scaled(value, "a request rate", RATE_HELP, RATE_UNITS)


def parse_session_rate(value: Any) -> float:
    """New sessions per second from '4.7sessions/s', '300sessions/min', '2/s', or a number per second."""
    if isinstance(value, str):
        n, unit = _split(value, "a session rate", SESSION_RATE_HELP)
        if unit in RATE_UNITS and unit not in SESSION_RATE_UNITS:
            raise _error("'{value}' counts requests, and session_rate counts new sessions (each brings several "
                         "requests): write the sessions per second here, or give requests per second to kvplan plan "
                         "--rate, which finds the session rate that offers them", SESSION_RATE_HELP, value=value,
                         example=f"{n:g}sessions/s")
    return _scaled(value, "a session rate", SESSION_RATE_HELP, SESSION_RATE_UNITS)


BANDWIDTH_UNITS = {**{f"{u}/s": f for u, f in SIZE_UNITS.items()}, **{f"{u}/s": f for u, f in BIT_UNITS.items()},
                   **BPS_UNITS, **{u: f for u, f in BIT_UNITS.items() if u not in ("b", "bit")}}
"""Bytes per second per unit of a bandwidth."""


def parse_bandwidth(value: Any) -> float:
    """Bytes per second from '25GB/s', '200Gbps', '100Gbit' (per second implied), or a number of bytes/s."""
    if isinstance(value, str):
        _n, unit = _split(value, "a bandwidth", BANDWIDTH_HELP)
        if unit in SIZE_UNITS:
            raise _error("'{value}' is a size, not a bandwidth: say per second", BANDWIDTH_HELP, value=value,
                         example=f"{value.strip()}/s")
    return _scaled(value, "a bandwidth", BANDWIDTH_HELP, BANDWIDTH_UNITS)


def _schema(example: str, help_text: str) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number", "minimum": 0}],
                           "description": help_text, "examples": [example]})


Size = Annotated[int, BeforeValidator(parse_size), _schema("64GiB", SIZE_HELP)]
Duration = Annotated[float, BeforeValidator(parse_duration), _schema("50ms", DURATION_HELP)]
Rate = Annotated[float, BeforeValidator(parse_rate), _schema("40/s", RATE_HELP)]
Bandwidth = Annotated[float, BeforeValidator(parse_bandwidth), _schema("25GB/s", BANDWIDTH_HELP)]
SessionRate = Annotated[float, BeforeValidator(parse_session_rate), _schema("4.7sessions/s", SESSION_RATE_HELP)]


MAX_ARRIVAL_RATE = 1e6
"""The fastest open loop kvplan simulates or sends, per second: a million requests (or sessions) a second is
thousands of times what a vLLM instance serves, and far below the rates (1e300/s) whose arrivals, drawn in batches,
ask numpy for arrays past its largest dimension."""


def _open_loop(kind: str, help_text: str) -> AfterValidator:
    """A rate an open loop runs at: 0 would send nothing, and every gap between arrivals would be infinite; above
    MAX_ARRIVAL_RATE no cluster serves it, and its draws do not fit in memory."""
    def check(value: float) -> float:
        if value <= 0:
            raise _error("{kind} of 0 sends nothing (the gap between arrivals would be infinite): it must be more "
                         "than 0", help_text, kind=kind)
        if value > MAX_ARRIVAL_RATE:
            raise _error(f"{{kind}} of {value:g}/s is more than the {MAX_ARRIVAL_RATE:g}/s kvplan simulates "
                         f"(thousands of times what a vLLM instance serves): it must be more than 0 and at most "
                         f"{MAX_ARRIVAL_RATE:g}/s", help_text, kind=kind)
        return value
    return AfterValidator(check)


ArrivalRate = Annotated[Rate, _open_loop("a request rate", RATE_HELP)]
"""Requests per second of an open loop: more than 0, at most MAX_ARRIVAL_RATE."""
SessionArrivalRate = Annotated[SessionRate, _open_loop("a session rate", SESSION_RATE_HELP)]
"""New sessions per second of an open loop: more than 0, at most MAX_ARRIVAL_RATE."""


# ---- writing a value back in the spec's grammar ------------------------------------------

UNIT_KINDS = {parse_size: "size", parse_duration: "duration", parse_rate: "rate", parse_bandwidth: "bandwidth",
              parse_session_rate: "session rate"}
"""The parser of each unit kind, by name (reference docs and the spec writer find a field's kind by it)."""

_WRITTEN = {"size": (SIZE_UNITS, parse_size), "duration": (DURATION_UNITS, parse_duration),
            "rate": ({"/s": 1.0, "/min": 1 / 60, "/h": 1 / 3600}, parse_rate),
            "session rate": ({"sessions/s": 1.0, "sessions/min": 1 / 60, "sessions/h": 1 / 3600}, parse_session_rate),
            "bandwidth": ({f"{u}/s": f for u, f in SIZE_UNITS.items() if u != "B"}
                          | {u: f for u, f in BPS_UNITS.items() if u != "bps"}, parse_bandwidth)}


def spelled(kind: str, value: float) -> str | float:
    """`value` (base units) in the largest unit of this grammar that reads back exactly, with at
    most six significant digits: 2e9 -> '2GB', 2**31 -> '2GiB', 3.84e12 -> '3.84TB', 0.05 -> '50ms',
    1/60 -> '1/min'; the bare number (read in the base unit) when no unit is exact."""
    units, parse = _WRITTEN[kind]
    # Rates read best per second (0.8/s, not 48/min); the other kinds in their largest unit.
    rate = kind in ("rate", "session rate")
    order = list(units.items()) if rate else sorted(units.items(), key=lambda item: -item[1])
    for name, factor in order:
        mantissa = value / factor
        if (mantissa < 1 and not rate) or not math.isclose(float(f"{mantissa:.6g}"), mantissa, rel_tol=1e-12):
            continue
        text = f"{mantissa:.6g}{name}"
        if "e" not in f"{mantissa:.6g}" and (parse(text) == value if kind == "size" else math.isclose(parse(text), value, rel_tol=1e-12)):
            return text
    return value


# ---- formatting for humans -------------------------------------------------------------

def fmt_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units, as memory is sized)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_bandwidth(bps: float) -> str:
    """Bytes/s in decimal units, as links are sold: 25e9 -> '25.0 GB/s'."""
    for unit in ("B/s", "KB/s", "MB/s", "GB/s", "TB/s"):
        if abs(bps) < 1000 or unit == "TB/s":
            return f"{bps:.1f} {unit}"
        bps /= 1000
    raise AssertionError("unreachable")


def fmt_duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 3600:
        return f"{seconds:.1f} s"
    return f"{seconds / 3600:.1f} h"


def fmt_count(n: float) -> str:
    return f"{n:,.0f}"


def fmt_si(n: float) -> str:
    """Counts in a few characters: 1369280 -> '1.37M'."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def pct(share: float) -> str:
    """A share between 0 and 1 as a percentage: 0.1234 -> '12.3%'."""
    return f"{100 * share:.1f}%"
