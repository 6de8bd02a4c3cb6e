"""The disaggregated part of the planner's search space: prefill:decode splits of the same accelerators.

A disaggregated candidate (docs/disaggregation.md) is a prefill pool and a decode pool of one accelerator: each
pool's tensor parallelism from the planner's ladder, the decode pool's a multiple of the prefill pool's (vLLM's
NixlConnector reads each decode rank's heads from one prefill rank), and each pool's instance count, the two
counts together at most `--max-instances`. The KV goes over vLLM's NixlConnector (the LMCache PD connector needs
LMCache in process, which an MP spec's tiers are not) on the network the start spec names, 100GbE per GPU
without one. Everything else is the aggregated candidate's: the tiers (the prefill pool's, as the simulator gives
them), the workload, the SLO.

When the planner considers them (`considered`, `--disaggregated`): `auto` when the SLO has a TPOT target or the
start spec is disaggregated (a decode pool's batches carry no prefill, which is what pays for the extra GPUs, so
without a TPOT target a disaggregated candidate can only cost more for the same TTFT); `on` always; `only` without
aggregated candidates; `off` never. A start spec with vLLM's native offloading gets none: the two connectors
together need vLLM's MultiConnector, which kvplan does not model (kvplan.spec.disaggregation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import Problem, SpecError
from ..spec.disaggregation import POOL_FIELDS, Disaggregation, undeployed

if TYPE_CHECKING:
    from ..resolve import Resolved
    from ..spec import Topology
    from ..spec.slo import Slo

DISAGGREGATED_CHOICES = ("auto", "on", "only", "off")
CONNECTOR = Disaggregation.model_fields["connector"].default
"""The connector a split gets when the start spec names none: the spec's default (vLLM's NixlConnector)."""
AGGREGATED_ONLY = ("router", "router_thresholds", "llm_d", "kv_offloading")
"""serving's fields that a disaggregated spec may not set (the proxy routes; native offloading is refused)."""


@dataclass(frozen=True)
class Considered:
    """Whether the search holds aggregated and disaggregated candidates, and why (for the plan's report)."""

    aggregated: bool
    disaggregated: bool
    why: str


def parse_disaggregated_arg(text: str) -> str:
    """The --disaggregated choice, or a SpecError naming the flag and the choices."""
    if text not in DISAGGREGATED_CHOICES:
        raise SpecError([Problem("--disaggregated", "not a choice", text, ", ".join(DISAGGREGATED_CHOICES),
                                 "write --disaggregated auto (the default), on, only or off")])
    return text


def considered(topo: "Topology", slo: "Slo", mode: str) -> Considered:
    """What `--disaggregated MODE` means for this start spec and SLO (the module docstring)."""
    parse_disaggregated_arg(mode)
    native = topo.serving.kv_offloading is not None
    if mode == "off":
        return Considered(True, False, "not considered (--disaggregated off)")
    if native:
        if mode == "only":
            raise SpecError([Problem("serving.kv_offloading", "--disaggregated only plans prefill and decode pools, "
                                     "and vLLM's native offloading beside a P/D connector needs vLLM's "
                                     "MultiConnector, which kvplan does not model", "set",
                                     fix="remove serving.kv_offloading (an lmcache section gives the prefill pool its "
                                         "tiers), or plan with --disaggregated off")])
        return Considered(True, False, "not considered: the spec offloads with vLLM's native connector, which "
                                       "kvplan does not model beside a P/D connector")
    if mode == "only":
        return Considered(False, True, "only disaggregated candidates (--disaggregated only)")
    if mode == "on":
        return Considered(True, True, "considered beside the aggregated ones (--disaggregated on)")
    if topo.serving.disaggregation is not None:
        return Considered(True, True, "considered beside the aggregated ones: the spec is disaggregated")
    if any(key.startswith("tpot_") for key in slo.targets()):
        return Considered(True, True, "considered beside the aggregated ones: the SLO has a TPOT target")
    return Considered(True, False, "not considered: the SLO has no TPOT target, the only figure a decode pool "
                                   "without prefills improves (--disaggregated on considers them anyway)")


