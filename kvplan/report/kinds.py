"""The kinds of document kvplan prints or writes as data, and their schema versions (the one place they are defined).

Every result a command prints as JSON or YAML (`--json`, `--format json|yaml`, and the JSON `--out` writes) is one
document whose first two keys say what it is, as kubectl's objects do:

    {"kind": "SizeResult", "schema_version": 1, ...the result's own keys...}

`kind` names the document (one per command's answer, table `KINDS`), `schema_version` the version of its keys:
it starts at 1 and is raised when a key is renamed, removed or changes its meaning (a key added is no new version:
readers keep keys they do not know or reject them as the kind's schema says). `kvplan schema --kind KIND` prints
the JSON Schema of a kind (`schema`), with `kind` and `schema_version` as constants in it.

Readers (`kvplan report`, the overwrite check of cli/files.py, `doctor --result`) go through `read`: a document
with a kind is recognised by it, and one written by a newer kvplan (a higher schema_version) is refused naming
both versions; a file without a kind (written before kinds existed) is returned as it is, to be recognised by its
keys as before. The sizing and doctor results carried `"kind": "size"` and `"kind": "doctor"` before: `LEGACY`
maps them to their kinds.

Two kinds are printed, not written: `bench --format json|yaml` prints its run as a BenchRun and `calibrate
--format json|yaml` its profile as a DeviceProfile, while the files they write (a run's `run.json`, the profile's
YAML) stay as compare, calibrate and `--profile` read them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from ..errors import Problem, SpecError, did_you_mean


@dataclass(frozen=True)
class Kind:
    """One kind of document: its name, its schema version, the command that writes it, and its model."""

    name: str
    version: int
    written_by: str
    about: str
    model: Callable[[], type[BaseModel]]
    """The pydantic model of the document's own keys (imported when asked: the schema and the readers)."""
    omitted: tuple[str, ...] = ()
    """The model's keys a document leaves out (the catalog's folder on this machine)."""


def _resolved():
    from ..resolve import Resolved

    return Resolved


def _catalog():
    from ..catalog import Catalog

    return Catalog


def _simulate_result():
    from ..cost import CostBreakdown
    from ..sim.result import SimResult

    class SimulateResult(SimResult):
        """One simulation run (SimResult's keys) with the bill of the spec as written, when it is priced, and the
        --set overrides it ran with, when there were any."""

        cost: CostBreakdown | None = None
        overrides: list[str] | None = None

    return SimulateResult


def _simulate_runs():
    from ..cost import CostBreakdown
    from ..sim.result import SimResult

    class AblationSetup(BaseModel):
        model_config = ConfigDict(extra="forbid")
        setup: str
        results: list[SimResult]

    class SimulateRuns(BaseModel):
        """Every seed's run (`--seeds N`), and with `--ablate` every setup's runs, with the bill of the spec."""

        model_config = ConfigDict(extra="forbid")
        results: list[SimResult]
        ablation: list[AblationSetup] | None = None
        cost: CostBreakdown | None = None
        overrides: list[str] | None = None

    return SimulateRuns


def _sweep():
    from ..sweep.result import SweepResult

    return SweepResult


def _capacity():
    from ..sweep.capacity import CapacityResult

    return CapacityResult


def _size():
    from ..sizing import SizeResult

    return SizeResult


def _plan():
    from .plan_page import PlanFile

    return PlanFile


def _doctor():
    from ..doctor.finding import Diagnosis

    from pydantic import create_model

    # the diagnosis's keys, its verdict (`healthy`: no finding is a problem; a property of Diagnosis, a key here)
    # and what --write wrote, if it wrote
    fields = {name: (info.annotation, info) for name, info in Diagnosis.model_fields.items()}
    return create_model("DoctorResult", __config__=Diagnosis.model_config, healthy=(bool, ...),
                        written=(dict[str, Any] | None, None), overrides=(list[str] | None, None), **fields)


def _snapshot():
    from ..live.observe import Snapshot

    return Snapshot


def _bench():
    from ..live.observed import BenchRun

    return BenchRun


def _profile():
    from ..spec.profile import Profile

    return Profile


def _compare():
    from .compare_page import CompareRow

    class CompareResult(BaseModel):
        """Predicted against observed, one row per metric (error: relative, or percentage points for shares)."""

        model_config = ConfigDict(extra="forbid")
        rows: list[CompareRow]

    return CompareResult


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("ResolvedSpec", 1, "kvplan validate", "a spec's resolved numbers", _resolved),
    Kind("SimulateResult", 1, "kvplan simulate (one seed)", "one simulation run and its cost", _simulate_result),
    Kind("SimulateRuns", 1, "kvplan simulate --seeds N / --ablate", "several seeds' runs, an ablation",
         _simulate_runs),
    Kind("SweepResult", 1, "kvplan sweep", "every point of a sweep", _sweep),
    Kind("CapacityResult", 1, "kvplan capacity", "the capacity search and its probes", _capacity),
    Kind("SizeResult", 1, "kvplan size", "hit ratio against capacity per tier", _size),
    Kind("PlanResult", 1, "kvplan plan", "the planner's candidates and winner", _plan),
    Kind("DoctorResult", 1, "kvplan doctor", "findings, evidence and proven fixes", _doctor),
    Kind("ObserveSnapshot", 1, "kvplan observe", "the live stack's counters at one moment", _snapshot),
    Kind("BenchRun", 1, "kvplan bench", "a bench run's settings and what the stack observed (its run.json's keys)",
         _bench),
    Kind("CompareResult", 1, "kvplan compare", "predicted against observed", _compare),
    Kind("DeviceProfile", 1, "kvplan calibrate", "the fitted step-time coefficients (the -o profile's keys)",
         _profile),
    Kind("Catalog", 1, "kvplan catalog", "models, devices, tier classes and prices", _catalog, omitted=("root",)),
)}
"""Every kind, in the order of the commands that write them; each one's schema_version is here and only here."""

