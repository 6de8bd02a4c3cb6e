"""`kvplan render` and `kvplan deploy`: a spec made into the Ansible (or Helm values) that deploys it, and applied.

Exit codes besides cli.py's: 3 when a deploy failed (the failed tasks are printed, with the log).
"""

from __future__ import annotations

from typing import Optional

import typer

from .. import paths
from ..errors import SpecError
from .common import STATE_HELP, STDOUT, echo_change, overrides, set_option, spec_words
from . import files
from .console import err, fail as _fail, out, styled, warn
from .files import OVERWRITE_HELP


def _rendered(spec: str, inventory: str, out_dir: str | None, state_dir: str | None, given: tuple = (),
              predict: bool = True):
    """Load, resolve and render a spec for an inventory (errors name the field and the fix); without
    `out_dir`, into a fresh run directory under the state directory. `predict`: simulate the spec for the
    dashboard's prediction (not for --down, which deploys nothing)."""
    from pathlib import Path

    from ..deploy import inventory as inventory_mod
    from ..deploy.render import check_deployable, render
    from ..deploy.secrets import load_or_create
    from ..resolve import resolve
    from ..validation import load

    try:
        resolved = resolve(load(spec, given, echo_change))
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    try:
        inv = inventory_mod.load(inventory)
        check_deployable(resolved, inv)
        state = paths.state_dir(state_dir, warn=warn)
        target = Path(out_dir) if out_dir else _run_dir(state, resolved.name)
        predicted = _predicted(resolved) if predict else None
        # Keys are loaded or generated only once render has accepted the spec, inventory and target.
        return render(resolved, inv, target, lambda: load_or_create(state, resolved.name), predicted)
    except SpecError as exc:
        _fail(exc.with_source(spec))


PREDICTION_WALL_S = 60.0
"""Seconds of this machine's time the dashboard's prediction may take; a longer simulation is left out, said."""


def _predicted(resolved):
    """What the Grafana dashboard draws beside the live metrics: `kvplan simulate` of the deployed spec, at the
    workload's seed (None, said on stderr, when that takes over PREDICTION_WALL_S)."""
    from ..deploy.dashboard import Predicted
    from ..sim.run import Bounds, SimulationStopped, run

    try:
        result = run(resolved, seed=resolved.workload.seed, bounds=Bounds(max_wall=PREDICTION_WALL_S))
    except SimulationStopped:
        warn(f"the Grafana dashboard has no prediction: simulating the spec took over {PREDICTION_WALL_S:g} s here; "
             f"`kvplan simulate` gives the figures")
        return None
    share = {t.name: t.served_share for t in result.tiers}
    tokens = {t.name: t.served_tokens for t in result.tiers}
    per_s = 1.0 / result.duration if result.duration > 0 else 0.0
    return Predicted(seed=result.seed, ttft_p50=result.ttft.p50, ttft_p99=result.ttft.p99, tpot_p50=result.tpot.p50,
                     requests_per_s=result.requests_per_s, cache_share=sum(share.values()),
                     lmcache_share=sum(v for name, v in share.items() if name != "hbm"),
                     block_utilisation=result.mean_block_utilisation,
                     l1_tokens_per_s=tokens.get("ddr", 0) * per_s,
                     l2_tokens_per_s=(tokens.get("nvme", 0) + tokens.get("ceph", 0)) * per_s,
                     ceph_op_latency=result.ceph_op_latency.mean if result.ceph_op_latency is not None else None)


