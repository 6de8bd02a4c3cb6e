"""What `kvplan report` can read, recognised by shape, with an error naming the fix otherwise.

- `kvplan simulate SPEC --out FILE`: one SimResult object (keys `spec_hash`, `per_request`, ...);
- `kvplan simulate SPEC --seeds N --out FILE` and/or `--ablate`: `{"results": [SimResult, ...],
  "ablation": [{"setup": NAME, "results": [SimResult, ...]}, ...]}` (`ablation` only with `--ablate`; one
  result per seed; files of earlier kvplan versions hold one `"result"` per setup, the first seed's);
- `kvplan sweep ... --out FILE`: a SweepResult object (keys `varied`, `points`, ...);
- `kvplan capacity SPEC --out FILE`: a CapacityResult object (keys `knob`, `probes`, `outcome`, ...);
- `kvplan plan SPEC --json`: the plan as data (keys `candidates`, `winner`, `search`, ...; see
  report/plan.py `plan_json`);
- `kvplan size SPEC --out FILE`: a SizeResult object (`"kind": "size"`);
- `kvplan doctor SPEC --json`: a Diagnosis (`"kind": "doctor"`, with `healthy` and, after --write, `written`);
- `kvplan observe SPEC --target URL --json`: a Snapshot (keys `taken_at`, `components`, `vllm`, ...);
- `kvplan compare SPEC --observed RUN --json`: a list of rows (keys `metric`, `unit`, `predicted`, `observed`,
  `error`).

Each document kvplan writes now begins with its `kind` and `schema_version` (kvplan/report/kinds.py): a file with
a kind is recognised by it (one from a newer kvplan, with a higher schema_version, is refused naming both
versions); a file written before kinds existed is recognised by the keys only its kind has, as above (and a
comparison, then a bare list of rows, is now `{"kind": "CompareResult", "rows": [...]}`).

`kvplan validate --json` (a resolved spec) and `kvplan catalog --json` (reference data) are not answers:
they are refused with what they are and the command that prints them. Anything else (a missing file,
broken JSON, another tool's JSON, a result written by an incompatible kvplan) is a `SpecError` naming
the file, what is wrong and how to get a good file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import Problem, SpecError
from ..sim.result import SimResult

WRITE_ONE = ("write one with `kvplan simulate SPEC --out result.json` (or --seeds N / --ablate), "
             "`kvplan sweep SPEC --vary PATH=V1,V2 --out sweep.json`, `kvplan capacity SPEC --out capacity.json`, "
             "`kvplan plan SPEC --rate R --json > plan.json`, `kvplan size SPEC --out size.json`, "
             "`kvplan doctor SPEC --json > doctor.json`, `kvplan observe SPEC --json > snapshot.json` or "
             "`kvplan compare SPEC --observed RUN --json > compare.json`")


@dataclass
class ReportInput:
    """A loaded result file: simulation results (one per seed), an ablation, or a sweep."""

    path: Path
    kind: str
    """'result', 'seeds', 'ablation', 'sweep', 'capacity', 'plan', 'size', 'doctor', 'compare' or 'snapshot'."""
    results: list[SimResult] = field(default_factory=list)
    ablation: list[tuple[str, list[SimResult]]] = field(default_factory=list)
    """Each setup of an ablation with its runs, one per seed (one only in files of earlier kvplan versions)."""
    sweep: Any = None
    """A kvplan.sweep.result.SweepResult when kind == 'sweep'."""
    cost: Any = None
    """The kvplan.cost.CostBreakdown of the spec as written, when the file carries one."""
    size: Any = None
    """A kvplan.sizing.SizeResult when kind == 'size'."""
    capacity: Any = None
    """A kvplan.sweep.capacity.CapacityResult when kind == 'capacity'."""
    plan: Any = None
    """A kvplan.report.plan_page.PlanFile when kind == 'plan'."""
    doctor: Any = None
    """A kvplan.doctor.finding.Diagnosis when kind == 'doctor'."""
    overrides: list[str] = field(default_factory=list)
    """The --set PATH=VALUE overrides a simulation or diagnosis ran with (sweeps, sizings and searches keep theirs in
    their own model)."""
    healthy: bool | None = None
    """The diagnosis's verdict as `kvplan doctor --json` wrote it."""
    snapshot: Any = None
    """A kvplan.live.observe.Snapshot when kind == 'snapshot'."""
    compare: list[Any] = field(default_factory=list)
    """kvplan.report.compare_page.CompareRow's when kind == 'compare'."""


def _problem(path: Path, message: str, fix: str, where: str = "(file)", value: Any = None) -> SpecError:
    return SpecError([Problem(where, message, value=value, fix=fix)], source=str(path))