LEGACY = {"size": "SizeResult", "doctor": "DoctorResult"}
"""The `kind` values that sizing and doctor results carried before kinds had versions."""

ENVELOPE = ("kind", "schema_version")
FORMATS = ("json", "yaml")


def document(kind: str, payload: Any) -> dict:
    """`payload` (a dict or a pydantic model, as JSON data) with `kind` and `schema_version` as its first keys."""
    from pydantic_core import to_jsonable_python

    data = to_jsonable_python(payload, inf_nan_mode="null")     # as pydantic writes JSON: inf and nan are null
    if not isinstance(data, dict):
        raise TypeError(f"a {kind} document is a JSON object, not {type(data).__name__}")
    head = {"kind": kind, "schema_version": KINDS[kind].version}
    left_out = (*ENVELOPE, *KINDS[kind].omitted)
    return {**head, **{key: value for key, value in data.items() if key not in left_out}}


def dump(kind: str, payload: Any, fmt: str = "json") -> str:
    """The document of `payload` as JSON (indented by one, as kvplan has always written it) or YAML (the same
    document: safe_dump, keys in the same order), ending in a newline."""
    data = document(kind, payload)
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000)
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def lookup(name: str) -> Kind:
    """The kind called `name` (case as written in KINDS; a wrong case or a near miss is offered as a fix)."""
    if name in KINDS:
        return KINDS[name]
    guess = did_you_mean(name, KINDS)
    if guess is not None and guess.lower() == name.lower():     # kinds are read in any case, as kubectl reads them
        return KINDS[guess]
    raise SpecError([Problem("--kind", "is not a kind of document kvplan writes", value=name,
                             allowed=", ".join(KINDS),
                             fix=f"did you mean {guess}?" if guess else "name one of the kinds allowed")])


def schema(name: str) -> dict:
    """The JSON Schema of a kind's documents: its model's keys (as kvplan reads them back: a key with a default
    may be left out) with `kind` and `schema_version` as required constants."""
    kind = lookup(name)
    body = kind.model().model_json_schema()
    if "$ref" in body:          # a model that holds itself (Resolved's pools): its keys are a definition; lift them
        defs = body["$defs"]
        body = {**defs[body["$ref"].rsplit("/", 1)[-1]], "$defs": defs}
    left_out = (*ENVELOPE, *kind.omitted)
    properties = {key: value for key, value in body.get("properties", {}).items() if key not in left_out}
    required = [key for key in body.get("required", []) if key not in left_out]
    head = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"kvplan:{kind.name}/v{kind.version}",
            "title": kind.name, "description": f"{kind.about}, as `{kind.written_by}` writes it "
                                               f"(schema_version {kind.version})"}
    rest = {key: value for key, value in body.items() if key not in ("properties", "required", "title", "description")}
    return {**head, **rest,
            "properties": {"kind": {"const": kind.name}, "schema_version": {"const": kind.version}, **properties},
            "required": ["kind", "schema_version", *required]}


def read(data: Any, source: str) -> tuple[str | None, Any]:
    """(kind, the document's own keys) of parsed JSON; (None, data) for a file without a kind, to be recognised
    by its keys. A kind kvplan does not know, or a schema_version newer than this kvplan's, is a SpecError."""
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        return None, data
    name = data["kind"]
    version = data.get("schema_version")
    if name in LEGACY and version is None:
        return LEGACY[name], {key: value for key, value in data.items() if key != "kind"}
    if name not in KINDS:
        guess = did_you_mean(name, KINDS)
        raise SpecError([Problem("kind", "is not a kind of document kvplan writes", value=name,
                                 allowed=", ".join(KINDS),
                                 fix=(f"did you mean {guess}? " if guess else "")
                                 + "pass a file kvplan wrote (`kvplan schema --kind` lists the kinds)")],
                        source=source)
    kind = KINDS[name]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SpecError([Problem("schema_version", "is missing or not a positive whole number", value=version,
                                 allowed=f"{kind.version}",
                                 fix="pass the file as kvplan wrote it, or write it again with this kvplan")],
                        source=source)
    if version > kind.version:
        raise SpecError([Problem("schema_version", f"this {name} was written by a newer kvplan (schema_version "
                                                   f"{version}); this kvplan reads schema_version {kind.version}",
                                 value=version, fix="read it with that kvplan (or a newer one), or write it again "
                                                    "with this kvplan")], source=source)
    return name, {key: value for key, value in data.items() if key not in ENVELOPE}


__all__ = ["FORMATS", "KINDS", "Kind", "LEGACY", "document", "dump", "lookup", "read", "schema"]
