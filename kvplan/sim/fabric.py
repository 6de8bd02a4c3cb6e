"""The deployment's data paths as timed transfers: PCIe, NVMe, NICs and Ceph OSDs.

Every device and link is a `Link` (processor sharing), so concurrent transfers slow each other
down. Paths, as the real stack moves KV (reference/lmcache-vllm.md §6):

- GPU <-> host DRAM: one PCIe link per direction per instance. Tensor-parallel ranks copy their
  own slices over their own links at the same time, so an instance moves per-rank bytes.
- NVMe: the node's devices (kvplan/node_storage.py): one striped volume (raid0, `nvme/<node>`) or one device per
  drive (per_drive, `nvme/<node>.<drive>`), each shared by reads and writes. A batch puts each storing rank's
  objects on that rank's device; on each device it costs max(bytes / bandwidth, objects / IOPS) of device time,
  after the device's per-operation latency, and the batch is done when every device has served its share.
- Ceph: the node's NIC, the OSD hosts' NICs and the OSDs. An object lives on a primary OSD
  chosen by its key and on `size - 1` replicas on other hosts (other OSDs with an osd failure
  domain). A read is served by the primary; a write is acknowledged once every replica has it
  (the primary forwards it over its host's NIC). Per-op latency comes from the OSD device class,
  plus a network round trip. A host's OSDs are one shared server of `osds_per_host` device-
  seconds per second: CRUSH spreads a host's objects evenly over its OSDs, and one link per host
  instead of per OSD keeps a batch of chunks to a handful of transfers.

What an OSD counts as one op, and so what `ceph_op_latency` measures: Ceph's `op_r_latency` /
`op_w_latency` (exported by the mgr's prometheus module as `ceph_osd_op_r_latency_sum` / `_count`,
seconds) time one RADOS op from its arrival at the primary OSD to the reply, queueing in the OSD
included, replication included for a write, the client's network transfer not. RGW stores an S3
object (one chunk of one TP rank) as RADOS objects of at most 4 MiB (`rgw_max_chunk_size`,
`rgw_obj_stripe_size`; CephFS's default layout `object_size` is 4 MiB too) that CRUSH spreads
over the pool's OSDs; it keeps at most 16 MiB of one S3 request in flight
(`rgw_put_obj_min_window_size`, `rgw_get_obj_window_size`), and each client process at most
100 MiB of ops (`objecter_inflight_op_bytes`; kvplan deploys one RGW, and with CephFS each node is
a client). One op then takes the device class's per-op latency, its bytes at the OSD's bandwidth
(or one IOP) times the ops queued at each OSD when it is issued (those in flight, a write's
replicas included, over the pool's OSDs, at least 1), and for a replicated write the forwarding
of its bytes to the replicas over the primary's NIC. `ceph_batch_latencies` keeps the time of
each whole batch from issue to completion, network transfers included (the processor-sharing
links above; the RGW throttle is not applied to them).
"""

from __future__ import annotations

from array import array
from functools import partial
from typing import Callable, Sequence


from ..resolve import Resolved
from ..resolved_tiers import RADOS_OP_BYTES
from .clock import Environment, at
from .links import Link, Transfer, planned_end, served, when_served

REQUEST_WINDOW_BYTES = 16 * 2**20   # rgw_put_obj_min_window_size = rgw_get_obj_window_size
CLIENT_INFLIGHT_BYTES = 100 * 2**20  # objecter_inflight_op_bytes, per client process


class _IO:
    """One direction of a device (an NVMe drive, a Ceph OSD): bytes/s, operations/s, seconds per operation.

    Read once from the resolved spec, so a batch reads plain fields, not the spec's models."""

    __slots__ = ("bandwidth", "iops", "latency")

    def __init__(self, bandwidth: float, iops: int, latency: float):
        self.bandwidth, self.iops, self.latency = bandwidth, iops, latency


