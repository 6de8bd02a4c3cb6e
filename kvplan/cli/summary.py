"""Human-readable tables of a Resolved spec and of the catalog (printed by the CLI).

Simulation results are rendered by kvplan.report."""

from __future__ import annotations

from rich.table import Table

from ..accelerator_fit import kv_bytes_per_token
from ..catalog import Catalog
from ..report.terminal import natural_width
from ..resolve import Resolved
from ..units import fmt_bandwidth, fmt_bytes, fmt_count, fmt_duration


def _drives(r: Resolved) -> str:
    """The nvme tier's drives and the devices the simulator queues on."""
    nv = r.nvme
    assert nv is not None
    d = nv.device
    speed = (f"{fmt_bandwidth(d.read_bandwidth)} read, {fmt_bandwidth(d.write_bandwidth)} write, "
             f"{fmt_count(d.read_iops)} read IOPS, {fmt_duration(d.read_latency)} a read")
    if nv.layout == "per_drive":
        return f"{nv.drives} x {nv.drive.name} per node, a directory on each (per_drive), each {speed}; at {', '.join(nv.paths)}"
    if nv.drives > 1:
        return f"{nv.drives} x {nv.drive.name} per node striped into one volume (raid0): {speed}; at {nv.paths[0]}"
    return f"1 x {nv.drive.name} per node: {speed}; at {nv.paths[0]}"


def summary_tables(r: Resolved) -> list[Table]:
    serving = Table(title="Serving", show_header=False, title_justify="left")
    serving.add_column(style="bold", no_wrap=True)
    serving.add_column()
    rows = [
        ("model", f"{r.model.name} ({r.model.attention}, {r.model.num_layers} layers, {r.model.num_kv_heads} KV heads x {r.model.head_dim})"),
        ("accelerator", f"{r.device.name} x {r.gpus_total} ({r.instances} instance(s) x TP {r.tensor_parallel}, {r.nodes} node(s))"
                        if r.disaggregation is None else _pools(r)),
        ("KV bytes/token", f"{fmt_count(r.kv_bytes_per_token)} ({fmt_bytes(r.kv_bytes_per_token)}) total, "
                           f"{fmt_count(r.kv_bytes_per_token_per_rank)} per rank, {r.kv_cache_dtype}"),
        ("block", f"{r.block_size} tokens = {fmt_bytes(r.block_bytes_per_rank)} per rank"),
        ("weights per device", f"{fmt_bytes(r.weight_bytes_per_gpu)} ({r.weights_dtype})"),
        ("KV memory per device", fmt_bytes(r.kv_budget_bytes_per_gpu)),
        ("HBM blocks per instance", f"{fmt_count(r.hbm_blocks)} = {fmt_count(r.hbm_tokens)} tokens"),
        ("max_model_len", fmt_count(r.max_model_len)),
        ("batching", f"max_num_seqs {r.max_num_seqs}, max_num_batched_tokens {r.max_num_batched_tokens}"),
    ]
    if r.disaggregation is not None:            # the rows above are the prefill pool's; the decode pool's, and the link
        rows[2:] = [(f"{key} (prefill)", value) for key, value in rows[2:]]
        d, dec = r.disaggregation, r.disaggregation.decode
        rows += [("decode instances", f"{fmt_bytes(dec.kv_budget_bytes_per_gpu)} KV memory per device, "
                                      f"{fmt_count(dec.hbm_blocks)} HBM blocks = {fmt_count(dec.hbm_tokens)} tokens each; "
                                      f"max_num_seqs {dec.max_num_seqs}"),
                 ("KV transfer", f"{d.connector} over {d.network.name} ({fmt_bytes(d.network.bandwidth)}/s per GPU), "
                                 f"proxy {d.proxy}")]
    if r.host_memory is not None:
        h = r.host_memory
        rows.append(("host memory", f"{fmt_bytes(h.bytes)} per node ({h.source}), {fmt_bytes(h.pinned_bytes)} pinned"))
    for key, value in rows:
        serving.add_row(key, value)
    tables = [serving]

    if r.lmcache:
        lm = r.lmcache
        tiers = Table(title=f"LMCache ({lm.mode} mode, chunk {lm.chunk_size} tokens = {fmt_bytes(lm.chunk_bytes)})",
                      show_header=False, title_justify="left")
        tiers.add_column(style="bold", no_wrap=True)
        tiers.add_column()
        for t in lm.tiers:
            ttl = f", ttl {fmt_duration(t.ttl_s)}" if t.ttl_s else ""
            configured = f"; LMCache size {t.configured_gb:.2f} GB" if t.configured_gb is not None else ""
            tiers.add_row(t.name, f"{t.caches} x {fmt_bytes(t.capacity_bytes)} (one per {t.scope}) = "
                                  f"{fmt_count(t.capacity_chunks)} chunks = {fmt_count(t.capacity_tokens)} tokens each; "
                                  f"eviction {t.eviction}{ttl}{configured}")
            if t.name == "nvme" and r.nvme is not None:
                tiers.add_row("nvme drives", _drives(r))
        tables.append(tiers)

    n = r.kv_offloading
    if n:
        native = Table(title=f"vLLM native offloading (OffloadingConnector, chunk {n.chunk_tokens} tokens = "
                             f"{fmt_bytes(n.chunk_bytes)})", show_header=False, title_justify="left")
        native.add_column(style="bold", no_wrap=True)
        native.add_column()
        native.add_row("ddr", f"{r.instances} x {fmt_bytes(n.capacity_bytes)} (one per instance) = "
                              f"{fmt_count(n.capacity_chunks)} chunks = {fmt_count(n.capacity_tokens)} tokens each; "
                              f"eviction {n.eviction}; loads and stores asynchronous over PCIe "
                              f"({fmt_bandwidth(r.pcie_bandwidth or r.hbm_bandwidth)})")
        tables.append(native)

    if r.ceph:
        c = r.ceph
        ceph = Table(title=f"Ceph ({c.deploy})", show_header=False, title_justify="left")
        ceph.add_column(style="bold", no_wrap=True)
        ceph.add_column()
        ceph.add_row("OSDs", f"{c.osds} x {fmt_bytes(c.osd_size)} {c.device_class.name} on {c.hosts} host(s), {c.network.name}")
        ceph.add_row("capacity", f"{fmt_bytes(c.raw_bytes)} raw, {fmt_bytes(c.usable_bytes)} usable at size {c.pool_size}")
        ceph.add_row("pool", f"{c.pool_name} size {c.pool_size} min_size {c.pool_min_size} pg_num {c.pool_pg_num}")
        access = (f"s3 via RGW {c.rgw_bucket}.{c.rgw_dns_name}:{c.rgw_port}" if c.access == "s3" else f"cephfs at {c.cephfs_mount}")
        ceph.add_row("access", access)
        if c.kv_budget_bytes is not None:
            ceph.add_row("KV tier", fmt_bytes(c.kv_budget_bytes))
        tables.append(ceph)
    return tables