def _validated(path: Path, model, data: Any, where: str):
    """`model.model_validate(data)`, its errors reported with their JSON location."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors()[:5]:
            loc = ".".join([where, *(str(part) for part in error["loc"])]) if where else \
                ".".join(str(part) for part in error["loc"]) or "(file)"
            problems.append(Problem(loc, error["msg"],
                                    fix="the file does not match this kvplan's result format (written by another "
                                        "version?); run the simulation again with this kvplan to rewrite it"))
        if exc.error_count() > 5:
            problems.append(Problem("(file)", f"... and {exc.error_count() - 5} more problems like these"))
        raise SpecError(problems, source=str(path)) from None


def load(path: str | Path) -> ReportInput:
    """Read and recognise a result file (see the module docstring for the shapes)."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file() and not path.is_dir():
            raise _problem(path, "is not a regular file (a FIFO or device)", f"pass the JSON file itself; {WRITE_ONE}")
        text = path.read_text()
    except FileNotFoundError:
        raise _problem(path, "no such file", f"check the path; {WRITE_ONE}") from None
    except IsADirectoryError:
        raise _problem(path, "is a directory, not a result file", f"pass the JSON file itself; {WRITE_ONE}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _problem(path, f"cannot be read as text ({exc.__class__.__name__}: {exc})",
                       f"pass the JSON file kvplan wrote; {WRITE_ONE}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _problem(path, f"is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
                       f"pass the JSON file kvplan wrote (a truncated file means the run was interrupted); "
                       f"{WRITE_ONE}") from None
    except (ValueError, RecursionError) as exc:           # a number past Python's digit limit, nesting past its stack
        raise _problem(path, f"is not a JSON file kvplan reads: {str(exc)[:120]}", WRITE_ONE) from None
    from . import kinds

    kind, data = kinds.read(data, str(path))
    if kind is not None:
        return _of_kind(path, kind, data)
    if isinstance(data, list) and data and all(isinstance(row, dict) and {"metric", "predicted", "observed"} <= set(row)
                                               for row in data):
        return _of_kind(path, "CompareResult", {"rows": data})      # compare --json before kinds: a bare list
    if not isinstance(data, dict):
        raise _problem(path, f"holds a JSON {_JSON_KIND.get(type(data), 'value')}, not a kvplan result object",
                       WRITE_ONE)             # its kind, never its content: the path may name some other file
    for kind, keys in _KEYS_OF_KIND:
        if keys <= set(data) and (kind != "SimulateRuns" or isinstance(data["results"], list)):
            return _of_kind(path, kind, data)
    raise _problem(path, "is JSON but not a kvplan result: expected a document with a `kind` (kvplan schema --kinds "
                         "lists them) or, from a kvplan before kinds, a simulation result (keys spec_hash, "
                         "per_request), `{\"results\": [...]}` from --seeds/--ablate, a sweep (keys varied, points), "
                         "a capacity search (keys knob, probes), a plan (keys candidates, winner), a sizing "
                         "(\"kind\": \"size\"), a diagnosis (\"kind\": \"doctor\"), a live snapshot (keys taken_at, "
                         "components) or a comparison (a list of rows with metric, predicted, observed)", WRITE_ONE,
                   value=sorted(data)[:8])


_KEYS_OF_KIND = (("SimulateResult", {"per_request", "spec_hash"}), ("SimulateRuns", {"results"}),
                 ("ObserveSnapshot", {"taken_at", "components"}), ("SweepResult", {"points", "varied"}),
                 ("CapacityResult", {"probes", "knob"}), ("PlanResult", {"candidates", "winner"}),
                 ("ResolvedSpec", {"kv_bytes_per_token", "hbm_blocks"}), ("Catalog", {"llms", "devices"}))
"""How a file written before kinds existed is recognised: the keys only its kind has, tried in this order (sizings
and diagnoses carried `"kind": "size"` and `"kind": "doctor"`: kinds.LEGACY)."""


