"""Human units: what a spec may write, and the base units kvplan holds."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from conftest import REPO
from kvplan.units import Bandwidth, Duration, Rate, SessionRate, Size, fmt_bytes, fmt_duration, fmt_si


KINDS = {"size": Size, "duration": Duration, "rate": Rate, "bandwidth": Bandwidth, "session rate": SessionRate}
UNITS_DOC = (REPO / "docs" / "units.md").read_text()


def table(title: str) -> list[list[str]]:
    """The rows of docs/units.md's table under `## title`, cells without their backticks."""
    section = UNITS_DOC.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip().strip("`") for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("|")]
    return rows[2:]                                            # past the header and its rule


def written(text: str):
    """A table cell as a spec would hold it: a bare number is a YAML number."""
    try:
        return int(text)
    except ValueError:
        return text


@pytest.mark.parametrize("kind, text, value", [row for row in table("Accepted")], ids=lambda v: str(v))
def test_every_accepted_form_in_the_docs_reads_as_the_docs_say(kind, text, value):
    number = float(value.split()[0])
    assert TypeAdapter(KINDS[kind]).validate_python(written(text)) == pytest.approx(number, rel=1e-12)


@pytest.mark.parametrize("kind, text, why, fix", [row for row in table("Refused")], ids=lambda v: str(v))
def test_every_refused_form_in_the_docs_is_refused_with_its_fix(kind, text, why, fix):
    value = float(text) if text.replace(".", "").isdigit() else text
    with pytest.raises(ValidationError) as info:
        TypeAdapter(KINDS[kind]).validate_python(value)
    [error] = info.value.errors()
    assert error["type"] == "unit" and "such as" in error["ctx"]["help"]
    assert error["ctx"]["example"] == fix


def test_the_spec_forms_that_used_to_be_misread():
    # Pint read 'rps' as revolutions per second (31.4/s) and 'Gb' as gigabytes.
    assert TypeAdapter(Rate).validate_python("5rps") == 5.0
    assert TypeAdapter(Rate).validate_python("5 rpm") == pytest.approx(5 / 60)
    with pytest.raises(ValidationError, match="bits"):
        TypeAdapter(Size).validate_python("8Gb")
    assert TypeAdapter(Bandwidth).validate_python("50Gbps") == 6.25e9


@pytest.mark.parametrize("kind, text", [(Size, -1), (Size, True), (Size, None), (Duration, "1e400s"), (Duration, "((("),
                                        (Bandwidth, "nan GB/s"), (Size, "9" * 5000), (Rate, [1])])
def test_odd_input_is_refused_with_what_is_allowed(kind, text):
    with pytest.raises(ValidationError) as info:
        TypeAdapter(kind).validate_python(text)
    [error] = info.value.errors()
    assert error["type"] == "unit" and "such as" in error["ctx"]["help"]


def test_a_spec_error_names_the_field_and_the_fix():
    from conftest import example_data, with_changes
    from kvplan.errors import SpecError
    from kvplan.spec import from_mapping

    with pytest.raises(SpecError) as info:
        from_mapping(with_changes(example_data("local"), lmcache__ddr__size="8Gb"))
    [problem] = info.value.problems
    assert problem.path == "lmcache.ddr.size" and problem.fix == "write it like '1GB'"
    assert "KiB" in problem.allowed


def test_formatting_for_people():
    assert fmt_bytes(1536) == "1.5 KiB" and fmt_bytes(800) == "800 B"
    assert fmt_duration(0.0005) == "500 us" and fmt_duration(0.05) == "50.0 ms" and fmt_duration(7200) == "2.0 h"
    assert fmt_si(1_369_280) == "1.37M" and fmt_si(950) == "950"
