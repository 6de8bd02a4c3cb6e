"""Generated reference docs: the spec (from the Pydantic models) and the catalog (from models/).

`python -m kvplan.reference docs/` rewrites docs/spec-reference.md and docs/catalog.md; a test
fails when the checked-in files differ from what this module generates, so they never go stale.
"""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .accelerator_fit import kv_bytes_per_token
from .catalog import Catalog, load_catalog
from .spec import Topology
from .spec.base import field_doc
from .spec.deployment import LEDGER
from .spec.rules import REAL_POLICIES, TTL_TIERS
from .units import UNIT_KINDS, fmt_bandwidth, fmt_bytes, fmt_count, fmt_duration



def _type_name(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        for meta in tp.__metadata__:
            func = getattr(meta, "func", None)
            if func in UNIT_KINDS:
                return UNIT_KINDS[func]
        return _type_name(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(parts)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return "mapping"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return getattr(tp, "__name__", str(tp))


def _default(field) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "**required**"
    value = field.default_factory() if field.default_factory else field.default
    if isinstance(value, BaseModel):
        return "(defaults)"
    return f"`{value!r}`" if value not in (None, [], {}) else "-"


def _models_in(tp, found: dict) -> None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp.__name__ not in found:
            found[tp.__name__] = tp
            for field in tp.model_fields.values():
                _models_in(field.annotation, found)
        return
    for arg in typing.get_args(tp):
        _models_in(arg, found)


def spec_reference() -> str:
    models: dict[str, type[BaseModel]] = {}
    _models_in(Topology, models)
    lines = ["# Spec reference", "",
             "Generated from the Pydantic models by `python -m kvplan.reference docs/`; a test fails when it is stale.",
             "Units: a **size** is bytes, like `64GiB` or `1.5TB` (a bare integer is bytes), a **duration** like `50ms` or",
             "`24h` (a bare number is seconds), a **rate** counts requests, like `40/s` or `5rps`, a **bandwidth** is like",
             "`25GB/s`, `200Gbps` or `100Gbit`. Units are case-sensitive; [units.md](units.md) lists every accepted form.",
             "Unknown keys are errors. `kvplan schema` prints the same as JSON Schema. Any key below can be changed for one",
             "run without editing the file: `--set serving.max_num_seqs=128` on the command line, by its dotted path",
             "([commands.md](commands.md), conventions).", ""]
    for name, model in models.items():
        lines += [f"## {name}", ""]
        if model.__doc__ and model is not Topology and not model.__doc__.startswith(("A base class", "Usage docs")):
            lines += [" ".join(model.__doc__.split()), ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for key, field in model.model_fields.items():
            desc = " ".join((field_doc(model, key) or "").split())
            lines.append(f"| `{key}` | {_type_name(field.annotation)} | {_default(field)} | {desc} |")
        lines.append("")
    lines += ["## Eviction policies by LMCache mode", "",
              "What the real stack offers (reference: LMCache 0.5.6). Anything else needs `simulate_only: true`.", "",
              "| mode | ddr | nvme | ceph |", "|---|---|---|---|"]
    for mode, tiers in REAL_POLICIES.items():
        lines.append(f"| `{mode}` | " + " | ".join(", ".join(tiers[t]) for t in ("ddr", "nvme", "ceph")) + " |")
    lines += ["", f"A `ttl` is real only on: {', '.join(TTL_TIERS)} (an RGW lifecycle rule).", ""]
    lines += ["## What the deployment does with each field", "",
              "From `kvplan/spec/deployment.py`, which tests/test_deploy_fields.py holds to the schema: *deployed* fields "
              "are rendered into the stack (the test finds each one there), *simulation-only* ones make `validate` ask "
              "for `simulate_only: true` and `render` refuse the spec, and the rest the deployment needs neither way.", "",
              "| field | class | where it goes, or why not |", "|---|---|---|"]
    lines += [f"| `{path}` | {kind} | {why} |" for path, (kind, why) in LEDGER.items()]
    lines.append("")
    return "\n".join(lines)


def _cite(entry) -> str:
    return "; ".join(f"[{s.covers or 'source'}]({s.url}) ({s.date})" if s.url.startswith("http")
                     else f"{s.covers or 'source'}: {s.url} ({s.date})" for s in entry.sources)


def catalog_reference(cat: Catalog) -> str:
    lines = ["# Catalog reference", "",
             "Generated from `models/` by `python -m kvplan.reference docs/`; a test fails when it is stale.",
             "Every number cites a public source and its date. `kvplan catalog` prints the same tables.", "",
             "## Models", "", "| name | attention | layers | heads / KV heads | head dim | params | context | KV bytes/token (bf16) | sources |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m in sorted(cat.llms.values(), key=lambda m: m.name):
        lines.append(f"| {m.name} | {m.attention} | {m.num_layers} | {m.num_attention_heads} / {m.num_kv_heads} | {m.head_dim} | "
                     f"{m.params / 1e9:.2f} B | {fmt_count(m.max_context)} | {fmt_count(kv_bytes_per_token(m, 2))} | {_cite(m)} |")
    lines += ["", "## Accelerators", "", "| name | kind | memory | bandwidth | bf16 TFLOP/s | fp8 TFLOP/s | fp32 TFLOP/s | PCIe | NVLink | sources |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for d in cat.devices.values():
        lines.append(f"| {d.name} | {d.kind} | {fmt_bytes(d.memory)} | {fmt_bandwidth(d.memory_bandwidth)} | {d.bf16_tflops:g} | "
                     f"{d.fp8_tflops or '-'} | {f'{d.fp32_tflops:g}' if d.fp32_tflops else '-'} | {fmt_bandwidth(d.pcie) if d.pcie else '-'} | "
                     f"{fmt_bandwidth(d.nvlink) if d.nvlink else '-'} | {_cite(d)} |")
    untimed = [d.name for d in cat.devices.values() if d.efficiency is None]
    if untimed:
        lines += ["", f"Without step-time coefficients (no `efficiency:` block): {', '.join(untimed)}. A spec on one of them "
                  "sets `serving.step_model` (or a calibrated `serving.step_profile`); `kvplan plan` tries them only when "
                  "`--gpu` names them. The coefficients of the others are in [step-time.md](step-time.md), fitted or "
                  "assumed as each entry's note says."]
    lines += ["", "## Host memory", "", "| name | per channel | channels/socket | sources |", "|---|---|---|---|"]
    for h in cat.host_memory.values():
        lines.append(f"| {h.name} | {fmt_bandwidth(h.bandwidth_per_channel)} | {h.channels_per_socket} | {_cite(h)} |")
    lines += ["", "## NVMe classes", "", "| name | example | read | write | read IOPS | write IOPS | read latency | write latency | sources |",
              "|---|---|---|---|---|---|---|---|---|"]
    for n in cat.nvme.values():
        lines.append(f"| {n.name} | {n.example_device} | {fmt_bandwidth(n.read_bandwidth)} | {fmt_bandwidth(n.write_bandwidth)} | "
                     f"{fmt_count(n.read_iops)} | {fmt_count(n.write_iops)} | {fmt_duration(n.read_latency)} | "
                     f"{fmt_duration(n.write_latency)} | {_cite(n)} |")
    lines += ["", "## NICs", "", "| name | bandwidth | latency | sources |", "|---|---|---|---|"]
    for n in cat.nics.values():
        lines.append(f"| {n.name} | {fmt_bandwidth(n.bandwidth)} | {fmt_duration(n.latency)} | {_cite(n)} |")
    lines += ["", "## Ceph OSD device classes", "",
              "| name | read/OSD | write/OSD | read IOPS | write IOPS | read latency | write latency | sources |",
              "|---|---|---|---|---|---|---|---|"]
    for c in cat.ceph_device_classes.values():
        lines.append(f"| {c.name} | {fmt_bandwidth(c.osd_read_bandwidth)} | {fmt_bandwidth(c.osd_write_bandwidth)} | "
                     f"{fmt_count(c.osd_read_iops)} | {fmt_count(c.osd_write_iops)} | {fmt_duration(c.read_latency)} | "
                     f"{fmt_duration(c.write_latency)} | {_cite(c)} |")
    lines += ["", "## Prices (USD)", "", "| list | name | price | sources |", "|---|---|---|---|"]
    for list_name in type(cat.prices).model_fields:
        for p in getattr(cat.prices, list_name):
            lines.append(f"| {list_name} | {p.name} | {p.usd:g} | {_cite(p)} |")
    lines.append("")
    return "\n".join(lines)


def schema_json() -> str:
    """The spec's JSON Schema, as `kvplan schema` prints it and docs/topology.schema.json holds it. Beyond what
    pydantic derives from the models, it says what their validators accept too, so a standard validator (and an
    editor) agrees with kvplan: a distribution may be a bare number (a fixed value), and a model or accelerator name
    is one the catalog has (listed, so editors complete them; spelled as the catalog does)."""
    schema = Topology.model_json_schema()
    defs = schema["$defs"]
    dist = defs["Dist"]
    defs["Dist"] = {"title": dist.get("title", "Dist"), "description": dist.get("description", ""),
                    "anyOf": [{"type": "number", "exclusiveMinimum": 0, "description": "a fixed value"},
                              {k: v for k, v in dist.items() if k not in ("title", "description")}]}
    cat = load_catalog()
    names = sorted({m.name for m in cat.llms.values()} | {a for m in cat.llms.values() for a in m.aliases})
    for branch in schema["properties"]["model"]["oneOf"]:
        if branch.get("type") == "string":
            branch["enum"] = names
    defs["Serving"]["properties"]["gpu"]["enum"] = sorted(cat.devices)
    for branch in defs["InstancePool"]["properties"]["gpu"]["anyOf"]:    # a disaggregated pool's own accelerator
        if branch.get("type") == "string":
            branch["enum"] = sorted(cat.devices)
    return json.dumps(schema, indent=2) + "\n"


def write(folder: Path) -> None:
    (folder / "spec-reference.md").write_text(spec_reference())
    (folder / "topology.schema.json").write_text(schema_json())
    (folder / "catalog.md").write_text(catalog_reference(load_catalog()))


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs"))
