"""Whether disaggregation pays: the same accelerators split into prefill and decode pools, or merged back.

A missed TPOT target on an aggregated spec is often prefill chunks in the decode steps (kvplan/sim/engine.py: a
step's time grows with the prompt tokens it carries); a decode pool carries none, at the price of the KV transfer
and fewer instances for each phase (docs/disaggregation.md). So every finding about a missed SLO target is given,
besides its own fixes, the same GPUs the other way round, proven by simulation like any fix (kvplan.doctor.prove),
so that the doctor says whether disaggregation pays for this workload and what it costs:

- an aggregated spec of N instances of TP t (N x t GPUs): N' prefill and N - N' decode instances of TP t, N' the
  split whose busier pool has the least roofline work (kvplan.plan.bounds.Roofline: the never-cached prompt tokens
  on the prefill pool, the output tokens on the decode pool); one instance of TP t >= 2: one prefill and one decode
  instance of TP t / 2. The KV goes over vLLM's NixlConnector on the network kvplan.plan.pools names;
- a disaggregated spec: the same GPUs as aggregated instances of the decode pool's TP.

A spec with vLLM's native offloading gets neither (kvplan.spec.disaggregation refuses the two connectors together).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..plan import pools
from ..plan.bounds import Roofline, workload_stats
from ..spec.disaggregation import POOL_FIELDS
from .case import Case
from .finding import Change, Fix

if TYPE_CHECKING:
    from ..resolve import Resolved


def shape_fixes(case: Case, metric: str) -> list[Fix]:
    """The same accelerators disaggregated (an aggregated spec) or aggregated (a disaggregated one), judged on
    `metric`; none for a spec with native offloading or a single GPU."""
    r, s = case.resolved, case.topo.serving
    if s.kv_offloading is not None:
        return []
    d = r.disaggregation
    if d is not None:
        gpus = d.prefill.gpus_total + d.decode.gpus_total
        tp = d.decode.tensor_parallel
        n = gpus // tp
        return [Fix(summary=f"aggregated: the same {gpus} GPUs as {n} instance(s) of TP {tp}, each prefilling and "
                            "decoding (no KV transfer)", metric=metric,
                    changes=[Change(path="serving.disaggregation", value=None),
                             Change(path="serving.tensor_parallel", value=tp), Change(path="serving.instances", value=n)])]
    split = _split(case)
    if split is None:
        return []
    p, n_p, dec, n_d = split
    serving = pools.disaggregated_serving(case.data.get("serving", {}), s.gpu, split)
    changes = [Change(path=f"serving.{name}", value=None) for name in (*POOL_FIELDS, *pools.AGGREGATED_ONLY)
               if name in case.data.get("serving", {})]
    changes.append(Change(path="serving.disaggregation", value=serving["disaggregation"]))
    if pools.simulation_only({**case.data, "serving": serving}) and not case.topo.simulate_only:
        changes.append(Change(path="simulate_only", value=True))
    return [Fix(summary=f"disaggregated: the same {r.gpus_total} GPUs as {n_p} prefill instance(s) of TP {p} and "
                        f"{n_d} decode instance(s) of TP {dec}, the KV over {serving['disaggregation']['connector']}",
                metric=metric, changes=changes)]


def _split(case: Case) -> tuple[int, int, int, int] | None:
    """(prefill TP, prefill instances, decode TP, decode instances) on the aggregated spec's GPUs (module docstring)."""
    r = case.resolved
    if r.instances == 1:
        half = r.tensor_parallel // 2
        return (half, 1, half, 1) if half >= 1 and r.tensor_parallel % 2 == 0 else None
    stats = workload_stats(r, case.seeds[0])
    roof = Roofline(r)
    decode = np.maximum(stats.output - 1, 0).sum()
    prefill_work = roof.load(stats.compulsory.sum(), 0, stats.span) * r.instances   # one instance's share x N
    decode_work = roof.load(0, decode, stats.span) * r.instances
    n_p = min(range(1, r.instances), key=lambda k: (max(prefill_work / k, decode_work / (r.instances - k)), k))
    return (r.tensor_parallel, n_p, r.tensor_parallel, r.instances - n_p)


def pool_path(r: "Resolved", field: str, role: str) -> tuple[str, "Resolved"]:
    """Where a fix sets a scheduler field (instances, max_num_seqs), and the figures it starts from: serving's and the
    spec's own, or disaggregated, the `role` pool's (prefill or decode)."""
    d = r.disaggregation
    if d is None:
        return f"serving.{field}", r
    return f"serving.disaggregation.{role}.{field}", getattr(d, role)
