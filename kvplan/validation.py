"""One validation round: a spec read with every problem its layers can find at once.

A spec is checked in layers: its fields (units, types, allowed values), the rules of the real stack
across fields (spec/rules.py), then the catalog (kvplan.resolve: names, tensor parallelism against
the model, weights in HBM). Each layer needs the one below to pass, so a spec with mistakes in
several layers took a round of `kvplan validate` per layer. `load` reports them together: the
field problems, the rules of the sections that parsed (spec/partial.py) and the catalog checks
those sections allow. A valid spec is returned as spec.load returns it; `resolve` then makes the
catalog checks that need the whole spec (tiers, Ceph capacity).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import SpecError
from .spec import Topology, from_mapping as spec_from_mapping
from .spec.load import read_spec


def load(path: str | Path) -> Topology:
    """spec.load, whose SpecError also holds the catalog problems of the sections that validated."""
    data, base_dir, source = read_spec(path)
    return from_mapping(data, base_dir, source)


def from_mapping(data: Any, base_dir: str | Path | None = None, source: str | None = None) -> Topology:
    """spec.from_mapping, whose SpecError also holds the catalog problems of the sections that validated."""
    try:
        return spec_from_mapping(data, base_dir=base_dir, source=source)
    except SpecError as exc:
        if not isinstance(data, dict):
            raise
        from .resolve import catalog_problems
        from .spec.partial import sections

        found = catalog_problems(sections(data, str(base_dir) if base_dir is not None else None), exc.problems)
        if not found:
            raise
        raise SpecError([*exc.problems, *found], exc.source) from None
