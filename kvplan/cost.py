"""The cost model: what a topology costs per hour, per tier, and per million tokens it serves.

Two kinds of money, both per hour (docs/planning.md, "Cost model", has every formula):

- **opex**: accelerators rented by the hour. GPUs = instances x tensor_parallel, each at the
  catalog's on-demand `gpu_hour` for the accelerator.
- **amortised capex**: hardware bought for the KV tiers, at the catalog's street price / 36
  months, turned into hours at 730 hours a month. ddr and nvme are per node, times the nodes;
  an owned Ceph cluster (cephadm, packages) costs its raw capacity (OSDs x osd_size, so the
  pool's replication is paid for: raw = usable x pool size); a Ceph cluster kvplan does not own
  (`deploy: external`) costs the raw bytes the KV tier occupies in it (tier size x pool size);
  one storage-network port per GPU node and, for an owned cluster, per Ceph host; disaggregated, one port of the KV
  transfer's NIC class per GPU.

Prices come from models/prices.yaml, where each cites a public source and its date; the spec's
`cost:` section overrides any of them. Per-token figures divide the hourly total by the tokens a
simulation served per hour: each charges the whole bill to one kind of token, so they compare
topologies with each other, not with a provider's price list.
"""

from __future__ import annotations

from typing import Literal, Protocol, Sequence

from pydantic import BaseModel, ConfigDict

from .catalog import Catalog, Price, load_catalog
from .errors import Problem, SpecError
from .resolve import Resolved
from .spec import Topology

HOURS_PER_MONTH = 730.0
"""8,760 hours a year / 12: the *_month prices in models/prices.yaml become hourly ones."""
GB = 1e9
"""Prices are per GB = 10^9 bytes."""
DDR_PRICE = "ddr5-4800"
"""The ddr_gb_month row used: a spec does not name its DRAM generation (both rows cost the same today)."""
OWNED_CEPH = ("cephadm", "packages")
"""Ceph deploy modes in which kvplan builds, so the owner pays for, the whole cluster."""


class Throughput(Protocol):
    """What the per-token figures need of a run: a simulation result (kvplan.sim.result.SimResult) has it."""

    @property
    def prompt_tokens_per_s(self) -> float: ...

    @property
    def generated_tokens_per_s(self) -> float: ...


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TierCost(_Model):
    """One line of the bill."""

    tier: Literal["hbm", "ddr", "nvme", "ceph", "network"]
    """hbm = the accelerators (their HBM holds the L1 KV cache); network = storage-network ports."""
    kind: Literal["opex", "capex"]
    """opex: rented by the hour; capex: bought, amortised over 36 months."""
    quantity: float
    """How many units: GPUs, GB or ports."""
    unit: Literal["GPU", "GB", "port"]
    what: str
    """The quantity in words, e.g. '4 nodes x 8.0 GB'."""
    usd_per_unit_hour: float
    """Price of one unit for one hour."""
    price: str
    """Where the price came from: 'prices.yaml gpu_hour A100-80GB' or 'spec cost.gpu_hour'."""
    usd_per_hour: float
    """quantity x usd_per_unit_hour."""


class CostBreakdown(_Model):
    """What a topology costs, and (given simulations) what it costs per token served."""

    name: str
    spec_hash: str
    tiers: list[TierCost]
    opex_usd_per_hour: float
    capex_usd_per_hour: float
    usd_per_hour: float
    """opex + capex."""
    prompt_tokens_per_s: float | None = None
    """Mean over the simulations given (None without any)."""
    generated_tokens_per_s: float | None = None
    usd_per_1m_prompt_tokens: float | None = None
    """usd_per_hour / (prompt tokens per hour / 10^6)."""
    usd_per_1m_generated_tokens: float | None = None
    """usd_per_hour / (generated tokens per hour / 10^6)."""

    def tier(self, name: str) -> TierCost | None:
        return next((t for t in self.tiers if t.tier == name), None)