def render(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
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
               state_dir: Optional[str] = typer.Option(None, "--state-dir", help=STATE_HELP),
               diff: bool = typer.Option(False, "--diff", help="Replacing an earlier render in -o: also show each "
                                                               "changed file's lines, as unified diffs (files that may "
                                                               "hold secrets are named, never shown)."),
               overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP + " With --format "
                                                                                        "production-stack only: a "
                                                                                        "render directory is never "
                                                                                        "replaced unless kvplan made it."),
               sets: Optional[list[str]] = set_option()) -> None:
    """Write the Ansible that deploys the spec (inventory/, project/site.yml and roles, env/) without running it,
    or the Helm values that deploy its vLLM + LMCache with production-stack."""
    given = overrides(sets)
    if diff and fmt != "ansible":
        raise typer.BadParameter("--diff compares a render directory with the earlier render it replaces "
                                 "(--format ansible)", param_hint="--diff")
    if fmt == "production-stack":
        return _render_production_stack(spec, out_dir, request_cpu, request_memory, overwrite, given)
    if fmt != "ansible":
        raise typer.BadParameter(f"'{fmt}' is not a format; use ansible or production-stack", param_hint="--format")
    if overwrite:
        raise typer.BadParameter("--overwrite replaces a values file (--format production-stack); a render directory "
                                 "is replaced only when kvplan made it: choose a new directory with -o",
                                 param_hint="--overwrite")
    if inventory is None:
        raise typer.BadParameter("--format ansible renders for an inventory: give -i INVENTORY", param_hint="-i")
    rendered = _rendered(spec, inventory, out_dir, state_dir, given)
    s = rendered.stack
    out.print(styled(("rendered:", "bold green"),
                     f" {rendered.root}  ({rendered.resolved.name}, spec {rendered.resolved.spec_hash[:12]})"))
    if rendered.changes is not None:
        out.print(f"  {rendered.changes.summary()}")
    parts = [f"vllm: {sum(len(v) for v in s.instances.values())} instance(s) on {len(s.instances)} host(s)"]
    if s.lmcache:
        parts.append(f"lmcache: {s.lmcache.lmcache_mode} mode")
    if s.ceph:
        parts.append(f"ceph: {s.ceph.ceph_deploy}, pool {s.ceph.ceph_pool_name} size {s.ceph.ceph_pool_size}")
    if s.monitoring and s.monitoring.monitoring_dashboard:
        from ..deploy.render import DASHBOARD

        board = s.monitoring.monitoring_dashboard
        drawn = any("(predicted" in t["legendFormat"] for p in board["panels"] for t in p["targets"])
        parts.append(f"grafana: {DASHBOARD}, {len(board['panels'])} panels, live "
                     + ("beside kvplan simulate's prediction" if drawn else "only (no prediction)"))
    for part in parts:
        out.print(f"  {part}")
    out.print(f"  run it: kvplan deploy {spec_words(spec, given)} -i {inventory}")
    for line in rendered.changes.unified() if diff and rendered.changes is not None else []:
        out.print(line)


def _render_production_stack(spec: str, out_file: str, request_cpu: int | None, request_memory: str | None,
                             overwrite: bool, given: tuple = ()) -> None:
    from pathlib import Path

    import yaml

    from ..deploy.helm import api_key_secret, notes, values
    from ..deploy.llmd import endpoint_picker_config
    from ..resolve import resolve
    from ..validation import load

    missing = [flag for flag, v in (("--request-cpu", request_cpu), ("--request-memory", request_memory)) if v is None]
    if missing:
        raise typer.BadParameter(f"production-stack pods need {' and '.join(missing)} (the chart requires them)",
                                 param_hint=missing[0])
    try:
        r = resolve(load(spec, given, echo_change))
        said = notes(r)
        text = (f"# Helm values for vllm-project/production-stack, rendered by kvplan from {Path(spec).name} "
                f"(spec {r.spec_hash[:12]})\n" + "".join(f"# {line}\n" for line in said)
                + yaml.safe_dump(values(r, request_cpu, request_memory), sort_keys=False))
        picker = None
        if r.router == "llm_d":
            picker = (f"# llm-d's EndpointPickerConfig (the InferencePool chart's pluginsCustomConfig), rendered by kvplan "
                      f"from {Path(spec).name} (spec {r.spec_hash[:12]})\n"
                      + yaml.safe_dump(endpoint_picker_config(r), sort_keys=False))
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    if out_file == STDOUT:
        return typer.echo(text + (f"---\n{picker}" if picker else ""), nl=False)
    picker_file = Path(out_file).with_suffix(".endpoint-picker.yaml")
    for path in (out_file, str(picker_file)) if picker else (out_file,):   # both checked before either is written
        files.check(path, "-o/--out", overwrite)
    files.write(out_file, text, "-o/--out", overwrite)
    out.print(styled(("rendered:", "bold green"), f" {out_file}  ({r.name}, spec {r.spec_hash[:12]})"))
    for line in said:
        out.print(f"  note: {line}")
    secret = api_key_secret(r)
    if secret is not None:
        out.print(f"  the API key: kubectl create secret generic {secret['secretName']} "
                  f"--from-literal={secret['secretKey']}=\"${secret['secretKey']}\"")
    out.print(f"  run it: helm install {r.name} vllm/vllm-stack -f {out_file}")
    if picker:
        files.write(str(picker_file), picker, "-o/--out", overwrite)
        out.print(f"  llm-d's scheduler: {picker_file} (pluginsCustomConfig of llm-d's InferencePool chart, in front "
                  f"of the pods)")


