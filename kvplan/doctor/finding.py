"""A finding: one thing `kvplan doctor` found wrong, the evidence for it, and the spec changes that fix it.

A finding has a **symptom** (what a user would see, with its numbers), a **cause** (what kvplan found
behind it) with its **evidence** (the figures that show the cause: tier occupancy, hit ratio against the
working set, the share of the p99 TTFT spent queueing, ...), and **fixes**: each a set of spec changes
(dotted paths, as `--vary` writes them) with the metric that was wrong. A fix is *proven* by simulating the
changed spec on the same seeds (kvplan.doctor.prove): its `Proof` holds that metric before and after, the
paired difference with its 95 % interval, and the bill before and after. Only a fix that helps by more than
the noise (or saves money without a loss beyond the noise) is `kept`; `--write` applies the kept ones.

Severity: a *problem* makes `kvplan doctor` exit non-zero; *advice* (the design note's advice judged
where it applies, a tier that could be smaller) is reported and does not.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Severity = Literal["problem", "advice"]
Goal = Literal["improve", "save"]
"""improve: the metric must get better beyond the noise; save: the bill must fall and the metric not get
worse beyond the noise."""
Verdict = Literal["helps", "saves", "within noise", "hurts", "breaks the SLO", "costs more", "untested", "refused"]
KEPT = ("helps", "saves")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Change(_Model):
    path: str
    """A dotted spec path (`lmcache.ddr.size`), as `kvplan sweep --vary` takes it."""
    value: Any
    """The value as a spec file writes it (`64GiB`, `LFU`, 16); None removes the key (its default applies)."""

    def __str__(self) -> str:
        if self.value == 0 and self.path.startswith("lmcache.") and self.path.endswith(".size"):
            return f"{self.path.removesuffix('.size')}: removed"
        if isinstance(self.value, dict):         # a section (serving.disaggregation), as a spec would write it inline
            import yaml

            return f"{self.path}: " + yaml.safe_dump(self.value, default_flow_style=True, sort_keys=False, width=10**6).strip()
        return f"{self.path}: {'(default)' if self.value is None else self.value}"


class SloCheck(_Model):
    """One SLO target against a fix's simulated runs: the mean over the seeds, its 95 % interval, and whether the
    mean meets the target (`outcome`: met or missed beyond the noise of the seeds, or undecided)."""

    key: str
    target: float
    after: float
    after_ci95: float
    met: bool
    outcome: Literal["met", "missed", "undecided"]


class Proof(_Model):
    """A fix simulated: the metric that was wrong, before and after, on the same seeds."""

    metric: str
    label: str
    better: Literal["lower", "higher"]
    unit: str
    seeds: list[int]
    before: float
    after: float
    after_ci95: float
    scale: Literal["linear", "log"] = "linear"
    """How the seeds were paired: latencies on the log scale (their noise is relative: a p99 of 7 s and 21 s on two
    seeds), everything else as it is."""
    difference: float
    """The mean of the per-seed differences: after - before, or ln(after) - ln(before) on the log scale."""
    difference_ci95: float
    """Half-width of the 95 % interval of that difference (0 with one seed: not tested)."""
    usd_per_hour_before: float | None
    usd_per_hour_after: float | None
    verdict: Verdict
    refused: str | None = None
    """Why the changed spec is not valid (the loader's problem and fix), for verdict `refused`."""
    broken: list[str] = []
    """SLO targets the change makes worse beyond the noise and misses (verdict `breaks the SLO`), each as
    'key before -> after (target)'."""
    slo: list[SloCheck] = []
    """Every SLO target of the spec on the changed spec's runs (empty without an SLO, or when refused)."""
    nodes_before: int | None = None
    nodes_after: int | None = None
    """Serving nodes before and after (a fix that adds instances may need another node)."""

    @property
    def meets_slo(self) -> bool:
        """Every SLO target met on the mean of the seeds (False without an SLO, or when not simulated)."""
        return bool(self.slo) and all(c.met for c in self.slo)


class Fix(_Model):
    summary: str
    changes: list[Change]
    metric: str
    """The key of the metric that was wrong (kvplan.doctor.metrics.METRICS)."""
    goal: Goal = "improve"
    proof: Proof | None = None

    @property
    def kept(self) -> bool:
        return self.proof is not None and self.proof.verdict in KEPT

    def key(self) -> tuple:
        return tuple(sorted((c.path, str(c.value)) for c in self.changes)), self.metric, self.goal


class Finding(_Model):
    code: str
    """Stable identifier of the diagnosis (docs/doctor.md lists them)."""
    area: Literal["hit ratio", "memory", "tail", "ceph", "advice", "live"]
    severity: Severity
    title: str
    symptom: str
    cause: str
    evidence: dict[str, Any]
    """Named figures behind the cause (base units: bytes, seconds, ratios)."""
    fixes: list[Fix] = []
    action: str | None = None
    """A command that fixes it where no spec change does (a component down: the deploy that restarts it)."""

    @property
    def kept(self) -> list[Fix]:
        return [f for f in self.fixes if f.kept]


class Ranked(_Model):
    """A fix in the diagnosis's ranking: which finding proposed it, and whether it meets every SLO target."""

    code: str
    fix: Fix
    meets_slo: bool
    margin: float
    """The smallest relative headroom over the SLO targets, (target - after) / target (negative: missed)."""


class Diagnosis(_Model):
    kind: Literal["doctor"] = "doctor"
    name: str
    spec_hash: str
    source: Literal["simulation", "live"]
    seeds: list[int]
    """The seeds simulated (the findings' figures are their means; proofs pair them seed by seed)."""
    findings: list[Finding]
    ranking: list[Ranked] = []
    """The proven fixes for a missed SLO, cheapest first among those that meet every target, then those that help
    without meeting it (kvplan.doctor.rank)."""
    notes: list[str] = []

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "problem"]

    @property
    def healthy(self) -> bool:
        return not self.problems


__all__ = ["Change", "Diagnosis", "Finding", "Fix", "Goal", "KEPT", "Proof", "Ranked", "Severity", "SloCheck", "Verdict"]
