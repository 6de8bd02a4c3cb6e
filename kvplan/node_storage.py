"""The node's storage as it is built: its NVMe drives under the nvme tier, and its host memory under the ddr tier.

NVMe. A node has `lmcache.nvme.drives` drives of one class (a catalog name or an inline class) in one of two
layouts (kvplan/spec/lmcache.py NvmeTier says what each means for LMCache):

- raid0: one volume striped over the drives. The kernel's md/LVM stripe splits every file into stripe units spread
  over all drives, and LMCache's chunk files (MiB each) span many units, so a batch keeps every drive busy: the
  node has ONE device with drives x a drive's bandwidth and IOPS, and one drive's latency (a stripe's pieces are
  read in parallel). That is an upper bound: it assumes the stripe and the PCIe lanes, not one drive, are the limit.
- per_drive: one directory per drive, used only by in-process LMCache, whose `local_disk_path_sharding: by_gpu`
  puts a worker's chunks on paths[GPU index % drives]. kvplan gives each vLLM instance its own GPUs
  (CUDA_VISIBLE_DEVICES), so the index is the rank within the instance: rank r of every instance on a node uses
  drive r % drives. The node has `drives` devices, each one drive with its own queue, and each storing rank's
  objects go to its drive. More drives than storing ranks would never be written, so resolve refuses them.

Host memory. The node's RAM (serving.host_memory, else the catalog's reference server for the accelerator) must
hold what kvplan has LMCache and vLLM pin there: the ddr tier (per node, however the mode splits it) and vLLM's
native CPU offloading. A spec that pins more than the node has is refused. The processes' own memory (vLLM's
Python and CUDA context, a few GiB per instance) is not counted: leave room for it.
"""

from __future__ import annotations

from typing import Literal

from .catalog import Device, NvmeClass
from .errors import Problem
from .offload import ResolvedOffload
from .spec.base import SpecModel
from .spec.lmcache import NvmeDrive, NvmeTier
from .units import fmt_bytes


class ResolvedNvme(SpecModel):
    """The nvme tier's drives, and the devices the simulator queues NVMe I/O on (per node)."""

    drive: NvmeDrive
    """One drive's speed (the catalog class or the spec's inline one)."""
    drives: int
    """Drives per node."""
    layout: Literal["raid0", "per_drive"]
    device: NvmeDrive
    """One simulated device: raid0, the striped volume (drives x bandwidth and IOPS, one drive's latency);
    per_drive, one drive."""
    devices_per_node: int
    """Devices with their own queue on each node: 1 for raid0, drives for per_drive."""
    rank_device: list[int]
    """The device each storing rank of an instance writes its objects to (rank r -> r % drives for per_drive)."""
    paths: list[str]
    """LMCache's directories on every node, in device order (raid0: the one on the striped volume)."""
    own_volume: bool
    """Each directory must lie on a mounted volume, not the root filesystem: the operator's array (raid0 over
    several drives) or each drive (per_drive). The deploy checks it; it never builds, formats or mounts one."""


def drive_of(tier: NvmeTier, catalog_class: NvmeClass | None) -> NvmeDrive | None:
    """The tier's drive: its inline class, or the catalog's class (already looked up by resolve)."""
    if isinstance(tier.device, NvmeDrive):
        return tier.device
    if catalog_class is None:
        return None
    return NvmeDrive(name=catalog_class.name, read_bandwidth=catalog_class.read_bandwidth,
                     write_bandwidth=catalog_class.write_bandwidth, read_iops=catalog_class.read_iops,
                     write_iops=catalog_class.write_iops, read_latency=catalog_class.read_latency,
                     write_latency=catalog_class.write_latency, capacity=catalog_class.capacity)


