"""Diagnose: every rule over a case, every proposed fix proven, and the spec with the kept fixes applied.

Rules run in a fixed order (hit ratio, memory, tail, Ceph), then the follow-ups that judge the design
note's advice where an earlier finding shows it applies. Fixes proposed by several findings (the same
changes for the same metric) are proven once, and the same changes judged on two metrics are simulated once. The result lists problems before advice.

Findings about a missed SLO target also get the tier candidates (each offload tier removed or halved), and
the diagnosis ranks the proven fixes by cost among those that meet the SLO (kvplan.doctor.rank).
`fixed_mapping` is what `--write` writes (kvplan.doctor.rank.written: the cheapest fix that meets the SLO
first, and a combination only when it was simulated as written).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..resolve import Resolved
from ..spec import Topology
from . import ceph, hit_ratio, live, memory, native, tail
from .case import Case
from .finding import Change, Diagnosis, Finding
from .prove import prove
from .rank import chosen, ranking, with_tier_fixes, written

if TYPE_CHECKING:
    from ..live.observe import Snapshot

RULES = [*hit_ratio.RULES, *native.RULES, *memory.RULES, *tail.RULES, *ceph.RULES]
FOLLOW_UPS = [*memory.FOLLOW_UPS, *ceph.FOLLOW_UPS]


def simulated_case(topo: Topology, resolved: Resolved, data: dict, base_dir: Path | None, seeds: list[int],
                   cache=None, workers: int = 1) -> Case:
    """The case of `topo` simulated on `seeds` (through the run cache)."""
    from ..sweep.cache import run_cached
    from ..sweep.executor import Task

    results, _ = run_cached([Task(topo, seed) for seed in seeds], cache, workers=workers)
    return Case(topo=topo, resolved=resolved, data=data, base_dir=base_dir, results=list(results))


def diagnose(case: Case, cache=None, workers: int = 1, prove_fixes: bool = True,
             on_fix: Callable[[int, int], None] | None = None) -> Diagnosis:
    findings: list[Finding] = []
    for rule in RULES:
        findings += rule(case)
    for follow in FOLLOW_UPS:
        findings += follow(case, findings)
    findings = with_tier_fixes(case, findings)
    if prove_fixes:
        findings = _proven(case, findings, cache, workers, on_fix)
    return Diagnosis(name=case.resolved.name, spec_hash=case.resolved.spec_hash, source="simulation", seeds=case.seeds,
                     findings=_ordered(findings), ranking=ranking(findings), notes=_notes(case))


def diagnose_live(case: Case, snap: Snapshot, spec: str, seeds: list[int], cache=None, workers: int = 1,
                  prove_fixes: bool = True, on_fix=None) -> tuple[Diagnosis, Case]:
    """Live findings from a snapshot; fixes proven on the spec's workload simulated on `seeds` (returns the case
    with its runs, for `fixed_mapping`)."""
    findings: list[Finding] = []
    for rule in live.RULES:
        findings += rule(case, snap, spec)
    if prove_fixes and any(f.fixes for f in findings):
        case = simulated_case(case.topo, case.resolved, case.data, case.base_dir, seeds, cache, workers)
        findings = _proven(case, findings, cache, workers, on_fix)
    return Diagnosis(name=case.resolved.name, spec_hash=case.resolved.spec_hash, source="live", seeds=case.seeds,
                     findings=_ordered(findings), ranking=ranking(findings)), case


def _proven(case: Case, findings: list[Finding], cache, workers: int, on_fix) -> list[Finding]:
    keys = list(dict.fromkeys(fix.key() for f in findings for fix in f.fixes))
    first = {fix.key(): fix for f in findings for fix in reversed(f.fixes)}
    proofs, memo = {}, {}
    for i, key in enumerate(keys):
        proofs[key] = prove(case, first[key], cache, workers, memo)
        if on_fix:
            on_fix(i + 1, len(keys))
    return [f.model_copy(update={"fixes": [fix.model_copy(update={"proof": proofs[fix.key()]}) for fix in f.fixes]})
            for f in findings]


def _ordered(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: f.severity != "problem")     # stable: rule order within each


def _notes(case: Case) -> list[str]:
    n = len(case.results)
    if n < 2:
        return ["1 seed: no fix can be shown to beat the noise, so none is kept; --seeds 3 (or more) tests them"]
    return [f"{n} seeds ({', '.join(map(str, case.seeds))}): findings give their means; a fix is kept when the 95 % "
            "interval of its paired difference excludes 0 on the better side"]


def fixed_mapping(case: Case, diagnosis: Diagnosis, cache=None, workers: int = 1) -> tuple[dict, list[Change], list[str]]:
    """The spec mapping `--write` writes, its changes, and why any kept fix was left out (kvplan.doctor.rank.written;
    a combination of several fixes is simulated here, through the run cache)."""
    w = written(case, diagnosis, cache, workers)
    return w["data"], w["changes"], w["left_out"]


__all__ = ["FOLLOW_UPS", "RULES", "chosen", "diagnose", "diagnose_live", "fixed_mapping", "simulated_case", "written"]