def _nvme_table(cat: Catalog, example: bool) -> Table:
    nvme = Table(title="NVMe classes", title_justify="left")
    for col in ("name", *(["example"] if example else []), "read", "write", "read IOPS", "write IOPS", "read lat",
                "write lat"):
        nvme.add_column(col)
    for n in cat.nvme.values():
        nvme.add_row(n.name, *([n.example_device] if example else []), fmt_bandwidth(n.read_bandwidth),
                     fmt_bandwidth(n.write_bandwidth), fmt_count(n.read_iops), fmt_count(n.write_iops),
                     fmt_duration(n.read_latency), fmt_duration(n.write_latency))
    return nvme


def catalog_tables(cat: Catalog, width: int | None = None) -> list[Table]:
    """The catalog's tables; one wider than `width` columns leaves out a column and says so (None: all)."""
    llm = Table(title="Models", title_justify="left")
    for col in ("name", "attention", "layers", "KV heads", "head dim", "params", "context", "KV/token bf16"):
        llm.add_column(col)
    for m in sorted(cat.llms.values(), key=lambda m: m.name):
        kv = kv_bytes_per_token(m, 2)
        llm.add_row(m.name, m.attention, str(m.num_layers), str(m.num_kv_heads), str(m.head_dim),
                    f"{m.params / 1e9:.2f} B", fmt_count(m.max_context), fmt_bytes(kv))
    dev = Table(title="Accelerators", title_justify="left")
    for col in ("name", "kind", "memory", "bandwidth", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp32 TFLOP/s", "PCIe",
                "NVLink"):
        dev.add_column(col)
    for d in cat.devices.values():
        dev.add_row(d.name, d.kind, fmt_bytes(d.memory), fmt_bandwidth(d.memory_bandwidth), f"{d.bf16_tflops:g}",
                    f"{d.fp8_tflops:g}" if d.fp8_tflops else "-", f"{d.fp32_tflops:g}" if d.fp32_tflops else "-",
                    fmt_bandwidth(d.pcie) if d.pcie else "-",
                    fmt_bandwidth(d.nvlink) if d.nvlink else "-")
    nvme = _nvme_table(cat, example=True)
    if width is not None and natural_width(nvme) > width:      # the example drive is what goes (--wide shows it)
        nvme = _nvme_table(cat, example=False)
        nvme.caption, nvme.caption_justify = "left out: example; --wide shows all", "left"
    nics = Table(title="NICs", title_justify="left")
    for col in ("name", "bandwidth", "latency"):
        nics.add_column(col)
    for n in cat.nics.values():
        nics.add_row(n.name, fmt_bandwidth(n.bandwidth), fmt_duration(n.latency))
    ceph = Table(title="Ceph OSD device classes", title_justify="left")
    for col in ("name", "read/OSD", "write/OSD", "read IOPS", "write IOPS", "read lat", "write lat"):
        ceph.add_column(col)
    for c in cat.ceph_device_classes.values():
        ceph.add_row(c.name, fmt_bandwidth(c.osd_read_bandwidth), fmt_bandwidth(c.osd_write_bandwidth),
                     fmt_count(c.osd_read_iops), fmt_count(c.osd_write_iops), fmt_duration(c.read_latency),
                     fmt_duration(c.write_latency))
    prices = Table(title="Prices (USD; each cited in models/prices.yaml, how kvplan uses them: docs/planning.md)",
                   title_justify="left")
    for col in ("what", "per", "name", "USD"):
        prices.add_column(col)
    per = {"gpu_hour": ("accelerator", "GPU-hour"), "ddr_gb_month": ("ddr", "GB-month"),
           "nvme_gb_month": ("nvme", "GB-month"), "ceph_raw_gb_month": ("ceph, raw", "GB-month"),
           "nic_port_month": ("NIC port", "month")}
    for field, (what, unit) in per.items():
        for price in getattr(cat.prices, field):
            prices.add_row(what, unit, price.name, f"{price.usd:g}")
    return [llm, dev, nvme, nics, ceph, prices]


def _pools(r) -> str:
    """A disaggregated spec's accelerators: each pool's instances, TP and accelerator."""
    d = r.disaggregation
    return ", ".join(f"{role}: {p.instances} x TP {p.tensor_parallel} on {p.device.name}"
                     for role, p in (("prefill", d.prefill), ("decode", d.decode))) + f" ({r.nodes} node(s))"