class Fabric:
    def __init__(self, env: Environment, r: Resolved):
        self.env = env
        host_copy = r.pcie_bandwidth or r.hbm_bandwidth  # a CPU device copies within host memory
        self.h2d = [Link(env, f"pcie-h2d/{i}", host_copy) for i in range(r.instances)]
        self.d2h = [Link(env, f"pcie-d2h/{i}", host_copy) for i in range(r.instances)]
        # links of node n's NVMe devices: self.nvme[n * per_node + d]; (device, share of a batch) for each device
        self.nvme: list[Link] = []
        self._nvme_per_node = 1
        self._nvme_shares: list[tuple[int, float]] = []
        if r.nvme is not None:
            nv = r.nvme
            per_node = self._nvme_per_node = nv.devices_per_node
            self.nvme = [Link(env, f"nvme/{n}" if per_node == 1 else f"nvme/{n}.{d}", 1.0)
                         for n in range(r.nodes) for d in range(per_node)]
            ranks = len(nv.rank_device)
            self._nvme_shares = [(d, nv.rank_device.count(d) / ranks) for d in range(per_node)
                                 if d in nv.rank_device]
            d = nv.device
            self._nvme_read = _IO(d.read_bandwidth, d.read_iops, d.read_latency)
            self._nvme_write = _IO(d.write_bandwidth, d.write_iops, d.write_latency)
        self.ceph = r.ceph
        self.ceph_batch_latencies: list[float] = []   # seconds from issue to completion of each batched read or write
        # one OSD op: (seconds, how many ops of a batch took that long, the host of their primary OSD)
        self.ceph_op_latencies, self.ceph_op_counts, self.ceph_op_hosts = array("d"), array("q"), array("q")
        self._ceph_in_flight = [0, 0]             # RADOS reads, writes the clients want in flight now
        if r.ceph is not None:
            self._ceph_clients = 1 if r.ceph.access == "s3" else r.nodes      # one RGW; a CephFS client per node
            nic = r.ceph.network.bandwidth
            self.node_rx = [Link(env, f"nic-rx/node{n}", nic) for n in range(r.nodes)]
            self.node_tx = [Link(env, f"nic-tx/node{n}", nic) for n in range(r.nodes)]
            self.host_rx = [Link(env, f"nic-rx/ceph{h}", nic) for h in range(r.ceph.hosts)]
            self.host_tx = [Link(env, f"nic-tx/ceph{h}", nic) for h in range(r.ceph.hosts)]
            per_host = r.ceph.osds // r.ceph.hosts
            self.osds = [Link(env, f"osds/ceph{h}", float(per_host)) for h in range(r.ceph.hosts)]
            # placement depends only on key % osds: the hosts of each primary OSD's replicas, primary first
            self.replica_hosts = [tuple(osd // per_host for osd in self.placement(p)) for p in range(r.ceph.osds)]
            dev = r.ceph.device_class
            self._osd_read = _IO(dev.osd_read_bandwidth, dev.osd_read_iops, dev.read_latency)
            self._osd_write = _IO(dev.osd_write_bandwidth, dev.osd_write_iops, dev.write_latency)
            self._osd_count, self._pool_size = r.ceph.osds, r.ceph.pool_size
            self._net_latency, self._net_bandwidth = r.ceph.network.latency, nic

    def links(self) -> list[Link]:
        out = [*self.h2d, *self.d2h, *self.nvme]
        if self.ceph is not None:
            out += [*self.node_rx, *self.node_tx, *self.host_rx, *self.host_tx, *self.osds]
        return out

    # ---- GPU <-> DRAM
    def to_gpu(self, instance: int, nbytes_per_rank: float):
        """Copy into the GPU, as steps of the caller's process (`yield from`)."""
        yield from served(self.env, (self.h2d[instance].transfer(nbytes_per_rank),))

    def from_gpu(self, instance: int, nbytes_per_rank: float):
        """Copy off the GPU, as steps of the caller's process (`yield from`)."""
        yield from served(self.env, (self.d2h[instance].transfer(nbytes_per_rank),))

    # ---- NVMe
    def nvme_read(self, node: int, nbytes: float, objects: int):
        """One batched read on the node's NVMe devices, as steps of the caller's process (`yield from`)."""
        latency, work = self._nvme(nbytes, objects, write=False)
        yield self.env.timeout(latency)
        yield from served(self.env, self._nvme_transfers(node, work))

    def nvme_write(self, node: int, nbytes: float, objects: int, then: Callable[[], None]) -> None:
        """One batched write on the node's NVMe devices, in the background: `then()` once it is done."""
        latency, work = self._nvme(nbytes, objects, write=True)
        self.env.timeout(latency).then(partial(self._nvme_start, node, work, then))

    def _nvme_start(self, node: int, work: float, then: Callable[[], None], _: object) -> None:
        when_served(self.env, self._nvme_transfers(node, work), then)

    def _nvme_transfers(self, node: int, work: float) -> list[Transfer]:
        """Start each of the node's devices on its share of a batch's device-seconds."""
        if self._nvme_per_node == 1:
            return [self.nvme[node].transfer(work)]
        base = node * self._nvme_per_node
        return [self.nvme[base + d].transfer(work * share) for d, share in self._nvme_shares]

    def _nvme(self, nbytes: float, objects: int, write: bool) -> tuple[float, float]:
        """(the device's per-operation latency, device-seconds of work) of one batched read or write."""
        io = self._nvme_write if write else self._nvme_read     # only a spec with an nvme tier does NVMe I/O
        return io.latency, max(nbytes / io.bandwidth, objects / io.iops)

    # ---- Ceph
    def placement(self, key: int) -> list[int]:
        """OSDs holding an object: primary first, then replicas in distinct failure domains."""
        c = self.ceph
        assert c is not None                      # only a spec with Ceph places objects
        per_host = c.osds // c.hosts
        primary = key % c.osds
        if c.failure_domain == "osd":
            return [(primary + r) % c.osds for r in range(c.pool_size)]
        host, slot = divmod(primary, per_host)
        return [((host + r) % c.hosts) * per_host + slot for r in range(c.pool_size)]

    def ceph_read(self, node: int, keys: Sequence[int], object_bytes: int, objects_per_key: int):
        """Read the objects of `keys` from their primaries, as steps of the caller's process
        (`yield from`); `_ceph_issue` says what moves."""
        start = self.env.now
        parts, delay, wanted = self._ceph_issue(node, keys, object_bytes, objects_per_key, write=False)
        yield self.env.timeout(delay)
        yield from served(self.env, parts)
        self._ceph_done(False, wanted, start)

    def ceph_write(self, node: int, keys: Sequence[int], object_bytes: int, objects_per_key: int,
                   then: Callable[[], None]) -> None:
        """Write the objects of `keys` to every replica, in the background: `then()` once it is done, at the
        later of its op and network latency and the end of its transfers.

        Transfers that will outlast the latency are waited for at once, in one event (arrivals after now only
        delay them further). That event is queued now rather than when the latency has passed, so among events at
        exactly its instant it may come earlier than it used to; result_digest.py's fingerprints did not change."""
        env = self.env
        parts, delay, wanted = self._ceph_issue(node, keys, object_bytes, objects_per_key, write=True)
        done = partial(self._ceph_done, True, wanted, env.now, then)
        served_at = planned_end(env, parts)
        wake = at(env, served_at) if served_at > env.now + delay else env.timeout(delay)
        wake.then(partial(self._ceph_written, parts, done))

    def _ceph_written(self, parts: list[Transfer], done: Callable[[], None], _: object) -> None:
        when_served(self.env, parts, done)

    def _ceph_issue(self, node: int, keys: Sequence[int], object_bytes: int, objects_per_key: int,
                    write: bool) -> tuple[list[Transfer], float, int]:
        """Start moving the objects of `keys`, each `object_bytes` (whole bytes) per key, as `objects_per_key`
        S3 objects (one per TP rank): (the transfers on the links, the per-op and network latency to wait
        before them, the RADOS ops the batch wants in flight: `_ceph_done` takes them back)."""
        table, n_osds, n_hosts = self.replica_hosts, self._osd_count, len(self.osds)
        # per host: objects whose primary it holds, and those it writes (lists by host: a cluster has a handful);
        # `named` the hosts in the order the keys first make them primaries (the order of the op records)
        primaries, objects, named = [0] * n_hosts, [0] * n_hosts, []
        for key in keys:
            hosts = table[key % n_osds]
            primary = hosts[0]
            if not primaries[primary]:
                named.append(primary)
            primaries[primary] += 1
            if write:
                for host in hosts:
                    objects[host] += 1
        if not write:
            objects = primaries                   # a read is served by the primaries
        total = len(keys) * object_bytes
        io = self._osd_write if write else self._osd_read
        parts = [(self.node_tx if write else self.node_rx)[node].transfer(total)]
        nics = self.host_rx if write else self.host_tx
        for host in range(n_hosts):
            count = objects[host]
            if count:
                nbytes = count * object_bytes
                parts.append(self.osds[host].transfer(max(nbytes / io.bandwidth, count * objects_per_key / io.iops)))
                parts.append(nics[host].transfer(nbytes))
        if write and self._pool_size > 1:   # primaries forward replicas over their hosts' NICs
            each = float((self._pool_size - 1) * object_bytes)  # whole bytes: count * each is exact
            for host in named:
                parts.append(self.host_tx[host].transfer(primaries[host] * each))
        op, ops_per_key, wanted = self._ceph_op(len(keys), object_bytes, objects_per_key, write)
        for host in named:
            self.ceph_op_latencies.append(op)
            self.ceph_op_counts.append(primaries[host] * ops_per_key)
            self.ceph_op_hosts.append(host)
        return parts, io.latency + 2 * self._net_latency, wanted

    def _ceph_done(self, write: bool, wanted: int, start: float, then: Callable[[], None] | None = None) -> None:
        """A batch issued at `start` has been served: its ops leave the clients' flight."""
        self._ceph_in_flight[write] -= wanted
        self.ceph_batch_latencies.append(self.env.now - start)
        if then is not None:
            then()

    def _ceph_op(self, keys: int, object_bytes: int, objects_per_key: int, write: bool) -> tuple[float, int, int]:
        """Issue a batch's RADOS ops: (seconds one of them takes at its OSD, RADOS ops per key, ops the
        batch wants in flight; the caller takes those back when the batch is done)."""
        io = self._osd_write if write else self._osd_read
        s3_object = object_bytes // objects_per_key
        per_object = max(1, -(-s3_object // RADOS_OP_BYTES))
        op_bytes = s3_object / per_object
        window = max(1, REQUEST_WINDOW_BYTES // RADOS_OP_BYTES)
        wanted = min(keys * objects_per_key * per_object, keys * objects_per_key * window)
        flight = self._ceph_in_flight
        flight[write] += wanted
        reads, writes = flight
        allowed = self._ceph_clients * max(1.0, CLIENT_INFLIGHT_BYTES / op_bytes)
        throttle = min(1.0, allowed / (reads + writes))
        pool_size = self._pool_size
        queued = (reads + pool_size * writes) * throttle / self._osd_count    # ops at each OSD, replicas included
        forward = (pool_size - 1) * op_bytes / self._net_bandwidth if write else 0.0
        op = io.latency + forward + max(op_bytes / io.bandwidth, 1 / io.iops) * max(1.0, queued)
        return op, objects_per_key * per_object, wanted
