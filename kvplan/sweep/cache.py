"""The run cache: simulation results on disk, keyed by (spec hash, seed).

A run is a pure function of the spec, the seed and kvplan itself (the simulator's code and the
catalog), so a result computed once never needs computing again. `kvplan sweep` and
`kvplan capacity` look every run up here first: a repeated search, or a sweep sharing points with
an earlier one, simulates nothing it has simulated before.

Layout: `<cache dir>/<kvplan fingerprint>/<spec hash>-<seed>.json`, each file one SimResult's
JSON; a run the planner stopped at a certain SLO miss (kvplan.sim.slo_watch) is kept as
`<spec hash>-<seed>-miss-<targets hash>.json`, the SloMiss, valid for those targets only; what the
planner measures of a workload before simulating (kvplan.plan.bounds) as `workload-<hash>.json`. The
fingerprint is a hash of kvplan's version, the simulator, resolver and planner-bounds source and
the catalog files, so editing any of them (or upgrading kvplan) starts a fresh folder instead of serving
stale results. Deleting the cache folder is always safe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from ..sim.result import SimResult
from ..sim.slo_watch import SloMiss
from .executor import OnDone, Outcome, Task, run_tasks

RESOLVE_MODULES = ("resolve.py", "accelerator_fit.py", "kv_capacity.py", "step_coefficients.py", "resolved_tiers.py",
                   "router_settings.py", "offload.py", "node_storage.py")
"""The resolver: resolve.py and the modules whose numbers it joins into Resolved, which every run reads."""


@lru_cache(maxsize=1)
def fingerprint() -> str:
    """What the results depend on besides the spec and the seed: kvplan's version, code and catalog."""
    from .. import __version__
    from ..resources import data_root

    package = Path(__file__).resolve().parent.parent
    files = sorted([*(package / "sim").glob("*.py"), *(package / name for name in RESOLVE_MODULES), package / "catalog.py",
                    package / "plan" / "bounds.py", *(data_root() / "models").rglob("*.yaml")])
    digest = hashlib.sha256(__version__.encode())
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


class RunCache:
    """Results of earlier runs under `root` (created on first write)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.folder = self.root / fingerprint()

    def _path(self, spec_hash: str, seed: int, stop_at_miss: tuple = ()) -> Path:
        if not stop_at_miss:
            return self.folder / f"{spec_hash}-{seed}.json"
        targets = hashlib.sha256(repr(tuple(sorted(stop_at_miss))).encode()).hexdigest()[:12]
        return self.folder / f"{spec_hash}-{seed}-miss-{targets}.json"

    def get(self, spec_hash: str, seed: int, stop_at_miss: tuple = ()) -> Outcome | None:
        """The finished run, else (given `stop_at_miss`) the certain miss found for those targets, else None."""
        try:
            return SimResult.model_validate_json(self._path(spec_hash, seed).read_bytes())
        except (FileNotFoundError, ValueError):    # ValueError: a truncated or foreign file: run it again
            pass
        if stop_at_miss:
            try:
                return SloMiss(**json.loads(self._path(spec_hash, seed, stop_at_miss).read_bytes()))
            except (FileNotFoundError, ValueError, TypeError):
                pass
        return None

    def put(self, result: SimResult) -> None:
        """Store a result atomically (a reader never sees half a file)."""
        self._write(self._path(result.spec_hash, result.seed), result.model_dump_json())

    def put_miss(self, spec_hash: str, seed: int, stop_at_miss: tuple, miss: SloMiss) -> None:
        self._write(self._path(spec_hash, seed, stop_at_miss), json.dumps(dataclasses.asdict(miss)))

    def get_workload(self, key: str) -> dict | None:
        """What `put_workload` kept under `key`, or None."""
        try:
            return json.loads(self._workload_path(key).read_bytes())
        except (FileNotFoundError, ValueError):
            return None

    def put_workload(self, key: str, data: dict) -> None:
        self._write(self._workload_path(key), json.dumps(data))

    def _workload_path(self, key: str) -> Path:
        return self.folder / f"workload-{key}.json"

    def _write(self, path: Path, text: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o644)                # mkstemp's 0600 would keep a shared cache private
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def run_cached(tasks: Sequence[Task], cache: RunCache | None, workers: int = 1, ray: str | None = None,
               on_done: OnDone | None = None) -> tuple[list, int]:
    """`run_tasks` that first looks each task up in `cache`; returns the results and how many were simulated.

    Tasks repeated within `tasks` run once. A task with `stop_at_miss` may get a cached finished run
    (which decides the same) or a SloMiss.
    """
    results: list[Outcome | None] = [None] * len(tasks)
    todo: dict[tuple[str, int, tuple], list[int]] = {}
    for i, task in enumerate(tasks):
        key = (task.spec.spec_hash(), task.seed, task.stop_at_miss)
        hit = cache.get(*key) if cache is not None and key not in todo else None
        if hit is not None:
            results[i] = hit
        else:
            todo.setdefault(key, []).append(i)
    cached = sum(r is not None for r in results)
    total = cached + len(todo)
    if on_done and cached:
        on_done(cached, total)
    progress = (lambda done, _n: on_done(cached + done, total)) if on_done else None
    fresh = run_tasks([tasks[idx[0]] for idx in todo.values()], workers=workers, ray=ray, on_done=progress)
    for (spec_hash, seed, stop), idx, result in zip(todo, todo.values(), fresh):
        if cache is not None and isinstance(result, SloMiss):
            cache.put_miss(spec_hash, seed, stop, result)
        elif cache is not None:
            cache.put(result)
        for i in idx:
            results[i] = result
    return results, len(fresh)  # type: ignore[return-value]


__all__ = ["RunCache", "fingerprint", "run_cached"]
