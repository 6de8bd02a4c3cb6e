"""The run cache: simulation results on disk, keyed by (spec hash, seed).

A run is a pure function of the spec, the seed and kvplan itself (the simulator's code and the
catalog), so a result computed once never needs computing again. `kvplan sweep` and
`kvplan capacity` look every run up here first: a repeated search, or a sweep sharing points with
an earlier one, simulates nothing it has simulated before.

Layout: `<cache dir>/<kvplan fingerprint>/<spec hash>-<seed>.json`, each file one SimResult's
JSON. The fingerprint is a hash of kvplan's version, the simulator and resolver source and the
catalog files, so editing any of them (or upgrading kvplan) starts a fresh folder instead of
serving stale results. Deleting the cache folder is always safe.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from ..sim.result import SimResult
from .executor import OnDone, Task, run_tasks

@lru_cache(maxsize=1)
def fingerprint() -> str:
    """What the results depend on besides the spec and the seed: kvplan's version, code and catalog."""
    from .. import __version__
    from ..resources import data_root

    package = Path(__file__).resolve().parent.parent
    files = sorted([*(package / "sim").glob("*.py"), package / "resolve.py", package / "catalog.py",
                    *(data_root() / "models").rglob("*.yaml")])
    digest = hashlib.sha256(__version__.encode())
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


class RunCache:
    """Results of earlier runs under `root` (created on first write)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.folder = self.root / fingerprint()

    def _path(self, spec_hash: str, seed: int) -> Path:
        return self.folder / f"{spec_hash}-{seed}.json"

    def get(self, spec_hash: str, seed: int) -> SimResult | None:
        path = self._path(spec_hash, seed)
        try:
            return SimResult.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:                     # a truncated or foreign file: run it again
            return None

    def put(self, result: SimResult) -> None:
        """Store a result atomically (a reader never sees half a file)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(result.model_dump_json())
            os.chmod(tmp, 0o644)                # mkstemp's 0600 would keep a shared cache private
            os.replace(tmp, self._path(result.spec_hash, result.seed))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def run_cached(tasks: Sequence[Task], cache: RunCache | None, workers: int = 1, ray: str | None = None,
               on_done: OnDone | None = None) -> tuple[list[SimResult], int]:
    """`run_tasks` that first looks each task up in `cache`; returns the results and how many were simulated.

    Tasks repeated within `tasks` run once.
    """
    results: list[SimResult | None] = [None] * len(tasks)
    todo: dict[tuple[str, int], list[int]] = {}
    for i, task in enumerate(tasks):
        key = (task.spec.spec_hash(), task.seed)
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
    for idx, result in zip(todo.values(), fresh):
        if cache is not None:
            cache.put(result)
        for i in idx:
            results[i] = result
    return results, len(fresh)  # type: ignore[return-value]


__all__ = ["RunCache", "fingerprint", "run_cached"]
