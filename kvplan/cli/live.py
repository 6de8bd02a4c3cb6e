"""The live-stack commands: `kvplan bench`, `observe`, `compare`, `calibrate` (registered on cli.app).

Exit codes besides cli.py's: 5 when the live stack misbehaved (a bench request failed, a
component is down).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .. import paths
from ..errors import Problem, SpecError
from ..units import fmt_duration
from . import files
from .common import data_format, echo_change, emit_document, format_option, overrides, set_option
from .console import err, fail as _fail, out, styled, warn
from .files import OVERWRITE_HELP

EXIT_LIVE = 5


def _spec(spec: str, profile: str | None = None, given: tuple = ()):
    """(topology, resolved, resolved with the profile applied) of a spec file with the --set overrides `given`;
    exits on bad input."""
    from ..resolve import resolve
    from ..validation import load

    try:
        topo = load(spec, given, echo_change)
        base = resolve(topo)
        if profile is None:
            return topo, base, base
        from ..spec.profile import apply_profile, read_profile

        return topo, base, resolve(apply_profile(topo, read_profile(profile)))
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))


API_KEY_HELP = ("The key vLLM was started with (--api-key), sent as a bearer token; default: $OPENAI_API_KEY. "
                "It is never printed or saved.")


LIVE_TIMEOUT_HELP = ("Seconds each request to a live component may take in all, from connect to the last byte, "
                     "however slowly a server sends; reading the whole stack ends within 3 x this.")


def _targets(urls: list[str], api_key: str | None = None):
    from ..live.bench import Target

    try:
        return [Target.parse(u, api_key) for u in urls]
    except SpecError as exc:
        _fail(exc)


def _components(components) -> None:
    for c in components:
        state = ("up", "green") if c.up else ("down", "bold red")
        out.print(styled(f"  {c.name}: ", state, "" if c.up else f" ({c.detail})"))


def bench(spec: str = typer.Argument(..., help="Topology spec (YAML) whose workload is replayed."),
          target: List[str] = typer.Option(..., "--target", help="vLLM's OpenAI endpoint, e.g. http://127.0.0.1:8000 "
                                                                 "(repeat for several instances: round robin)."),
          router: Optional[str] = typer.Option(None, "--router", help="Send the requests through the deployed router "
                                                                      "(e.g. http://127.0.0.1:30000); --target still "
                                                                      "names every instance, whose counters are read."),
          out_dir: Optional[str] = typer.Option(None, "--out", help="Run directory (default: STATE_DIR/bench/<time>-<name>)."),
          overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
          state_dir: Optional[str] = typer.Option(None, "--state-dir", help="Where bench runs are kept, under bench/ "
                                                                             "(default: KVPLAN_STATE_DIR, else "
                                                                             "$XDG_STATE_HOME/kvplan, "
                                                                             "~/.local/state/kvplan)."),
          seed: Optional[int] = typer.Option(None, "--seed", help="Workload seed (default: workload.seed)."),
          salt: Optional[int] = typer.Option(None, "--salt", help="Token salt (default: a fresh one, so caches start cold "
                                                                  "for this run; reuse one to replay the same tokens)."),
          timeout: float = typer.Option(120.0, "--timeout", min=1.0, help="Seconds a request may go without data: "
                                        "each line of its stream must come whole within it, and the whole request "
                                        "within (output tokens + 2) x this; checking a target and each read of its "
                                        "counters end within it (at most 10 s) in all, however slowly a server sends."),
          api_key: Optional[str] = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", show_envvar=False,
                                                help=API_KEY_HELP),
          fmt: str = format_option("table"), sets: Optional[list[str]] = set_option()) -> None:
    """Replay the spec's workload against a live vLLM: TTFT, TPOT and E2E per request, and what the stack observed."""
    from ..live.bench import BenchError, new_salt
    from ..live.runner import bench as run_bench, default_run_dir
    from ..spec.load import read_text

    given = overrides(sets)
    data = data_format(fmt, False)
    if out_dir:
        _check_run_dir(Path(out_dir), overwrite)
    topo, resolved, _ = _spec(spec, given=given)
    targets = _targets(target, api_key)
    via = _targets([router], api_key)[0] if router else None
    directory = Path(out_dir) if out_dir else default_run_dir(resolved, paths.state_dir(state_dir, warn=warn))
    last = [0]

    def progress(done: int, failed: int, in_flight: int, total: int) -> None:
        if err.is_terminal or done == total or done - last[0] >= max(total // 10, 1):
            last[0] = done
            err.print(f"bench: {done}/{total} done, {failed} failed, {in_flight} in flight")

    try:
        run = run_bench(resolved, _benched_text(spec, given, read_text), targets, directory, salt=new_salt() if salt is None else salt,
                        seed=seed, timeout=timeout, progress=progress, router=via)
    except BenchError as exc:
        err.print(styled(("bench failed:", "bold red"), " ", exc.render()))
        raise typer.Exit(EXIT_LIVE)
    if data:
        emit_document("BenchRun", run, None, data, "run", False)
        err.print(f"run written to {directory}")
    else:
        _print_observed(run)
        out.print(f"run written to {directory}")
    if run.observed.failed or run.observed.components_down:
        raise typer.Exit(EXIT_LIVE)


def _benched_text(spec: str, given: tuple, read_text) -> str:
    """The spec text the run directory keeps as spec.yaml: the file as written, or, with --set, the spec as benched
    (the file's mapping with the overrides applied, under a header naming them), so `compare` and `calibrate` of the
    run read the spec it ran."""
    if not given:
        return read_text(spec)
    import yaml

    from ..validation import read

    data, _, _ = read(spec, given)
    header = f"# written by kvplan bench: {spec} with --set {' --set '.join(map(str, given))}".replace("\n", " ")
    return header + "\n" + yaml.safe_dump(data, sort_keys=False, width=1000)


def _check_run_dir(directory: Path, overwrite: bool) -> None:
    """bench --out DIR writes DIR/spec.yaml and DIR/run.json: they replace an earlier bench run's (its run.json
    reads as one) and an empty file; any other file there only with --overwrite (cli/files.py), before the run."""
    from ..live.observed import read_run

    if directory.exists() and not directory.is_dir():
        raise typer.BadParameter(f"{directory} exists and is not a folder; bench writes a run directory: choose "
                                 "another path", param_hint="--out")
    try:
        read_run(directory / "run.json")
        earlier = True
    except SpecError:
        earlier = False
    for name in ("spec.yaml", "run.json"):
        files.check(str(directory / name), "--out", overwrite or earlier)


def _print_observed(run) -> None:
    from rich.table import Table

    o = run.observed
    out.print(f"{run.name}: {o.ok}/{o.requests} requests succeeded in {o.duration:.1f} s"
              + (f", {o.waited} chat turns waited for the previous reply" if o.waited else ""))
    table = Table(title="observed", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for label, value in (("TTFT p50 / p90", f"{fmt_duration(o.ttft.p50)} / {fmt_duration(o.ttft.p90)}"),
                         ("TPOT p50", fmt_duration(o.tpot.p50)), ("E2E p50", fmt_duration(o.e2e.p50)),
                         ("throughput", f"{o.requests_per_s:.2f} req/s, {o.generated_tokens_per_s:.0f} tok/s"),
                         ("prompt tokens", f"{o.prompt_tokens:,}")):
        table.add_row(label, value)
    for tier, tokens in o.served_tokens.items():
        table.add_row(f"  from {tier}", f"{tokens:,} ({o.served_share(tier):.1%})")
    if o.ceph_bytes_written is not None:
        table.add_row("bytes written to Ceph", f"{o.ceph_bytes_written:,}")
        table.add_row("Ceph pool objects / RGW objects", f"{o.ceph_objects} / {o.rgw_objects}")
    if o.l2_store_failed_chunks:
        table.add_row("LMCache L2 stores failed (chunks)", f"{o.l2_store_failed_chunks:,}")
    out.print(table)
    if o.tier_split != "exact":
        out.print(f"LMCache's tokens split over its tiers: {o.tier_split} (see docs/fidelity.md)")
    for message, n in o.errors.items():
        out.print(styled(("failed:", "bold red"), f" {n} x {message}"))
    if o.components_down:
        out.print(styled(("components down during the run:", "bold red")))
        _components(o.components_down)


def observe(spec: str = typer.Argument(..., help="Topology spec (YAML) of the live stack."),
            target: List[str] = typer.Option(..., "--target", help="vLLM's endpoint(s), e.g. http://127.0.0.1:8000."),
            lmcache_url: Optional[List[str]] = typer.Option(None, "--lmcache-url", help="LMCache's HTTP API, once per server "
                                                            "(default: port lmcache.port + 1 on the spec's monitoring.metrics_address, "
                                                            "or with 0.0.0.0 on each target's host)."),
            no_ceph: bool = typer.Option(False, "--no-ceph", help="Do not read Ceph (this host is not a Ceph admin host)."),
            timeout: float = typer.Option(10.0, "--timeout", min=0.1, help=LIVE_TIMEOUT_HELP),
            api_key: Optional[str] = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", show_envvar=False,
                                                  help=API_KEY_HELP),
            as_json: bool = typer.Option(False, "--json", help="Print the snapshot as JSON (--format json)."),
            fmt: str = format_option("table"), sets: Optional[list[str]] = set_option()) -> None:
    """Read the live stack once: which components are up, and their counters since they started."""
    from ..live.observe import snapshot

    data = data_format(fmt, as_json)
    _, resolved, _ = _spec(spec, given=overrides(sets))
    lmcache = _targets(lmcache_url) if lmcache_url else None
    snap = snapshot(resolved, _targets(target, api_key), lmcache=lmcache, ceph=not no_ceph, timeout=timeout)
    if data:
        emit_document("ObserveSnapshot", snap, None, data, "snapshot", False)
    else:
        out.print(f"{resolved.name}: {sum(c.up for c in snap.components)}/{len(snap.components)} components up")
        _components(snap.components)
        for url, values in snap.vllm.items():
            out.print(f"vLLM {url}: " + ", ".join(f"{k} {v:g}" for k, v in sorted(values.items())))
        for label, values in (("LMCache", snap.lmcache), ("Ceph", snap.ceph)):
            if values:
                out.print(f"{label}: " + ", ".join(f"{k} {v:g}" for k, v in sorted(values.items())))
    if snap.down():
        raise typer.Exit(EXIT_LIVE)


def compare(spec: str = typer.Argument(..., help="The spec the run benched."),
            observed: str = typer.Option(..., "--observed", help="Bench run directory (from kvplan bench)."),
            profile: Optional[str] = typer.Option(None, "--profile", help="Device profile from kvplan calibrate."),
            as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON (--format json)."),
            fmt: str = format_option("table"), sets: Optional[list[str]] = set_option()) -> None:
    """Predicted against observed, metric by metric, with the error."""
    from rich.table import Table

    from ..live.compare import check_same_spec, predict, rows
    from ..live.observed import read_run

    data = data_format(fmt, as_json)
    _, base, resolved = _spec(spec, profile, overrides(sets))
    try:
        run = read_run(observed)
        check_same_spec(base, run, observed)
    except SpecError as exc:
        _fail(exc)
    table_rows = rows(predict(resolved, run), run)
    if data:
        return emit_document("CompareResult", {"rows": [{"metric": r.metric, "unit": r.unit, "predicted": r.predicted,
                                                         "observed": r.observed, "error": r.error}
                                                        for r in table_rows]}, None, data, "comparison", False)
    table = Table(title=f"{run.name}: predicted vs observed ({run.observed.ok} requests"
                        + (f", profile {profile})" if profile else ")"), title_justify="left")
    for column in ("metric", "predicted", "observed", "error"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for r in table_rows:
        table.add_row(r.metric, _value(r.unit, r.predicted), _value(r.unit, r.observed), r.error_text)
    out.print(table)


def _value(unit: str, v: float | None) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return fmt_duration(v)
    if unit == "share":
        return f"{v:.1%}"
    if unit == "bytes":
        return f"{v:,.0f}"
    return f"{v:.2f} {unit}"


def calibrate(spec: str = typer.Argument(..., help="The spec of the deployment that was benched."),
              observed: List[str] = typer.Option([], "--observed", help="kvplan bench run directory (repeat to fit several)."),
              vllm_result: List[str] = typer.Option([], "--vllm-result", help="A `vllm bench serve --save-result` JSON "
                                                    "file of the same deployment (repeat to fit several)."),
              requests: List[str] = typer.Option([], "--requests", help="A benchmark's per-request log of the same "
                                                 "deployment: the replay log with measured ttft and e2e (repeat to "
                                                 "fit several; docs/benchmarks.md, kind: replay)."),
              out_file: str = typer.Option(..., "-o", "--out", help="Where to write the device profile (YAML)."),
              overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
              fmt: str = format_option("table"), sets: Optional[list[str]] = set_option()) -> None:
    """Fit the step-time coefficients to benchmarks and write them as a device profile."""
    from ..gpufit.calibrate import fit_vllm_results
    from ..live.calibrate import fit
    from ..live.compare import check_same_spec, predict
    from ..live.observed import read_run
    from ..spec.profile import write_profile

    data = data_format(fmt, False)
    if sum(map(bool, (observed, vllm_result, requests))) != 1:
        _fail(SpecError([Problem("--observed / --vllm-result / --requests", "give the benchmarks to fit, one kind per "
                                 "profile: kvplan bench runs (--observed), vllm bench serve results (--vllm-result) "
                                 "or per-request logs (--requests)",
                                 fix="kvplan calibrate SPEC --observed RUN_DIR -o profile.yaml, "
                                     "kvplan calibrate SPEC --vllm-result result.json -o profile.yaml, or "
                                     "kvplan calibrate SPEC --requests log.jsonl -o profile.yaml")]))
    files.check(out_file, "-o/--out", overwrite)
    given = overrides(sets)
    topo, resolved, _ = _spec(spec, given=given)
    try:
        if vllm_result:
            profile = fit_vllm_results(resolved, topo, vllm_result)
        elif requests:
            from ..gpufit.requests import fit_request_logs
            from ..validation import read

            raw, base, _ = read(spec, given)        # the spec as calibrated: with the --set overrides
            profile = fit_request_logs(resolved, raw, base, requests)
        else:
            runs = [(path, read_run(path)) for path in observed]
            for path, run in runs:
                check_same_spec(resolved, run, path)
            profile = fit(resolved, runs, [predict(resolved, run) for _, run in runs])
    except SpecError as exc:
        _fail(exc)
    files.check(out_file, "-o/--out", overwrite)
    write_profile(profile, Path(out_file))
    if data:
        emit_document("DeviceProfile", profile, None, data, "profile", False)
        return err.print(f"profile written to {out_file}: {profile.device} serving {profile.model}")
    s, f = profile.step_model, profile.fit
    out.print(f"profile written to {out_file}: {profile.device} serving {profile.model}")
    decode = (f"graph_step_overhead {fmt_duration(s.graph_step_overhead)}" if "graph_step_overhead" in profile.fitted
              else f"step_overhead {fmt_duration(s.step_overhead)}")
    out.print(f"  compute_efficiency {s.compute_efficiency:.3f}, attention_efficiency {s.attention_efficiency:.3f}, "
              f"{decode}, request_overhead {fmt_duration(s.request_overhead)}")
    if requests:
        for name in (run["name"] for run in profile.fitted_on):
            figures = []
            for m in ("ttft_mean", "e2e_mean", "tpot_mean"):
                held = f.get(f"{name}: {m} held out")
                figures.append(f"{m} {f[name + ': ' + m]:+.1%}" + ("" if held is None else f" (held out {held:+.1%})"))
            out.print(f"  {name}: " + ", ".join(figures))
    elif vllm_result:
        for name, error in f.items():
            out.print(f"  {name} with the profile: {error:+.1%}")
    else:
        out.print(f"  fitted to {f['requests']:.0f} requests; median TTFT {fmt_duration(f['ttft_p50_observed_s'])} observed, "
                  f"{fmt_duration(f['ttft_p50_simulated_s'])} simulated with the profile")
