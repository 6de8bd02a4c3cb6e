"""An axis of a report plot: the scale from data to pixels, its round tick values and their labels.

A linear scale widens its domain to round steps (1, 2, 2.5 or 5 times a power of ten) and a log
scale to whole decades. Bytes are the exception, because the tables next to the plots print them
in binary units: a byte axis steps in KiB, MiB, GiB or TiB (0, 250 MiB, 500 MiB, ...; a log byte
axis at powers of two: 1 MiB, 32 MiB, 1 GiB, ...), so a plot never says GB where its table says
GiB. A label format is a plain function of the value (`fmt_seconds`, `fmt_bytes`, ...); the
chart asks `scale_for` which scale a format's values want.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..units import SIZE_UNITS

Format = Callable[[float], str]

BINARY_UNITS = sorted(((unit, size) for unit, size in SIZE_UNITS.items() if unit.endswith("iB")), key=lambda u: -u[1])
"""The binary units of a spec size, largest first (PiB ... KiB)."""


def nice_step(span: float, count: int = 5) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about `count` intervals."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / count
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * power * (1 + 1e-9):
            return mult * power
    return 10 * power


def binary_step(span: float, count: int = 5) -> float:
    """A round step in the binary unit of the raw step: 250 MiB, 2 GiB, 512 KiB."""
    raw = span / count if span > 0 and math.isfinite(span) else 1.0
    unit = next((size for _, size in BINARY_UNITS if raw >= size), 1)
    return nice_step(raw * count / unit, count) * unit


@dataclass(frozen=True)
class Scale:
    """Maps the domain lo..hi onto pixels a..b, linearly or logarithmically (`binary`: in powers of two)."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False
    binary: bool = False

    @classmethod
    def fit(cls, values: Sequence[float], a: float, b: float, *, log: bool = False, zero: bool = False,
            lo: float | None = None, hi: float | None = None, binary: bool = False) -> "Scale":
        """A scale covering `values` widened to round tick values (from 0 when `zero`)."""
        finite = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
        vmin = lo if lo is not None else (min(finite) if finite else 0.0)
        vmax = hi if hi is not None else (max(finite) if finite else 1.0)
        if log:
            vmin = vmin if vmin > 0 else (vmax / 10 if vmax > 0 else 1e-3)
            vmax = vmax if vmax > vmin else vmin * 10
            if binary:
                every = _log2_every(math.log2(vmax) - math.log2(vmin))
                return cls(2.0 ** (every * math.floor(math.log2(vmin) / every + 1e-9)),
                           2.0 ** (every * math.ceil(math.log2(vmax) / every - 1e-9)), a, b, True, True)
            return cls(10 ** math.floor(math.log10(vmin) + 1e-9), 10 ** math.ceil(math.log10(vmax) - 1e-9), a, b, True)
        if zero:
            vmin, vmax = min(vmin, 0.0), max(vmax, 0.0)
        if vmax <= vmin:                    # one value: a tenth of it either side (0: the unit interval)
            vmin, vmax = (vmin - 0.1 * abs(vmin), vmax + 0.1 * abs(vmax)) if vmin else (0.0, 1.0)
        step = (binary_step if binary else nice_step)(vmax - vmin)
        new_lo = vmin if lo is not None else math.floor(vmin / step + 1e-9) * step
        new_hi = vmax if hi is not None else math.ceil(vmax / step - 1e-9) * step
        return cls(new_lo, new_hi, a, b, binary=binary)

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo) if self.hi != self.lo else 0.0
        return self.a + t * (self.b - self.a)

    @property
    def step(self) -> float:
        """The linear scale's tick step."""
        return (binary_step if self.binary else nice_step)(self.hi - self.lo)

    def ticks(self) -> list[float]:
        if self.log and self.binary:
            first, last = round(math.log2(self.lo)), round(math.log2(self.hi))
            every = _log2_every(last - first)
            return [2.0 ** e for e in range(first, last + 1) if e % every == 0]
        if self.log:
            first, last = round(math.log10(self.lo)), round(math.log10(self.hi))
            mults = (1,) if last - first > 2 else (1, 2, 5)
            return [m * 10.0 ** k for k in range(first, last + 1) for m in mults if m * 10.0 ** k <= self.hi * (1 + 1e-9)]
        step = self.step
        start = math.ceil(self.lo / step - 1e-9)
        return [round(k * step, 12) for k in range(start, math.floor(self.hi / step + 1e-9) + 1)]


def _log2_every(bits: float) -> int:
    """Powers of two a log byte axis ticks: every bit over a short span, every 5 (x32) or 10 (x1024) over longer."""
    return next(every for every in (1, 2, 5, 10, 20) if bits / every <= 8)


def scale_for(fmt: Format, values: Sequence[float], a: float, b: float, **kw) -> Scale:
    """The scale of an axis labelled by `fmt`: binary steps for bytes, decimal ones for everything else."""
    return Scale.fit(values, a, b, binary=fmt is fmt_bytes, **kw)


# --- label formats ------------------------------------------------------------------------------

def _trim(text: str) -> str:
    return text.replace(".0 ", " ") if ".0 " in text else text.removesuffix(".0")


def fmt_seconds(s: float) -> str:
    """Durations: '0', '500 us', '20 ms', '1.5 s', '1,200 s'."""
    if s == 0:
        return "0"
    if abs(s) < 1e-3:
        return _trim(f"{s * 1e6:.3g} us")
    if abs(s) < 1:
        return _trim(f"{s * 1e3:.3g} ms")
    if abs(s) < 1000:
        return _trim(f"{s:.3g} s")
    return f"{s:,.0f} s"


def fmt_share(x: float) -> str:
    """A share as a percentage: 0.25 -> '25%', 0.125 -> '12.5%'."""
    return f"{100 * x:.3g}%"


def fmt_plain(x: float) -> str:
    if x == 0:
        return "0"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def fmt_bytes(n: float) -> str:
    """Bytes in binary units, as the tables print them: '0', '250 MiB', '1.5 GiB', '32 TiB'."""
    if n == 0:
        return "0"
    for unit, size in BINARY_UNITS:
        if abs(n) >= size:
            return _trim(f"{n / size:.4g} {unit}")
    return f"{n:.0f} B"


def fmt_dollars(x: float) -> str:
    return f"${x:,.2f}" if abs(x) < 100 else f"${x:,.0f}"


def dollars_telling_apart(values: Sequence[float]) -> Format:
    """A dollar format with enough decimals that the distinct `values`, and the ticks of an axis over them, read
    distinct ($0.1658, $0.1661)."""
    distinct = sorted(set(v for v in values if math.isfinite(v)))
    gaps = [b - a for a, b in zip(distinct, distinct[1:]) if b - a > 0]
    if not gaps:
        return fmt_dollars
    finest = min(min(gaps), nice_step(distinct[-1] - distinct[0]))
    decimals = min(6, max(2, math.ceil(-math.log10(finest) - 1e-9)))
    return lambda x: f"${x:,.{decimals}f}" if decimals > 2 or abs(x) < 100 else f"${x:,.0f}"


def label_px(text: str, size: int = 11) -> float:
    """The rough width of a label in pixels (an 11 px sans-serif character is about 6.4 px wide)."""
    return 6.4 * size / 11 * len(text)


__all__ = ["Format", "Scale", "binary_step", "dollars_telling_apart", "fmt_bytes", "fmt_dollars", "fmt_plain",
           "fmt_seconds", "fmt_share", "label_px", "nice_step", "scale_for"]
