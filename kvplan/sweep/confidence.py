"""Confidence: what per-seed values of a metric let a decision say, at 95 %.

A run is one seed of a random workload, so a latency percentile from it is one draw of a noisy
number. Over n seeds, the mean and its 95 % Student-t confidence interval (half-width
t(0.975, n-1) * s / sqrt(n); `confidence` below, the same code as
`kvplan simulate --seeds N` and sweeps) say how far that number can be trusted. Two decisions
rest on it:

- **Against a target** (`classify`): *met* when the interval's upper end is at or below the
  target, *missed* when its lower end is above it, *undecided* when the target lies inside the
  interval (more seeds may decide it). One seed has no interval: its value is compared as it
  is, and `Verdict.tested` is False so that the output can say the decision was not tested.
- **Between two setups run on the same seeds** (`compare`): the mean of the per-seed differences
  and its interval. The setups share their workloads seed by seed, so the paired difference
  removes the noise both see alike; the difference is *distinguishable* when its interval
  excludes 0, and *within noise* otherwise. Identical values on every seed differ by exactly 0.

`fmt_interval` prints a figure with its interval at the precision the interval supports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np


def confidence(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % confidence interval (Student t)."""
    a = np.asarray(values, dtype=float)
    if a.size < 2:
        return float(a.mean()), 0.0
    return float(a.mean()), float(_t95(a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))


T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}
"""Two-sided 95 % quantiles of Student's t by degrees of freedom (standard tables)."""


def _t95(df: int) -> float:
    """t for `df`, rounding df down to the nearest tabulated value (a slightly wider interval)."""
    return T95[max(k for k in T95 if k <= df)] if df < 120 else 1.96


Outcome = Literal["met", "missed", "undecided"]


@dataclass(frozen=True)
class Verdict:
    """Per-seed values of one metric against a target (an upper bound: lower is better)."""

    outcome: Outcome
    mean: float
    ci95: float
    """Half-width of the 95 % interval of the mean (0 with one seed)."""
    seeds: int

    @property
    def tested(self) -> bool:
        """False with one seed: no interval, the value was compared as it is."""
        return self.seeds > 1


def classify(values: Sequence[float], target: float) -> Verdict:
    """met / missed / undecided: the 95 % interval of the mean of `values` against `target`."""
    mean, half = confidence(list(values))
    if mean + half <= target:
        outcome: Outcome = "met"
    elif mean - half > target:
        outcome = "missed"
    else:
        outcome = "undecided"
    return Verdict(outcome, mean, half, len(values))


def combine(verdicts: Sequence[Verdict]) -> Outcome:
    """Several targets together: missed when one is surely missed, met when all are surely met."""
    outcomes = [v.outcome for v in verdicts]
    if "missed" in outcomes:
        return "missed"
    return "met" if all(o == "met" for o in outcomes) else "undecided"


@dataclass(frozen=True)
class Difference:
    """b - a over the same seeds: the mean per-seed difference and its 95 % interval."""

    mean: float
    ci95: float
    seeds: int

    @property
    def tested(self) -> bool:
        return self.seeds > 1

    @property
    def distinguishable(self) -> bool:
        """The interval excludes 0 (with one seed: untested, never distinguishable)."""
        return self.tested and abs(self.mean) > self.ci95


def compare(a: Sequence[float], b: Sequence[float]) -> Difference:
    """The paired difference b - a of two setups' values, seed by seed (same seeds, same order)."""
    if len(a) != len(b):
        raise ValueError(f"paired values need the same seeds ({len(a)} vs {len(b)})")
    mean, half = confidence([y - x for x, y in zip(a, b)])
    return Difference(mean, half, len(a))


def decimals(width: float) -> int:
    """Decimal places (negative: tens, hundreds) that show a figure to the leading digit of an interval `width` wide, or to
    the digit after it when that leading digit is 1 or 2 (the usual rounding of an uncertainty:
    0.125 wide keeps two decimals, 0.5 wide one)."""
    if not width > 0 or not math.isfinite(width):
        return 3
    place = math.floor(math.log10(width))
    leading = int(width / 10 ** place + 1e-9)
    return -place + (1 if leading < 3 else 0)


def rounded(value: float, width: float) -> str:
    """`value` rounded as `decimals(width)` says: no digit the interval does not support."""
    d = decimals(width)
    return f"{round(value, d):.{max(d, 0)}f}"


def fmt_interval(value: float, low: float, high: float, unit: str = "") -> str:
    """'7.4/s (7.1\u20137.8/s)': the value and the interval's ends, rounded to the interval's width, but never
    past the second significant digit of the smallest of them: an interval wider than its figures (10 to 540)
    prints '10 (10\u2013540)', not '0 (0\u2013500)'."""
    w = high - low
    smallest = min((abs(x) for x in (value, low, high) if x), default=0.0)
    if smallest and w > smallest:
        w = smallest
    return f"{rounded(value, w)}{unit} ({rounded(low, w)}\u2013{rounded(high, w)}{unit})"


__all__ = ["Difference", "Outcome", "Verdict", "classify", "combine", "compare", "decimals", "fmt_interval", "rounded"]
