"""The bottleneck of a simulated run: the link or device that saturates, what waits on it, and what relieves it.

A run's resources are its engines and its links and devices (`SimResult.links`: PCIe per instance,
NVMe per node, NICs, each Ceph host's OSDs). A link's load is the share of the run it had work. The
engines' is the share of the run requests queued for a full batch (`engine_load`: the steps that left a
request waiting, each weighted by how full its batch was, the fullest of slots, token budget and KV
blocks): an engine is in steps whenever any request runs, however small its batch, and a request that
waits only for the next step boundary does not wait on a lack of room. The bottleneck is the most loaded
of them; it *saturates* when that load is at least `SATURATED`. Above
that share a server's queue grows quickly (for a single queue the mean wait is busy / (1 - busy) service
times: 4 at 80 %, 9 at 90 %), so what waits on it -- a load, a store, a request waiting for a batch slot --
waits mostly in its queue. `kvplan simulate` ends with the verdict and, when something saturates, a
`next:` that points at it; the simulation page of `kvplan report` marks it.

The verdict reads a SimResult only: it is data, imported by the CLI and the report alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import fmt_duration
from .result import SimResult

SATURATED = 0.8
"""Share of the run busy from which a link, device or the engines count as saturated (the doctor's
`saturated-link` rule uses the same share)."""

ENGINES = "engines"


@dataclass(frozen=True)
class Bottleneck:
    """The busiest resource of a run and the verdict on it."""

    name: str
    """A link's name as in SimResult.links (e.g. nvme/0, pcie-h2d/1, osds/ceph0), or "engines"."""
    busy: float
    """Its load: the share of the run a link was busy, or for the engines the share of the run requests queued at
    full batches (engine_load; mean over instances)."""
    waits: str
    """What waits on it, in words."""
    fix: str
    """What would relieve it, in words, naming the spec fields to change."""

    @property
    def saturated(self) -> bool:
        return self.busy >= SATURATED

    def verdict(self, seed: int | None = None) -> str:
        """One line: which link or device saturates and what waits on it, or that none does (`seed`: say whose run)."""
        head = "bottleneck" if seed is None else f"bottleneck (seed {seed})"
        load = (f"engines: requests queued at full batches {self.busy:.0%} of the run" if self.name == ENGINES
                else f"{self.name} is {self.busy:.0%} busy")
        if self.saturated:
            return f"{head}: {load} (saturated from {SATURATED:.0%}): {self.waits}"
        return (f"{head}: none; no link is {SATURATED:.0%} busy and requests queued at full batches less than "
                f"{SATURATED:.0%} of the run (the most loaded: {load})")

    def next_step(self) -> str | None:
        """The `next:` line that points at the saturated resource; None when nothing saturates."""
        return f"next: relieve {self.name}: {self.fix}" if self.saturated else None


def _what(name: str, queue_s: float) -> tuple[str, str]:
    """(what waits on the resource `name`, what relieves it)."""
    kind, _, where = name.partition("/")
    if kind == ENGINES:
        return (f"requests queue for a batch slot (mean wait {fmt_duration(queue_s)})",
                "larger batches where HBM has room for their KV (serving.max_num_seqs, "
                "serving.max_num_batched_tokens), more instances or a faster accelerator (serving.instances, "
                "serving.gpu; `kvplan plan` finds the cheapest that meets the SLO, `kvplan capacity` the rate "
                "this one sustains)")
    if kind == "nvme":
        return (f"reads and writes of the nvme tier on node {where} queue on the drive",
                "the node's other drives (lmcache.nvme.drives, striped with layout: raid0 or one path each with "
                "per_drive; docs/node-storage.md), a faster NVMe class (lmcache.nvme.device, e.g. gen5), more ddr "
                "in front of it (lmcache.ddr.size) so fewer chunks reach it, or no nvme tier (`kvplan simulate "
                "SPEC --ablate` shows what it adds)")
    if kind == "osds":
        return (f"Ceph reads and replicated writes on host {where.removeprefix('ceph')}'s OSDs queue on them",
                "more OSDs (ceph.hosts, ceph.osds_per_host) or a faster device class (ceph.device_class)")
    if kind == "pcie-h2d":
        return (f"loads of offloaded KV into instance {where}'s HBM queue on its PCIe link",
                "an accelerator with a faster host link (serving.gpu) or more instances to spread the "
                "loads (serving.instances)")
    if kind == "pcie-d2h":
        return (f"stores of instance {where}'s KV to host memory queue on its PCIe link",
                "an accelerator with a faster host link (serving.gpu) or more instances to spread the "
                "stores (serving.instances)")
    if kind in ("nic-rx", "nic-tx"):
        into = kind == "nic-rx"
        if where.startswith("ceph"):
            what = "writes and replicas arriving at" if into else "reads served by"
            return (f"{what} Ceph host {where.removeprefix('ceph')} queue on its NIC",
                    "a faster storage network (ceph.network, ceph.network_bandwidth) or more Ceph hosts (ceph.hosts)")
        what = "retrieves from Ceph into" if into else "stores to Ceph from"
        return (f"{what} serving node {where.removeprefix('node')} queue on its NIC",
                "a faster storage network (ceph.network, ceph.network_bandwidth) or more ddr/nvme in front of Ceph")
    return (f"transfers over {name} queue on it", "more capacity on that link")


def engine_load(result: SimResult) -> float:
    """The engines' load, mean over instances: the share of the run requests queued for a full batch (each step
    that left a request waiting, weighted by how full its batch was)."""
    loads = [w * f for w, f in zip(result.engine_waited, result.engine_waiting_fullness)]
    return sum(loads) / len(loads) if loads else 0.0


def bottleneck(result: SimResult) -> Bottleneck:
    """The most loaded of the run's engines and links, with what waits on it and what relieves it.

    Ties go to the engines, then to the first link in the result's order, so the verdict is deterministic."""
    engines = engine_load(result)
    name, busy = ENGINES, engines
    for link in result.links:
        if link.utilisation > busy:
            name, busy = link.name, link.utilisation
    waits, fix = _what(name, result.queue.mean)
    return Bottleneck(name, busy, waits, fix)


__all__ = ["SATURATED", "Bottleneck", "bottleneck", "engine_load"]