def resolve_nvme(tier: NvmeTier, drive: NvmeDrive, storing_ranks: int, problems: list[Problem]) -> ResolvedNvme:
    n = tier.drives
    if drive.capacity is not None and tier.size > n * drive.capacity:
        which = (f"the largest {drive.name} drive in the catalog" if isinstance(tier.device, str)
                 else f"the inline drive {drive.name}'s capacity")
        problems.append(Problem("lmcache.nvme.size", f"the nvme tier holds {fmt_bytes(tier.size)} per node, but its "
                                f"{n} drive(s) of at most {fmt_bytes(drive.capacity)} ({which}) hold "
                                f"{fmt_bytes(n * drive.capacity)}", fmt_bytes(tier.size),
                                f"<= {fmt_bytes(n * drive.capacity)}",
                                f"lower lmcache.nvme.size, or give the node's drive count (lmcache.nvme.drives) or "
                                f"a drive with its capacity inline (lmcache.nvme.device: {{..., capacity: 7.68TB}})"))
    if tier.layout == "raid0":
        device = drive if n == 1 else NvmeDrive(
            name=f"{drive.name} x{n} raid0", read_bandwidth=n * drive.read_bandwidth,
            write_bandwidth=n * drive.write_bandwidth, read_iops=n * drive.read_iops, write_iops=n * drive.write_iops,
            read_latency=drive.read_latency, write_latency=drive.write_latency)
        return ResolvedNvme(drive=drive, drives=n, layout="raid0", device=device, devices_per_node=1,
                            rank_device=[0] * storing_ranks, paths=[tier.path], own_volume=n > 1)
    if n > storing_ranks:
        problems.append(Problem("lmcache.nvme.drives", f"with layout: per_drive, in-process LMCache puts rank r's chunks "
                                f"on drive r % drives, and an instance has {storing_ranks} storing rank(s), so drives "
                                f"beyond {storing_ranks} would never be written", n, f"1..{storing_ranks} with per_drive",
                                f"use layout: raid0 (one volume striped over the {n} drives, built by you), or "
                                f"drives: {storing_ranks}"))
    return ResolvedNvme(drive=drive, drives=n, layout="per_drive", device=drive, devices_per_node=n,
                        rank_device=[r % n for r in range(storing_ranks)], paths=list(tier.paths), own_volume=True)


class HostMemory(SpecModel):
    """The node's host memory and what kvplan pins in it."""

    bytes: int
    """The node's RAM."""
    source: str
    """Where the figure comes from: serving.host_memory, or the catalog's reference server."""
    pinned_bytes: int
    """What the deployment pins per node: the ddr tier and native offloading."""


def host_memory(device: Device, given: int | None, ddr_bytes: int,
                offload: ResolvedOffload | None, instances_per_node: int, problems: list[Problem]) -> HostMemory | None:
    """The node's host memory and the check that the pinned tiers fit in it; None when neither the spec nor the
    catalog says how much the node has (then nothing is checked; docs/node-storage.md)."""
    if given is not None:
        total, source = given, "serving.host_memory"
    elif device.node_host_memory is not None:
        total, source = device.node_host_memory, f"the catalog's {device.name} reference server"
    else:
        return None
    native = offload.capacity_bytes * instances_per_node if offload else 0
    pinned = ddr_bytes + native
    if pinned > total:
        parts = [f"ddr tier {fmt_bytes(ddr_bytes)}"] if ddr_bytes else []
        parts += [f"native offloading {fmt_bytes(native)}"] if native else []
        path = "lmcache.ddr.size" if ddr_bytes else "serving.kv_offloading"
        problems.append(Problem(path, f"the node's host memory is {fmt_bytes(total)} ({source}), but the deployment "
                                f"pins {fmt_bytes(pinned)} per node there ({', '.join(parts)}), more than it has", fmt_bytes(pinned), f"< {fmt_bytes(total)}",
                                "lower the ddr tier (or native offloading), or set serving.host_memory to the "
                                "node's real RAM if it has more"))
    return HostMemory(bytes=total, source=source, pinned_bytes=pinned)