def _of_kind(path: Path, kind: str, data: dict) -> ReportInput:
    """A document recognised by its kind (its kind and schema_version already taken off)."""
    if kind == "SimulateResult":
        cost = _cost(path, data.pop("cost", None))
        given = _overrides(path, data.pop("overrides", None))   # the --set it ran with (kvplan simulate --set)
        return ReportInput(path, "result", results=[_validated(path, SimResult, data, "")], cost=cost, overrides=given)
    if kind == "SimulateRuns":
        if not isinstance(data.get("results"), list):
            raise _problem(path, "a SimulateRuns document holds `results`, a list of runs", WRITE_ONE, where="results")
        return _simulate_payload(path, data)
    if kind == "SizeResult":
        from ..sizing import SizeResult

        return ReportInput(path, "size", size=_validated(path, SizeResult, data, ""))
    if kind == "DoctorResult":
        from ..doctor.finding import Diagnosis

        healthy = data.pop("healthy", None)
        data.pop("written", None)                 # what --write wrote: paths, not part of the diagnosis
        given = _overrides(path, data.pop("overrides", None))   # the --set it diagnosed the spec with
        return ReportInput(path, "doctor", doctor=_validated(path, Diagnosis, data, ""),
                           healthy=healthy if isinstance(healthy, bool) else None, overrides=given)
    if kind == "ObserveSnapshot":
        from ..live.observe import Snapshot

        return ReportInput(path, "snapshot", snapshot=_validated(path, Snapshot, data, ""))
    if kind == "SweepResult":
        from ..sweep.result import SweepResult

        return ReportInput(path, "sweep", sweep=_validated(path, SweepResult, data, ""))
    if kind == "CapacityResult":
        from ..sweep.capacity import CapacityResult

        return ReportInput(path, "capacity", capacity=_validated(path, CapacityResult, data, ""))
    if kind == "PlanResult":
        from .plan_page import PlanFile

        return ReportInput(path, "plan", plan=_validated(path, PlanFile, data, ""))
    if kind == "CompareResult":
        from .compare_page import CompareRow

        rows = data.get("rows")
        if not isinstance(rows, list) or not rows:
            raise _problem(path, "a CompareResult document holds `rows`, a list of one row per metric", WRITE_ONE,
                           where="rows")
        return ReportInput(path, "compare", compare=[_validated(path, CompareRow, row, f"rows.{i}")
                                                     for i, row in enumerate(rows)])
    if kind == "ResolvedSpec":
        raise _problem(path, "is the resolved spec `kvplan validate --json` prints: a spec's numbers, not an answer "
                             "to show", "`kvplan validate SPEC` prints them as tables; for a page, simulate the spec: "
                                        "`kvplan simulate SPEC --out result.json`, then `kvplan report result.json`")
    if kind == "Catalog":
        raise _problem(path, "is the catalog `kvplan catalog --json` prints: reference data, not an answer to show",
                       f"`kvplan catalog` prints it as tables; {WRITE_ONE}")
    if kind == "BenchRun":
        raise _problem(path, "is a bench run `kvplan bench --format json` prints: measurements, with no prediction "
                             "beside them", "compare it with the simulation: `kvplan compare SPEC --observed RUN_DIR "
                                            "--json > compare.json`, then `kvplan report compare.json`")
    raise _problem(path, f"is a {kind} document, which `kvplan report` does not show",
                   f"{'a device profile is applied with --profile PROFILE.yaml; ' if kind == 'DeviceProfile' else ''}"
                   f"{WRITE_ONE}")


def _simulate_payload(path: Path, data: dict) -> ReportInput:
    extra = sorted(set(data) - {"results", "ablation", "cost", "overrides"})
    if extra:
        raise _problem(path, f"has keys kvplan simulate never writes: {', '.join(extra)}", WRITE_ONE)
    if not data["results"]:
        raise _problem(path, "holds no results (`results` is empty)", WRITE_ONE, where="results")
    results = [_validated(path, SimResult, r, f"results.{i}") for i, r in enumerate(data["results"])]
    ablation_data = data.get("ablation") or []
    if not isinstance(ablation_data, list):
        raise _problem(path, "`ablation` is not a list", WRITE_ONE, where="ablation")
    ablation = []
    for i, entry in enumerate(ablation_data):
        if not isinstance(entry, dict) or set(entry) not in ({"setup", "results"}, {"setup", "result"}) \
                or not isinstance(entry.get("results", []), list) or entry.get("results") == []:
            raise _problem(path, "each ablation entry is {\"setup\": NAME, \"results\": [{...}, ...]} (one result "
                                 "per seed)", WRITE_ONE, where=f"ablation.{i}")
        if "result" in entry:        # an earlier kvplan kept the first seed only
            runs = [_validated(path, SimResult, entry["result"], f"ablation.{i}.result")]
        else:
            runs = [_validated(path, SimResult, r, f"ablation.{i}.results.{j}") for j, r in enumerate(entry["results"])]
        ablation.append((str(entry["setup"]), runs))
    kind = "ablation" if ablation else "seeds" if len(results) > 1 else "result"
    return ReportInput(path, kind, results=results, ablation=ablation, cost=_cost(path, data.get("cost")),
                       overrides=_overrides(path, data.get("overrides")))


def _overrides(path: Path, data: Any) -> list[str]:
    """The --set overrides a result file keeps (key `overrides`: a list of PATH=VALUE), or none."""
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(o, str) for o in data):
        raise _problem(path, "`overrides` is not a list of PATH=VALUE strings", WRITE_ONE, where="overrides")
    return data


def _cost(path: Path, data: Any):
    """The bill `kvplan simulate --out` writes beside the results (key `cost`), if there is one."""
    if data is None:
        return None
    from ..cost import CostBreakdown

    return _validated(path, CostBreakdown, data, "cost")


_JSON_KIND = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


__all__ = ["ReportInput", "load"]
