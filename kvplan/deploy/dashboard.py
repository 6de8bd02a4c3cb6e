"""The deployment's Grafana dashboard: each live metric kvplan reads, beside the simulator's prediction for it.

An operator who deployed a spec wants to see at a glance where the stack departs from the plan. Each
panel of the dashboard plots one figure from the deployment's Prometheus (the queries of the alert
rules and of `kvplan observe`: vLLM's histograms and counters, LMCache's MP-server counters, Ceph's
OSD op latency) and, as a flat line beside it, what `kvplan simulate` predicted for the deployed
spec (`Predicted`, filled in by the command that renders: the deployment knows no simulator). The
panels:

- TTFT p50 and p99, from vLLM's `time_to_first_token_seconds` histogram;
- TPOT p50, from `request_time_per_output_token_seconds` (one value per request, as the simulator's);
- requests per second finished;
- prompt tokens from a cache (vLLM's prefix cache or LMCache's tiers) and from LMCache alone, the
  alert rule's ratio (`stack.hit_ratio_expr`);
- KV block utilisation (`kv_cache_usage_perc`, the fullest instance), against the simulated mean;
- with LMCache's MP server, its lookup hits per second by level, L1 (the ddr tier) and L2 (nvme, ceph);
- with a Ceph tier, the mean latency of one OSD op on the slowest OSD (the alert rule's expression).

The dashboard picks its Prometheus through a `datasource` variable, so the same file works when
imported by hand (Dashboards > Import) and when provisioned from the monitoring host, where the
monitoring role writes it as `kvplan-dashboard.json`. tests/test_dashboard.py checks it against the
dashboard types Grafana publishes (grafana-foundation-sdk); tests/test_stack_local.py runs every
panel's query on the live stack's Prometheus and requires data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..resolve import Resolved
from .stack import Stack, hit_ratio_expr

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WINDOW = "5m"
"""The rate window of every live query (the alert rules' window)."""


@dataclass(frozen=True)
class Predicted:
    """What `kvplan simulate` predicts for the deployed spec, one figure per panel (None: not simulated)."""

    seed: int
    ttft_p50: float
    ttft_p99: float
    tpot_p50: float
    requests_per_s: float
    cache_share: float
    """Prompt tokens whose KV came from any cache: vLLM's prefix cache or an offload tier."""
    lmcache_share: float
    """Prompt tokens whose KV came from an offload tier (ddr, nvme, ceph)."""
    block_utilisation: float
    """Mean share of the HBM KV blocks in use."""
    l1_tokens_per_s: float
    """Prompt tokens per second served from the ddr tier (LMCache's L1)."""
    l2_tokens_per_s: float
    """Prompt tokens per second served from the nvme and ceph tiers (LMCache's L2)."""
    ceph_op_latency: float | None
    """Mean latency of one Ceph op, in seconds (None without a ceph tier)."""


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]
    """(legend, live PromQL) per line; its prediction is looked up by panel title and legend."""
    description: str