EXIT_DEPLOY_FAILED = 3


def _run_dir(state_dir, name: str):
    """A fresh run directory under <state dir>/runs/ (never reused: ansible-runner state must not leak);
    runs/ itself is owner-only (mode 0700), as every run holds the inventory and the keys."""
    import os
    import time
    from pathlib import Path

    from ..deploy.secrets import private_dir

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


def _print_diffs(diffs: list, check: bool) -> None:
    """Each changed file's unified diff, in the order the deploy reached them."""
    verb = "would change" if check else "changed"
    if not diffs:
        out.print(f"diff: no file's content {verb}")
        return
    out.print(f"diff: {len(diffs)} file(s) {verb}")
    for d in diffs:
        out.print(f"{d.host}: {d.task}")
        for line in d.unified():
            style = "green" if line.startswith("+") and not line.startswith("+++") else \
                "red" if line.startswith("-") and not line.startswith("---") else ""
            out.print(styled((line, style)) if style else line)


def deploy(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
           inventory: str = typer.Option(..., "-i", "--inventory", help="Ansible inventory (YAML file or directory)."),
           check: bool = typer.Option(False, "--check", help="Change nothing: show what a deploy would change "
                                                             "(kvplan's Ceph diff plus Ansible's check mode)."),
           diff: bool = typer.Option(False, "--diff", help="Also show the content that changes (with --check: would "
                                                           "change), file by file and host by host, as unified diffs "
                                                           "from Ansible's diff mode; a secret file is named, its "
                                                           "content never shown."),
           tags: Optional[str] = typer.Option(None, "--tags", help="Only these components, comma-separated: "
                                                                    "ceph, lmcache, vllm (with the router and the "
                                                                    "warm-up), router, warmup, monitoring."),
           down: bool = typer.Option(False, "--down", help="Stop every component instead (Prometheus, the router, vLLM, LMCache, "
                                                            "then Ceph's daemons) by pid file and process group; "
                                                            "nothing is deleted, and a deploy starts them again."),
           state_dir: Optional[str] = typer.Option(None, "--state-dir", help=STATE_HELP),
           sets: Optional[list[str]] = set_option()) -> None:
    """Render the spec into a fresh run directory and apply it with Ansible (ansible-runner)."""
    import sys

    from ..deploy import cephdiff, runner

    wanted = [t.strip() for t in tags.split(",") if t.strip()] if tags else []
    components = ("ceph", "lmcache", "vllm", "router", "warmup", "monitoring")
    unknown = [t for t in wanted if t not in components]
    if unknown:
        raise typer.BadParameter(f"unknown component(s) {', '.join(unknown)}; use {', '.join(components)}",
                                 param_hint="--tags")
    if down and (check or diff):
        raise typer.BadParameter(f"--down and {'--check' if check else '--diff'} cannot be combined: --down stops the "
                                 "services and changes no file", param_hint="--down")
    rendered = _rendered(spec, inventory, None, state_dir, overrides(sets), predict=not down)
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
                results.append(runner.run(rendered.root, tags=others, check=True, diff=diff, on_event=progress,
                                          ident="check"))
        elif down:
            results.append(runner.run(rendered.root, "down.yml", tags=wanted, on_event=progress, ident="down"))
        else:
            results.append(runner.run(rendered.root, tags=wanted, diff=diff, on_event=progress, ident="apply"))
    except SpecError as exc:
        _fail(exc)
    finally:
        if status is not None:
            status.stop()
    for result in results:
        _print_run(result)
        if check and result.playbook == "site.yml" and result.changed_tasks:
            out.print("Ansible check mode: would change " + ", ".join(sorted({t for _, t in result.changed_tasks})))
        if diff and result.playbook == "site.yml":
            _print_diffs(result.diffs, check)
    failed = [r for r in results if not r.ok]
    for result in failed:
        for f in result.failures:
            kind = "unreachable" if f.unreachable else "failed"
            err.print(styled((f"{kind}:", "bold red"), f" {f.host}: {f.task}: {f.message}"))
        err.print(f"full log: {result.artifacts / 'stdout'}")
    if failed:
        raise typer.Exit(EXIT_DEPLOY_FAILED)
