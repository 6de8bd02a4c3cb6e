"""The page of a diagnosis (`kvplan doctor SPEC --json > doctor.json`, then `kvplan report doctor.json`).

A diagnosis is a list of findings (symptom, cause, evidence) and, for each, the fixes the doctor tried
on the spec and what a simulation of the changed spec showed (before, after with its 95 % interval over
the seeds, and a verdict). The page shows the findings, each one's fixes, and each proven fix's metric
before and after side by side, one plot per metric.
"""

from __future__ import annotations

from typing import Any

from ..doctor.finding import Diagnosis, Finding
from . import svg
from .figures import Figure, Ids
from .page import Document, Part
from .sections import Section

FORMATS = {"s": svg.fmt_seconds, "ratio": svg.fmt_share}


def _fmt(unit: str):
    return FORMATS.get(unit, svg.fmt_plain)


def _evidence(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def summary_part(d: Diagnosis, healthy: bool | None) -> Part:
    problems = [f for f in d.findings if f.severity == "problem"]
    rows = [["source", f"{d.source} ({len(d.seeds)} seed(s): {', '.join(str(s) for s in d.seeds)})"
                       if d.seeds else d.source],
            ["verdict", ("healthy" if healthy else "not healthy") if healthy is not None else
             ("healthy" if not problems else "not healthy")],
            ["findings", f"{len(d.findings)} ({len(problems)} problem(s), {len(d.findings) - len(problems)} advice)"]]
    return Part("Diagnosis", "What the doctor found in the spec's simulated (or live) run, and which fixes a simulation "
                             "proved.", tables=[Section("Diagnosis", None, rows)], notes=list(d.notes))


def findings_part(d: Diagnosis) -> Part:
    table = Section("Findings", ["finding", "severity", "area", "symptom", "cause"])
    for f in d.findings:
        table.rows.append([f.title, f.severity, f.area, f.symptom, f.cause])
    tables = [table]
    for f in d.findings:
        tables += _finding_tables(f)
    return Part("Findings and fixes", "Each finding, then its evidence and the fixes tried: the metric each fix aims "
                                      "at before and after the change, with the verdict on it.", tables=tables)


def _finding_tables(f: Finding) -> list[Section]:
    out = []
    if f.evidence:
        out.append(Section(f"{f.code}: evidence", None, [[k, _evidence(v)] for k, v in f.evidence.items()]))
    if f.fixes:
        fixes = Section(f"{f.code}: fixes", ["fix", "changes", "metric", "before", "after", "verdict"])
        for n, fix in enumerate(f.fixes, 1):
            p = fix.proof
            changes = "; ".join(str(c) for c in fix.changes)
            if p is None:
                fixes.rows.append([f"#{n} {fix.summary}", changes, fix.metric, "-", "-", "not simulated"])
                continue
            fmt = _fmt(p.unit)
            after = fmt(p.after) + (f" ± {fmt(p.after_ci95)}" if len(p.seeds) > 1 else "")
            verdict = p.verdict + (f": {p.refused}" if p.refused else "") + \
                (f" ({'; '.join(p.broken)})" if p.broken else "")
            fixes.rows.append([f"#{n} {fix.summary}", changes, p.label, fmt(p.before),
                               "-" if p.verdict == "refused" else after, verdict])
        out.append(fixes)
    if f.action:
        out.append(Section(f"{f.code}: action", None, [[f.action]]))
    return out


def proofs_part(d: Diagnosis, ids: Ids) -> Part:
    part = Part("Fixes proven by simulation", "Each simulated fix's metric before and after the change, one plot "
                                              "per metric.")
    by_metric: dict[str, list] = {}
    for f in d.findings:
        for n, fix in enumerate(f.fixes, 1):
            if fix.proof is not None and fix.proof.verdict != "refused":
                by_metric.setdefault(fix.proof.label, []).append((f"{f.code} #{n}", fix))
    for label, fixes in by_metric.items():
        unit = fixes[0][1].proof.unit
        title = f"{label} before and after each fix"
        ident = ids()
        names = [name for name, _ in fixes]             # short: the fixes table gives each #n its summary
        chart = svg.bar_chart(ident, title, names,
                              [svg.Bars("before", [fix.proof.before for _, fix in fixes], svg.colour(0)),
                               svg.Bars("after", [fix.proof.after for _, fix in fixes], svg.colour(1))],
                              value_label=label, value_format=_fmt(unit),
                              desc=f"{label} of the spec as written and of each changed spec, mean over the seeds.")
        verdicts = "; ".join(f"{name} ({fix.summary}): {fix.proof.verdict}" for name, fix in fixes)
        part.figures.append(Figure(ident, title, chart, f"Mean over {len(d.seeds)} seed(s). {verdicts}."))
    if not part.figures:
        part.notes.append("No fix was simulated: the findings carry no proven change (or --no-prove left them out).")
    return part


def document(d: Diagnosis, name: str, healthy: bool | None = None) -> Document:
    ids = Ids()
    problems = sum(1 for f in d.findings if f.severity == "problem")
    title = f"{d.name}: doctor, " + (f"{problems} problem(s)" if problems else "no problem") + \
        f", {len(d.findings) - problems} advice"
    subtitle = f"spec {d.spec_hash[:12]}, {name}; from a {d.source} run"
    return Document(title, subtitle, [summary_part(d, healthy), findings_part(d), proofs_part(d, ids)])


__all__ = ["document"]
