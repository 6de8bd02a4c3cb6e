"""Running many simulations: a Task is one (spec, seed) run, and `run_tasks` runs a list of them.

The same tasks give the same results, byte for byte, whichever way they run:

- `workers=1` (the default): one after the other in this process;
- `workers=N`: a local pool of N processes (`concurrent.futures`, spawn start method);
- `ray="auto"`, `"local"` or a cluster address (`"ray://host:10001"`, `"host:6379"`): as Ray
  tasks (see `connect_ray`).

Every way ships a task as the spec's canonical JSON plus the seed, and `simulate` below turns
that back into a Topology, resolves it against the catalog and runs it, so all three run the
same code on the same input. Relative trace paths are already absolute in a validated Topology
(the loader resolves them against the spec's folder), so a worker reads the same file whatever
its working directory; on a Ray cluster of several machines that file and kvplan itself must be
present on every node.

Ray is optional (`pip install 'kvplan[scale]'`) and imported only when asked for.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any, Callable, Sequence, Union

from ..errors import Problem, SpecError
from ..sim.result import SimResult
from ..sim.slo_watch import SloMiss, SloMissed
from ..spec.topology import Topology


@dataclass(frozen=True)
class Task:
    """One simulation run: this spec with this seed."""

    spec: Topology
    seed: int
    stop_at_miss: tuple[tuple[str, float], ...] = ()
    """SLO targets (key, seconds) whose certain miss ends the run early with a SloMiss instead of a
    SimResult (kvplan.sim.slo_watch); empty: run to the end."""


Outcome = Union[SimResult, SloMiss]


OnDone = Callable[[int, int], None]
"""Called as on_done(finished, total) after each task finishes (in the calling process)."""


def simulate(spec_json: str, seed: int, stop_at_miss: tuple[tuple[str, float], ...] = ()) -> tuple[str, Any]:
    """Run one task from its shipped form; ("ok", SimResult), ("missed", SloMiss) or ("error", (problems, source)).

    A SpecError (a bad trace line, say) travels back as its problems: the exception itself does
    not survive pickling with its problems intact.
    """
    from ..resolve import resolve
    from ..sim.run import run

    try:
        return "ok", run(resolve(Topology.model_validate_json(spec_json)), seed=seed,
                         stop_at_miss=dict(stop_at_miss) or None)
    except SloMissed as exc:
        return "missed", exc.miss
    except SpecError as exc:
        return "error", (exc.problems, exc.source)


def _unwrap(outcome: tuple[str, Any]) -> Outcome:
    kind, value = outcome
    if kind == "error":
        raise SpecError(*value)
    return value


def run_tasks(tasks: Sequence[Task], workers: int = 1, ray: str | None = None,
              on_done: OnDone | None = None) -> list[Outcome]:
    """Simulate every task; the results come back in task order, identical whichever executor ran them.
    A task with `stop_at_miss` gives a SloMiss when it stopped early, else its SimResult."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    shipped = [(task.spec.model_dump_json(), task.seed, task.stop_at_miss) for task in tasks]
    if ray is not None:
        return _on_ray(shipped, ray, on_done)
    if workers == 1 or len(shipped) <= 1:
        results = []
        for i, shipment in enumerate(shipped):
            results.append(_unwrap(simulate(*shipment)))
            if on_done:
                on_done(i + 1, len(shipped))
        return results
    return _on_pool(shipped, workers, on_done)


def _on_pool(shipped: list[tuple], workers: int, on_done: OnDone | None) -> list[Outcome]:
    outcomes: list[Any] = [None] * len(shipped)
    with ProcessPoolExecutor(max_workers=min(workers, len(shipped)), mp_context=get_context("spawn")) as pool:
        pending = {pool.submit(simulate, *shipment): i for i, shipment in enumerate(shipped)}
        done_count = 0
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                outcomes[pending.pop(future)] = future.result()
                done_count += 1
                if on_done:
                    on_done(done_count, len(shipped))
    return [_unwrap(o) for o in outcomes]


def _ray_module():
    try:
        import ray
    except ImportError:
        raise SpecError([Problem("--ray", "Ray is not installed in this Python environment",
                                 fix="install it with `pip install 'kvplan[scale]'` (Ray >= 2.40), "
                                     "or leave out --ray and use --workers N for local processes")]) from None
    return ray


def connect_ray(address: str):
    """The ray module, connected: to the cluster this process already joined, else to `address`.

    `address` means what it means to `ray.init`: `auto` is the running cluster named by RAY_ADDRESS
    or started on this machine with `ray start`, `local` a fresh single-machine cluster for this
    process only, `ray://host:10001` a cluster through Ray Client, `host:6379` a cluster's head.
    """
    ray = _ray_module()
    if not ray.is_initialized():
        options = {} if address.startswith("ray://") else {"include_dashboard": False, "log_to_driver": False,
                                                            "logging_level": "WARNING"}
        try:
            ray.init(address=address, **options)
        except Exception as exc:                 # Ray raises ConnectionError, ValueError, RuntimeError, ...
            raise SpecError([Problem("--ray", f"cannot reach a Ray cluster at {address!r}: {exc}", address,
                                     fix="start one with `ray start --head` (then use --ray auto), use --ray local "
                                         "for a cluster on this machine only, or give the address of a running "
                                         "cluster")]) from None
    return ray


def _on_ray(shipped: list[tuple], address: str, on_done: OnDone | None) -> list[Outcome]:
    ray = connect_ray(address)
    remote = ray.remote(num_cpus=1, max_retries=0)(simulate)
    refs = [remote.remote(*shipment) for shipment in shipped]
    index = {ref: i for i, ref in enumerate(refs)}
    outcomes: list[Any] = [None] * len(refs)
    pending, done_count = list(refs), 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        for ref in ready:
            outcomes[index[ref]] = ray.get(ref)
            done_count += 1
            if on_done:
                on_done(done_count, len(refs))
    return [_unwrap(o) for o in outcomes]


__all__ = ["OnDone", "Task", "connect_ray", "run_tasks", "simulate"]
