"""A sweep: every variant of a spec (`variants.py`), each run with N seeds, summarised per point.

The runs go through the run cache (`cache.py`) and the executor (`executor.py`), so a sweep can
use local worker processes or a Ray cluster, and re-runs nothing an earlier sweep or capacity
search already simulated. Seeds are `first, first+1, ...` for every point (`first` defaults to
each variant's `workload.seed`), so points differ only in what was varied. The spec is the file with the
--set overrides applied (spec/overrides.py); the variants vary that spec, so a --vary of an overridden path wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from ..cost import CostBreakdown, cost_of
from ..errors import SpecError
from ..resolve import resolve
from ..sim.result import SimResult
from ..spec.overrides import Change, Override, recorded
from ..spec.topology import Topology
from ..validation import from_mapping, read
from .cache import RunCache, run_cached
from .executor import OnDone, Task
from .result import SweepPoint, SweepResult, summarise
from .variants import Vary, expand


def sweep(spec_path: str | Path, varies: list[Vary], *, zip_: bool = False, seeds: int = 1,
          first_seed: int | None = None, workers: int = 1, ray: str | None = None,
          cache: RunCache | None = None, on_done: OnDone | None = None, overrides: Iterable[Override] = (),
          on_change: Callable[[Change], None] | None = None) -> tuple[SweepResult, int]:
    """Run the sweep of the spec file with the --set `overrides` applied (each change passed to `on_change`);
    returns its result and how many runs were simulated (the rest came from the cache)."""
    spec_path, overrides = Path(spec_path), tuple(overrides)
    data, _, _ = read(spec_path, overrides, on_change)
    base = from_mapping(data, spec_path.parent, str(spec_path), overrides)
    variants = expand(data, varies, zip_=zip_, base_dir=spec_path.parent, source=str(spec_path))
    seed_lists = [[(v.spec.workload.seed if first_seed is None else first_seed) + i for i in range(seeds)]
                  for v in variants]
    tasks = [Task(v.spec, seed) for v, seed_list in zip(variants, seed_lists) for seed in seed_list]
    results, simulated = run_cached(tasks, cache, workers=workers, ray=ray, on_done=on_done)
    points = []
    for i, (variant, seed_list) in enumerate(zip(variants, seed_lists)):
        runs = results[i * seeds:(i + 1) * seeds]
        points.append(SweepPoint(values=dict(variant.values), spec_hash=variant.spec.spec_hash(), seeds=seed_list,
                                 metrics=summarise(runs), cost=_cost(variant.spec, runs),
                                 slo=variant.spec.slo.targets()))
    result = SweepResult(name=base.name, spec_hash=base.spec_hash(), varied=[v.path for v in varies], zip=zip_,
                         points=points, overrides=recorded(overrides))
    return result, simulated


__all__ = ["sweep"]


def _cost(spec: Topology, runs: list[SimResult]) -> CostBreakdown | None:
    """The point's bill; a price neither the catalog nor the spec has leaves it out (the table says so)."""
    try:
        return cost_of(spec, resolve(spec), runs)
    except SpecError:
        return None
