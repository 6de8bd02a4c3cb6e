"""Human units: what a spec may write, and the base units kvplan holds."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from kvplan.units import Bandwidth, Duration, Rate, Size, fmt_bytes, fmt_duration, fmt_si


@pytest.mark.parametrize("text, value", [("64GiB", 64 * 2**30), ("1.5TB", 1.5e12), ("8GB", 8e9), ("512MiB", 2**29),
                                         ("64 gib", 64 * 2**30), (4096, 4096), (2.0, 2)])
def test_sizes_become_bytes(text, value):
    assert TypeAdapter(Size).validate_python(text) == value


@pytest.mark.parametrize("text, value", [("50ms", 0.05), ("24h", 86400), ("1d", 86400), ("10min", 600), (3, 3.0)])
def test_durations_become_seconds(text, value):
    assert TypeAdapter(Duration).validate_python(text) == pytest.approx(value)


@pytest.mark.parametrize("text, value", [("40/s", 40), ("600/min", 10), (2, 2.0)])
def test_rates_become_per_second(text, value):
    assert TypeAdapter(Rate).validate_python(text) == pytest.approx(value)


@pytest.mark.parametrize("text, value", [("25GB/s", 25e9), ("3.35TB/s", 3.35e12), ("100Gbit", 12.5e9),
                                         ("100Gbit/s", 12.5e9), (1e9, 1e9)])
def test_bandwidths_become_bytes_per_second(text, value):
    assert TypeAdapter(Bandwidth).validate_python(text) == pytest.approx(value)


@pytest.mark.parametrize("kind, text", [(Size, "8 parsecs"), (Size, -1), (Size, 2.5), (Size, True), (Size, None),
                                        (Duration, "5GB"), (Duration, "40/s"), (Duration, "-5s"), (Duration, "1e400s"),
                                        (Duration, "((("), (Rate, "5s"), (Rate, "5GB/s"), (Bandwidth, "40/s"),
                                        (Bandwidth, "5 ms"), (Bandwidth, "nan GB/s")])
def test_wrong_units_are_refused_with_what_is_allowed(kind, text):
    with pytest.raises(ValidationError) as info:
        TypeAdapter(kind).validate_python(text)
    [error] = info.value.errors()
    assert error["type"] == "unit" and "such as" in error["ctx"]["help"]


def test_formatting_for_people():
    assert fmt_bytes(1536) == "1.5 KiB" and fmt_bytes(800) == "800 B"
    assert fmt_duration(0.0005) == "500 us" and fmt_duration(0.05) == "50.0 ms" and fmt_duration(7200) == "2.0 h"
    assert fmt_si(1_369_280) == "1.37M" and fmt_si(950) == "950"
