"""Human units in specs and the catalog: sizes, durations, rates and bandwidths.

A spec says "64GiB", "50ms", "40/s" or "25GB/s"; the model holds plain numbers in base units
(bytes, seconds, events per second, bytes per second). Parsing uses pydantic's `ByteSize` for
sizes and Pint for everything with a time in it, so there is no hand-written unit grammar here.

A bare number is taken in the base unit (bytes, seconds, 1/s, bytes/s). A bandwidth written
without a time ("100Gbit") means per second, the way network links are named.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BeforeValidator, ByteSize, TypeAdapter, WithJsonSchema
from pydantic_core import PydanticCustomError

SIZE_HELP = "a size such as '64GiB', '1.5TB' or '512MiB' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB; a bare integer is bytes)"
DURATION_HELP = "a duration such as '50ms', '2s', '10min' or '24h' (a bare number is seconds)"
RATE_HELP = "a rate such as '40/s' or '600/min' (a bare number is per second)"
BANDWIDTH_HELP = "a bandwidth such as '25GB/s', '3.35TB/s' or '100Gbit' (a bare number is bytes/s)"

_BYTES = TypeAdapter(ByteSize)


@lru_cache(maxsize=1)
def _registry():
    import pint  # imported on first use: most commands never parse a duration

    return pint.UnitRegistry()


def _error(message: str, help_text: str, **ctx: Any) -> PydanticCustomError:
    """A unit error; `help` (what is allowed) and `example` travel in its context for the CLI."""
    example = help_text.split("'")[1]
    return PydanticCustomError("unit", message, {"help": help_text, "example": example, **ctx})


def _quantity(text: str, kind: str, help_text: str):
    try:
        return _registry().Quantity(text.strip())
    except Exception:  # pint raises many kinds (undefined unit, tokenizer, syntax) for bad text
        raise _error("cannot read '{value}' as {kind}", help_text, value=text, kind=kind) from None


def _is_information(quantity) -> bool:
    return any("bit" in name or "byte" in name for name, _power in quantity.unit_items())


def _number(value: Any, kind: str, help_text: str) -> float | None:
    """A bare number (not bool), checked finite and non-negative; None when `value` is a string."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _error("expected {kind}, not a {type}", help_text, kind=kind, type=type(value).__name__)
    if isinstance(value, str):
        return None
    if not math.isfinite(value) or value < 0:
        raise _error("{kind} must be a finite number >= 0", help_text, kind=kind)
    return float(value)


def _finite(x: float, text: str, kind: str, help_text: str) -> float:
    if not math.isfinite(x) or x < 0:
        raise _error("{kind} '{value}' must be finite and >= 0", help_text, kind=kind, value=text)
    return x


def parse_size(value: Any) -> int:
    """Bytes from '64GiB', '1.5TB', or an integer."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, float):
        raise _error("a size in bytes must be a whole number", SIZE_HELP)
    _number(value, "size", SIZE_HELP)
    try:
        return int(_BYTES.validate_python(value.strip() if isinstance(value, str) else value))
    except Exception:
        raise _error("cannot read '{value}' as a size", SIZE_HELP, value=value) from None


def _per_time(value: Any, kind: str, help_text: str, dimension: str, unit: str) -> float:
    """A duration or a rate: a bare number, or text whose Pint dimension is `dimension`."""
    number = _number(value, kind, help_text)
    if number is not None:
        return number
    q = _quantity(value, f"a {kind}", help_text)
    if _is_information(q) or not q.check(dimension):
        raise _error(f"'{{value}}' is not a {kind}", help_text, value=value)
    return _finite(float(q.to(unit).magnitude), value, kind, help_text)


def parse_duration(value: Any) -> float:
    """Seconds from '50ms', '24h', or a number of seconds."""
    return _per_time(value, "duration", DURATION_HELP, "[time]", "second")


def parse_rate(value: Any) -> float:
    """Events per second from '40/s', '600/min', or a number per second."""
    return _per_time(value, "rate", RATE_HELP, "1/[time]", "1/second")


def parse_bandwidth(value: Any) -> float:
    """Bytes per second from '25GB/s', '100Gbit' (per second implied), or a number of bytes/s."""
    number = _number(value, "bandwidth", BANDWIDTH_HELP)
    if number is not None:
        return number
    q = _quantity(value, "a bandwidth", BANDWIDTH_HELP)
    if not _is_information(q):
        raise _error("'{value}' is not a bandwidth (no bits or bytes in it)", BANDWIDTH_HELP, value=value)
    try:
        if q.check("1/[time]"):
            return _finite(float(q.to("byte/second").magnitude), value, "bandwidth", BANDWIDTH_HELP)
        if q.dimensionless:
            return _finite(float(q.to("byte").magnitude), value, "bandwidth", BANDWIDTH_HELP)
    except Exception:
        pass
    raise _error("'{value}' is not a bandwidth", BANDWIDTH_HELP, value=value)


def _schema(example: str, help_text: str) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number", "minimum": 0}],
                           "description": help_text, "examples": [example]})


Size = Annotated[int, BeforeValidator(parse_size), _schema("64GiB", SIZE_HELP)]
Duration = Annotated[float, BeforeValidator(parse_duration), _schema("50ms", DURATION_HELP)]
Rate = Annotated[float, BeforeValidator(parse_rate), _schema("40/s", RATE_HELP)]
Bandwidth = Annotated[float, BeforeValidator(parse_bandwidth), _schema("25GB/s", BANDWIDTH_HELP)]


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
