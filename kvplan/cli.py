"""The `kvplan` command: thin Typer wrappers that parse, call the library and print with rich.

Exit codes: 0 success; 1 invalid input (a spec or catalog problem, printed with its field and
fix); 2 usage error (unknown command or option, missing argument).
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import Console

from . import __version__
from .errors import SpecError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Plan, simulate and deploy tiered KV-cache LLM serving (vLLM + LMCache + Ceph).")
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_INVALID = 1


def _fail(exc: SpecError) -> None:
    err.print(f"[bold red]invalid:[/] {exc.render()}", markup=True)
    raise typer.Exit(EXIT_INVALID)


def _version(value: bool) -> None:
    if value:
        out.print(f"kvplan {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Optional[bool] = typer.Option(None, "--version", callback=_version, is_eager=True,
                                                 help="Print the version and exit.")) -> None:
    """kvplan: one declarative spec for simulating and deploying vLLM + LMCache + Ceph."""


@app.command()
def validate(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
             as_json: bool = typer.Option(False, "--json", help="Print the resolved numbers as JSON.")) -> None:
    """Check a spec against the rules of the real stack and the catalog, and print its resolved numbers."""
    from .resolve import resolve
    from .spec import load
    from .summary import summary_tables

    try:
        resolved = resolve(load(spec))
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    if as_json:
        out.print_json(resolved.model_dump_json())
        return
    out.print(f"[bold green]valid:[/] {spec}  ({resolved.name}, spec {resolved.spec_hash[:12]})", markup=True)
    for table in summary_tables(resolved):
        out.print(table)


@app.command()
def simulate(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
             seed: Optional[int] = typer.Option(None, "--seed", help="Seed for every random choice (default: workload.seed)."),
             seeds: int = typer.Option(1, "--seeds", min=1, max=1000,
                                       help="Run N seeds (seed, seed+1, ...) and report mean and 95 % confidence intervals."),
             ablate: bool = typer.Option(False, "--ablate", help="Also run the workload without reuse, HBM only, + ddr, "
                                                                  "+ nvme and + ceph, and compare them."),
             out_file: Optional[str] = typer.Option(None, "--out", help="Write the full result(s) as JSON to this file."),
             fmt: str = typer.Option("table", "--format", help="table (terminal) or md (Markdown).")) -> None:
    """Simulate the spec: where each prompt's KV came from, and what users feel (TTFT, TPOT, throughput)."""
    from .report import markdown, sections, terminal
    from .resolve import resolve
    from .sim.ablation import ablate as run_ablation
    from .sim.run import run
    from .spec import load

    if fmt not in ("table", "md"):
        raise typer.BadParameter(f"'{fmt}' is not a format; use table or md", param_hint="--format")
    try:
        topo = load(spec)
        resolved = resolve(topo)
        first = resolved.workload.seed if seed is None else seed
        with _progress() as progress:
            results = [run(resolved, seed=first + i, progress=progress) for i in range(seeds)]
            ablation = run_ablation(topo, seed=first, progress=progress) if ablate else None
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    report = sections.result_sections(results[0]) if seeds == 1 else [sections.seeds_section(results)]
    if ablation:
        report.append(sections.ablation_section(ablation))
    if out_file:
        import json
        from pathlib import Path

        payload = {"results": [r.model_dump(mode="json") for r in results]}
        if ablation:
            payload["ablation"] = [{"setup": name, "result": r.model_dump(mode="json")} for name, r in ablation]
        data = results[0].model_dump_json(indent=1) if seeds == 1 and not ablation else json.dumps(payload, indent=1)
        Path(out_file).write_text(data + "\n")
    if fmt == "md":
        typer.echo(markdown.markdown(report), nl=False)
    else:
        for table in terminal.tables(report):
            out.print(table)
    if out_file:
        err.print(f"result written to {out_file}")


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


