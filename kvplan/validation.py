"""One validation round: a spec read with every problem its layers can find at once.

A spec is checked in layers: its fields (units, types, allowed values), the rules of the real stack
across fields (spec/rules.py), then the catalog (kvplan.resolve: names, tensor parallelism against
the model, weights in HBM). Each layer needs the one below to pass, so a spec with mistakes in
several layers took a round of `kvplan validate` per layer. `load` reports them together: the
field problems, the rules of the sections that parsed (spec/partial.py) and the catalog checks
those sections allow. A valid spec is returned as spec.load returns it; `resolve` then makes the
catalog checks that need the whole spec (tiers, Ceph capacity).

`--set PATH=VALUE` overrides (spec/overrides.py) are applied here, to the file's mapping before it is validated,
so every command that reads a spec sees the same overridden spec; a problem with an overridden field says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import SpecError
from .spec import Topology, from_mapping as spec_from_mapping
from .spec.load import read_spec
from .spec.overrides import Change, Override, apply as apply_overrides, attributed


def read(path: str | Path, overrides: Iterable[Override] = (),
         on_change: Callable[[Change], None] | None = None) -> tuple[Any, Path, str]:
    """A spec file's mapping with the --set overrides applied (each change passed to `on_change`), the folder its
    relative paths are read from and its name in messages (spec.load.read_spec)."""
    data, base_dir, source = read_spec(path)
    data, changes = apply_overrides(data, overrides, source)
    for change in changes:
        if on_change is not None:
            on_change(change)
    return data, base_dir, source


def load(path: str | Path, overrides: Iterable[Override] = (),
         on_change: Callable[[Change], None] | None = None) -> Topology:
    """spec.load with the --set overrides applied, whose SpecError also holds the catalog problems of the sections
    that validated."""
    overrides = tuple(overrides)
    data, base_dir, source = read(path, overrides, on_change)
    return from_mapping(data, base_dir, source, overrides)


def from_mapping(data: Any, base_dir: str | Path | None = None, source: str | None = None,
                 overrides: Iterable[Override] = ()) -> Topology:
    """spec.from_mapping, whose SpecError also holds the catalog problems of the sections that validated, and says
    which problems are of fields the `overrides` (already applied to `data`) set."""
    try:
        return spec_from_mapping(data, base_dir=base_dir, source=source)
    except SpecError as exc:
        if not isinstance(data, dict):
            raise attributed(exc, overrides) from None
        from .resolve import catalog_problems
        from .spec.partial import sections

        found = catalog_problems(sections(data, str(base_dir) if base_dir is not None else None), exc.problems)
        raise attributed(SpecError([*exc.problems, *found], exc.source), overrides) from None
