"""The page of a live snapshot (`kvplan observe SPEC --target URL --json > snapshot.json`, then
`kvplan report snapshot.json`).

A snapshot is the live stack read once (kvplan.live.observe.Snapshot): which components answered, and
the counters of every vLLM instance, the LMCache server and Ceph, cumulative since each started. The
page lists them and draws where each instance's prompt tokens came from (vLLM's prefix cache, LMCache,
computed), the live counterpart of a simulation's "Where prompt KV came from".
"""

from __future__ import annotations

from datetime import datetime, timezone

from ..live.observe import Snapshot
from . import svg
from .figures import TIER_COLOURS, Figure, Ids
from .page import Document, Part
from .sections import Section

SOURCES = (("hbm_tokens", "hbm (prefix cache)", TIER_COLOURS["hbm"]),
           ("lmcache_tokens", "LMCache", TIER_COLOURS["ddr"]),
           ("computed_tokens", "computed", TIER_COLOURS["recomputed"]))


def _counters(title: str, values: dict[str, float]) -> Section:
    return Section(title, None, [[k, f"{v:,.6g}"] for k, v in sorted(values.items())])


def document(snap: Snapshot, name: str) -> Document:
    ids = Ids()
    up = sum(c.up for c in snap.components)
    taken = datetime.fromtimestamp(snap.taken_at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    status = Section("Components", ["component", "up", "detail"],
                     [[c.name, "up" if c.up else "DOWN", c.detail or "-"] for c in snap.components])
    parts = [Part("Components", f"{up} of {len(snap.components)} components answered.", tables=[status])]
    counters = [_counters(f"vLLM {url}", values) for url, values in sorted(snap.vllm.items())]
    counters += [_counters(label, values) for label, values in (("LMCache", snap.lmcache), ("Ceph", snap.ceph))
                 if values]
    notes = [] if counters else ["No component returned counters."]
    parts.append(Part("Counters", "Cumulative since each component started.", tables=counters, notes=notes))
    sourced = [(url, values) for url, values in sorted(snap.vllm.items())
               if sum(values.get(key, 0.0) for key, _, _ in SOURCES) > 0]
    sources = Part("Where prompt tokens came from", "vLLM's count of prompt tokens by source, per instance.")
    if sourced:
        title = "Prompt tokens by source, per instance"
        ident = ids()
        totals = [sum(values.get(key, 0.0) for key, _, _ in SOURCES) for _, values in sourced]
        chart = svg.bar_chart(ident, title, [url for url, _ in sourced],
                              [svg.Bars(label, [values.get(key, 0.0) / total for (_, values), total
                                                in zip(sourced, totals)], colour)
                               for key, label, colour in SOURCES],
                              value_label="share of prompt tokens", value_format=svg.fmt_share, stacked=True,
                              value_max=1.0, desc="Shares of each instance's prompt tokens: hit in vLLM's prefix "
                                                  "cache, loaded from LMCache, or computed.")
        sources.figures.append(Figure(ident, title, chart, f"{len(sourced)} instance(s); from "
                                                           "vllm:prompt_tokens_by_source_total."))
    else:
        sources.notes.append("No instance reported prompt tokens by source (a vLLM without that counter, or no "
                             "request served yet).")
    parts.append(sources)
    return Document(f"live snapshot: {up}/{len(snap.components)} components up", f"taken {taken}; {name}", parts)


__all__ = ["document"]
