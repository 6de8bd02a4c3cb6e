"""Benchmark: what each cache layer of the chat example adds to a request's simulation, counted, not timed.

The chat workload of `vs_sr_sim.py` (its `--caches` levels, each one layer more: none, prefix, ddr, nvme, all)
is simulated by the source tree's modules, interpreted, with counters on the calls that make a request's
cost: events scheduled on the clock, processes started, transfers put on links, the HBM prefix cache's
lookups and the blocks they walk, LMCache's lookups (chunks examined, chunks refreshed), stores (chunks
written to a tier), and the background NVMe writes and Ceph batches. It prints them per request, for each
level. The counts are deterministic (the same spec and seed give the same numbers), so they say where a
layer's time goes without the machine's noise: a layer that adds few per-key operations but several events
and transfers per request costs what an event and a transfer cost, not what a dictionary lookup costs.

The interpreted modules are used because the compiled ones cannot be wrapped; the counts are the same
(tests/test_compiled.py holds the compiled build's results to the interpreted code's).

Usage:
  python benchmarks/layer_work.py [--requests 20000] [--caches none prefix ddr nvme all]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))                     # the source tree, interpreted: its methods can be wrapped
sys.path.insert(0, str(REPO / "benchmarks"))      # its sibling modules, also under `python -P`

from vs_sr_sim import LEVELS, SPEC, chat_spec     # noqa: E402  (after the path is set)


def counted(count: Counter, cls: type, method: str, name: str, size: Callable[..., int] | None = None) -> None:
    """Wrap `cls.method` so that each call adds 1 to `count[name]` and, with `size`, size(*args, result) to
    `count[name + " (items)"]`."""
    original = getattr(cls, method)

    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        count[name] += 1
        if size is not None:
            count[f"{name} (items)"] += size(*args, result)
        return result

    setattr(cls, method, wrapper)


def instrument(count: Counter) -> None:
    from kvplan.sim import clock, fabric, links, lmcache, prefix_cache

    for module in (clock, fabric, links, lmcache, prefix_cache):
        if not module.__file__ or not module.__file__.endswith(".py"):
            sys.exit(f"{module.__name__} is compiled ({module.__file__}); run from a checkout, whose source "
                     "tree this script puts first on the import path")
    counted(count, clock.Environment, "schedule_at", "events")
    counted(count, clock.Process, "__init__", "processes")
    counted(count, links.Link, "transfer", "link transfers")
    counted(count, prefix_cache.PrefixCache, "match", "HBM lookups", lambda self, keys, *_: len(keys))
    counted(count, lmcache.LMCacheModel, "probe", "LMCache lookups",
            lambda self, instance, keys, result: sum(min(asked, held + 1) for _, asked, held in result[1]))
    counted(count, lmcache.LMCacheModel, "touch", "LMCache refreshes",
            lambda self, instance, keys, spans, *_: sum(s.end - s.start for s in spans))
    counted(count, lmcache.LMCacheModel, "_insert", "tier stores",
            lambda self, tier, instance, keys, *_: len(keys))
    counted(count, fabric.Fabric, "nvme_write", "NVMe writes")
    counted(count, fabric.Fabric, "_ceph_issue", "Ceph batches")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--caches", nargs="+", choices=LEVELS, default=list(LEVELS))
    args = parser.parse_args()
    count: Counter = Counter()
    instrument(count)
    from kvplan.resolve import resolve
    from kvplan.sim.run import run
    from kvplan.spec import from_mapping

    rows = {}
    for level in args.caches:
        count.clear()
        run(resolve(from_mapping(chat_spec(args.requests, level), base_dir=SPEC.parent)))
        rows[level] = {name: n / args.requests for name, n in count.items()}
    names = sorted({name for row in rows.values() for name in row})
    print(f"chat example, {args.requests:,} requests: counts per request (items: keys or blocks per request)")
    print(f"{'':28}" + "".join(f"{level:>9}" for level in rows))
    for name in names:
        print(f"{name:28}" + "".join(f"{row.get(name, 0.0):9.2f}" for row in rows.values()))


if __name__ == "__main__":
    main()