def splits(tps: list[int], max_instances: int) -> list[tuple[int, int, int, int]]:
    """(prefill TP, prefill instances, decode TP, decode instances) for every split the planner tries: each decode
    TP a multiple of the prefill TP, at most `max_instances` instances in the two pools together."""
    out = []
    for p in tps:
        for d in tps:
            if d % p:
                continue
            for n_p in range(1, max_instances):
                for n_d in range(1, max_instances - n_p + 1):
                    out.append((p, n_p, d, n_d))
    return out


def disaggregated_serving(serving: dict, gpu: str, split: tuple[int, int, int, int]) -> dict:
    """`serving` (an aggregated or disaggregated section as a mapping) as prefill and decode pools of `gpu`: the
    scheduler limits the section sets go to both pools (a disaggregated start spec's pools keep their own), the
    connector, network, buffer and proxy are the start spec's, or vLLM's NixlConnector."""
    p, n_p, d, n_d = split
    own = serving.get("disaggregation") or {}
    new = {k: v for k, v in serving.items() if k not in POOL_FIELDS and k not in AGGREGATED_ONLY}
    pools = {}
    for role, tp, n in (("prefill", p, n_p), ("decode", d, n_d)):
        limits = {k: (own.get(role) or {}).get(k, serving.get(k)) for k in ("max_num_seqs", "max_num_batched_tokens")}
        pools[role] = {"instances": n, "tensor_parallel": tp, "gpu": gpu,
                       **{k: v for k, v in limits.items() if v is not None}}
    rest = {k: v for k, v in own.items() if k not in ("prefill", "decode")}
    new["gpu"] = gpu
    new["disaggregation"] = {"connector": CONNECTOR, **rest, **pools}
    return new


def aggregated_serving(serving: dict) -> dict:
    """A disaggregated start spec's serving section as an aggregated one (the planner then sets its accelerator, TP
    and instances); an aggregated one as it is."""
    if serving.get("disaggregation") is None:
        return serving
    return {k: v for k, v in serving.items() if k != "disaggregation"}


def simulation_only(spec: dict) -> bool:
    """Whether a disaggregated candidate (a spec mapping) sets what the render refuses (kvplan.spec.disaggregation's
    `undeployed`), so that it can only be planned as simulate_only."""
    d = spec["serving"]["disaggregation"]
    return bool(undeployed(d.get("connector", CONNECTOR), d.get("buffer_size"), spec.get("lmcache") is not None))


def shape(r: "Resolved") -> tuple:
    """The hardware a candidate buys, as a key: (accelerator, TP, instances), or for a disaggregated one each pool's."""
    d = r.disaggregation
    if d is None:
        return (r.device.name, r.tensor_parallel, r.instances)
    return ("disaggregated", d.prefill.device.name, d.prefill.tensor_parallel, d.prefill.instances,
            d.decode.device.name, d.decode.tensor_parallel, d.decode.instances)


def accelerators(r: "Resolved") -> str:
    """'2 x H100-SXM TP4', or for a disaggregated spec 'P 2 x TP2 + D 1 x TP4 H100-SXM' (each pool's accelerator
    after its counts when they differ: 'P 2 x H100-SXM + D 1 x H200 TP4')."""
    d = r.disaggregation
    if d is None:
        return _pool(r)
    if d.prefill.device.name == d.decode.device.name:
        counts = [f"{p.instances}" + (f" x TP{p.tensor_parallel}" if p.tensor_parallel > 1 else "")
                  for p in (d.prefill, d.decode)]
        return f"P {counts[0]} + D {counts[1]} {d.prefill.device.name}"
    return f"P {_pool(d.prefill)} + D {_pool(d.decode)}"


def _pool(r: "Resolved") -> str:
    return f"{r.instances} x {r.device.name}" + (f" TP{r.tensor_parallel}" if r.tensor_parallel > 1 else "")