def _rendered(spec: str, inventory: str, out_dir, state_dir: str):
    """Load, resolve and render a spec for an inventory (errors name the field and the fix)."""
    from pathlib import Path

    from .deploy import inventory as inventory_mod
    from .deploy.render import render
    from .deploy.secrets import load_or_create
    from .resolve import resolve
    from .spec import load

    try:
        resolved = resolve(load(spec))
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    try:
        inv = inventory_mod.load(inventory)
        return render(resolved, inv, Path(out_dir), load_or_create(Path(state_dir), resolved.name))
    except SpecError as exc:
        _fail(exc.with_source(spec))


@app.command("render")
def render_cmd(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
               inventory: str = typer.Option(..., "-i", "--inventory", help="Ansible inventory (YAML file or directory)."),
               out_dir: str = typer.Option(..., "-o", "--out", help="Directory for the ansible-runner private_data_dir."),
               state_dir: str = typer.Option(".kvplan", "--state-dir", help="Where kvplan keeps the RGW keys it generated.")) -> None:
    """Write the Ansible that deploys the spec (inventory/, project/site.yml and roles, env/) without running it."""
    rendered = _rendered(spec, inventory, out_dir, state_dir)
    s = rendered.stack
    out.print(f"[bold green]rendered:[/] {rendered.root}  ({rendered.resolved.name}, spec {rendered.resolved.spec_hash[:12]})",
              markup=True)
    parts = [f"vllm: {sum(len(v) for v in s.instances.values())} instance(s) on {len(s.instances)} host(s)"]
    if s.lmcache:
        parts.append(f"lmcache: {s.lmcache.lmcache_mode} mode")
    if s.ceph:
        parts.append(f"ceph: {s.ceph.ceph_deploy}, pool {s.ceph.ceph_pool_name} size {s.ceph.ceph_pool_size}")
    for part in parts:
        out.print(f"  {part}")
    out.print(f"  run it: kvplan deploy {spec} -i {inventory}")


EXIT_DEPLOY_FAILED = 3


def _run_dir(state_dir: str, name: str):
    """A fresh run directory under <state dir>/runs/ (never reused: ansible-runner state must not leak)."""
    import time
    from pathlib import Path

    base = Path(state_dir) / "runs"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        path = base / (f"{stamp}-{name}" + (f"-{n}" if n else ""))
        if not path.exists():
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
                                                                    "ceph, lmcache, vllm, monitoring."),
           state_dir: str = typer.Option(".kvplan", "--state-dir", help="Where runs and generated keys are kept.")) -> None:
    """Render the spec into a fresh run directory and apply it with Ansible (ansible-runner)."""
    import sys

    from .deploy import cephdiff, runner

    wanted = [t.strip() for t in tags.split(",") if t.strip()] if tags else []
    unknown = [t for t in wanted if t not in ("ceph", "lmcache", "vllm", "monitoring")]
    if unknown:
        raise typer.BadParameter(f"unknown component(s) {', '.join(unknown)}; use ceph, lmcache, vllm, monitoring",
                                 param_hint="--tags")
    from .resolve import resolve
    from .spec import load

    try:
        name = resolve(load(spec)).name
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    rendered = _rendered(spec, inventory, _run_dir(state_dir, name), state_dir)
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
            err.print(f"[bold red]{kind}:[/] {f.host}: {f.task}: {f.message}", markup=True)
        err.print(f"full log: {result.artifacts / 'stdout'}")
    if failed:
        raise typer.Exit(EXIT_DEPLOY_FAILED)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the spec (point your editor's YAML support at it)."""
    from .reference import schema_json

    typer.echo(schema_json(), nl=False)


@app.command()
def catalog() -> None:
    """List the catalog: models, accelerators, NVMe and NIC classes, Ceph device classes."""
    from .catalog import load_catalog
    from .summary import catalog_tables

    try:
        cat = load_catalog()
    except SpecError as exc:
        _fail(exc)
    for table in catalog_tables(cat):
        out.print(table)


def main() -> None:
    app()


__all__ = ["app", "main"]