def panels(r: Resolved, stack: Stack) -> list[Panel]:
    """The panels this deployment can fill: LMCache's only with its MP server, Ceph's only with a ceph tier."""
    hist = "histogram_quantile({q}, sum by (le) (rate(vllm:{name}_bucket[" + WINDOW + "])))"
    queries = "sum(rate(vllm:prefix_cache_queries_total[" + WINDOW + "]))"
    found = [
        Panel("TTFT", "s", (("p50", hist.format(q=0.5, name="time_to_first_token_seconds")),
                            ("p99", hist.format(q=0.99, name="time_to_first_token_seconds"))),
              "Time to first token over all vLLM instances, from vLLM's histogram (its buckets bound the precision)."),
        Panel("TPOT p50", "s", (("p50", hist.format(q=0.5, name="request_time_per_output_token_seconds")),),
              "Time per output token, one value per request, from vLLM's histogram."),
        Panel("Requests finished", "reqps", (("requests/s", f"sum(rate(vllm:request_success_total[{WINDOW}]))"),),
              "Requests vLLM finished per second; the prediction is the simulated workload's rate."),
        Panel("Prompt tokens from a cache", "percentunit",
              (("any cache", hit_ratio_expr(r)),
               ("LMCache tiers", f"sum(rate(vllm:external_prefix_cache_hits_total[{WINDOW}])) / {queries}")),
              "Share of prompt tokens whose KV came from vLLM's prefix cache or LMCache's tiers (the alert rule's "
              "ratio), and from LMCache's tiers alone."),
        Panel("KV block utilisation", "percentunit", (("fullest instance", "max(vllm:kv_cache_usage_perc)"),),
              "Share of vLLM's HBM KV blocks in use; the prediction is the simulated mean."),
    ]
    if stack.monitoring is not None and stack.monitoring.monitoring_lmcache_targets:
        rate = "sum(rate(lmcache_mp_lookup_hit_{level}_tokens_total[" + WINDOW + "]))"
        found.append(Panel("LMCache hits by level", "short",
                           (("L1 (ddr) tokens/s", rate.format(level="l1")),
                            ("L2 (nvme, ceph) tokens/s", rate.format(level="l2"))),
                           "Prompt tokens per second LMCache's MP server found in L1 and in L2 when vLLM looked up."))
    if r.ceph is not None:
        ops = "rate(ceph_osd_op_r_latency_{0}[" + WINDOW + "]) + rate(ceph_osd_op_w_latency_{0}[" + WINDOW + "])"
        found.append(Panel("Ceph op latency", "s",
                           (("slowest OSD", f"max(({ops.format('sum')}) / ({ops.format('count')}))"),),
                           "Mean latency of one RADOS op (queueing and replication included) on the slowest OSD, "
                           "the alert rule's expression; the prediction is the simulated mean op latency."))
    return found


def _predicted_values(p: Predicted) -> dict[tuple[str, str], float | None]:
    """(panel title, legend) -> the predicted value of that line."""
    return {("TTFT", "p50"): p.ttft_p50, ("TTFT", "p99"): p.ttft_p99, ("TPOT p50", "p50"): p.tpot_p50,
            ("Requests finished", "requests/s"): p.requests_per_s,
            ("Prompt tokens from a cache", "any cache"): p.cache_share,
            ("Prompt tokens from a cache", "LMCache tiers"): p.lmcache_share,
            ("KV block utilisation", "fullest instance"): p.block_utilisation,
            ("LMCache hits by level", "L1 (ddr) tokens/s"): p.l1_tokens_per_s,
            ("LMCache hits by level", "L2 (nvme, ceph) tokens/s"): p.l2_tokens_per_s,
            ("Ceph op latency", "slowest OSD"): p.ceph_op_latency}


def dashboard(r: Resolved, stack: Stack, predicted: Predicted | None) -> dict[str, Any]:
    """The Grafana dashboard model (JSON) of this deployment."""
    values = _predicted_values(predicted) if predicted is not None else {}
    out = []
    for i, panel in enumerate(panels(r, stack)):
        targets = []
        for legend, expr in panel.queries:
            targets.append({"refId": chr(ord("A") + len(targets)), "expr": expr, "legendFormat": f"{legend} (live)",
                            "datasource": DATASOURCE})
            value = values.get((panel.title, legend))
            if value is not None:
                targets.append({"refId": chr(ord("A") + len(targets)), "expr": f"vector({float(value)!r})",
                                "legendFormat": f"{legend} (predicted, seed {predicted.seed})", "datasource": DATASOURCE})
        out.append({"type": "timeseries", "id": i + 1, "title": panel.title, "description": panel.description,
                    "datasource": DATASOURCE, "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                    "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []}, "targets": targets})
    about = (f"kvplan's prediction for spec '{r.name}' (sha256 {r.spec_hash[:12]}, seed {predicted.seed}) beside the "
             "live metrics" if predicted is not None else
             f"the live metrics of spec '{r.name}' (sha256 {r.spec_hash[:12]}); rendered without a simulation, so "
             "no prediction is drawn")
    return {"uid": f"kvplan-{r.spec_hash[:12]}", "title": f"kvplan: {r.name}", "description": about,
            "tags": ["kvplan"], "editable": True, "schemaVersion": 39, "time": {"from": "now-1h", "to": "now"},
            "refresh": "30s",
            "templating": {"list": [{"type": "datasource", "name": "datasource", "label": "Prometheus",
                                     "query": "prometheus"}]},
            "panels": out}