def cost_of(topo: Topology, resolved: Resolved, results: Sequence[Throughput] = (),
            catalog: Catalog | None = None) -> CostBreakdown:
    """The hourly bill of `topo` (resolved as `resolved`), per tier; per 1M tokens when `results` are given.

    Raises SpecError naming `cost.<price>` when a price is neither in the catalog nor in the spec.
    """
    catalog = catalog or load_catalog()
    overrides, prices, r = topo.cost, catalog.prices, resolved
    problems: list[Problem] = []

    def price(key: str, name: str, per_month: bool) -> tuple[float, str]:
        given = getattr(overrides, key)
        if given is not None:
            usd, source = given, f"spec cost.{key}"
        else:
            row = _row(getattr(prices, key), name)
            if row is None:
                problems.append(Problem(f"cost.{key}", f"models/prices.yaml has no {key} price for '{name}'", name,
                                        ", ".join(p.name for p in getattr(prices, key)),
                                        f"set cost.{key}: <USD> in the spec, or add a cited row to models/prices.yaml"))
                return 0.0, "missing"
            usd, source = row.usd, f"prices.yaml {key} {row.name}"
        return (usd / HOURS_PER_MONTH if per_month else usd), source

    lines: list[TierCost] = []

    def add(tier, kind, quantity, unit, what, key, name, per_month=True):
        unit_price, source = price(key, name, per_month)
        lines.append(TierCost(tier=tier, kind=kind, quantity=quantity, unit=unit, what=what, usd_per_unit_hour=unit_price,
                              price=source, usd_per_hour=quantity * unit_price))

    d = r.disaggregation
    pools = [(r, "")] if d is None else [(d.prefill, " prefill"), (d.decode, " decode")]
    for pool, role in pools:                     # a disaggregated spec's pools, each at its accelerator's price
        add("hbm", "opex", pool.gpus_total, "GPU",
            f"{pool.gpus_total} x {pool.device.name} ({pool.instances} x TP {pool.tensor_parallel}{role})",
            "gpu_hour", pool.device.name, per_month=False)
    lm = topo.lmcache
    if lm is not None and lm.ddr is not None:
        add("ddr", "capex", r.nodes * lm.ddr.size / GB, "GB", f"{r.nodes} node(s) x {_gb(lm.ddr.size)} GB",
            "ddr_gb_month", DDR_PRICE)
    n = r.kv_offloading                         # vLLM's native CPU tier: host DRAM of each instance
    if n is not None:
        add("ddr", "capex", r.instances * n.capacity_bytes / GB, "GB",
            f"{r.instances} instance(s) x {_gb(n.capacity_bytes)} GB (vLLM native offloading)", "ddr_gb_month", DDR_PRICE)
    if lm is not None and lm.nvme is not None and r.nvme is not None:    # priced by the drive's class, per GB
        drive = r.nvme.drive.name                # an inline drive has no catalog price unless cost.nvme_gb_month says
        add("nvme", "capex", r.nodes * lm.nvme.size / GB, "GB", f"{r.nodes} node(s) x {_gb(lm.nvme.size)} GB {drive}"
            + (f" on {r.nvme.drives} drives" if r.nvme.drives > 1 else ""), "nvme_gb_month", drive)
    c = topo.ceph
    if c is not None and r.ceph is not None:
        if c.deploy in OWNED_CEPH:
            raw = r.ceph.raw_bytes
            what = f"{r.ceph.osds} OSD(s) x {_gb(c.osd_size)} GB, size {c.pool.size}"
            ports, port_what = r.nodes + c.hosts, f"{r.nodes} + {c.hosts}"
        else:
            tier_bytes = lm.ceph.size if lm is not None and lm.ceph is not None else 0
            raw = tier_bytes * c.pool.size
            what = f"{_gb(tier_bytes)} GB x size {c.pool.size}, external"
            ports, port_what = r.nodes, f"{r.nodes}"
        add("ceph", "capex", raw / GB, "GB", what, "ceph_raw_gb_month", c.device_class)
        add("network", "capex", ports, "port", f"{port_what} x {c.network}", "nic_port_month", c.network)
    if d is not None:                            # the KV transfer's network: one port per GPU of both pools
        add("network", "capex", r.gpus_total, "port", f"{r.gpus_total} GPU(s) x {d.network.name} (KV transfer)",
            "nic_port_month", d.network.name)
    if problems:
        raise SpecError(problems)

    opex = sum(t.usd_per_hour for t in lines if t.kind == "opex")
    capex = sum(t.usd_per_hour for t in lines if t.kind == "capex")
    total = opex + capex
    prompt_tps = sum(res.prompt_tokens_per_s for res in results) / len(results) if results else None
    gen_tps = sum(res.generated_tokens_per_s for res in results) / len(results) if results else None
    return CostBreakdown(name=r.name, spec_hash=r.spec_hash, tiers=lines, opex_usd_per_hour=opex, capex_usd_per_hour=capex,
                         usd_per_hour=total, prompt_tokens_per_s=prompt_tps, generated_tokens_per_s=gen_tps,
                         usd_per_1m_prompt_tokens=per_million(total, prompt_tps),
                         usd_per_1m_generated_tokens=per_million(total, gen_tps))


def per_million(usd_per_hour: float, tokens_per_s: float | None) -> float | None:
    """USD per 10^6 tokens at `tokens_per_s`: usd_per_hour / (tokens_per_s x 3600 / 10^6); None at no throughput."""
    if not tokens_per_s:
        return None
    return usd_per_hour / (tokens_per_s * 3600.0 / 1e6)


def _gb(nbytes: float) -> str:
    gb = nbytes / GB
    return f"{gb:,.0f}" if gb >= 100 else f"{gb:.3g}"


def gpu_hour_usd(topo: Topology, device: str, catalog: Catalog) -> float:
    """What `cost_of` charges per GPU-hour of `device`: the spec's cost.gpu_hour, else the catalog's row
    (0 when neither has one: `cost_of` then refuses the spec)."""
    if topo.cost.gpu_hour is not None:
        return topo.cost.gpu_hour
    row = _row(catalog.prices.gpu_hour, device)
    return row.usd if row else 0.0


def _row(rows: list[Price], name: str) -> Price | None:
    return next((p for p in rows if p.name.lower() == name.lower()), None)
