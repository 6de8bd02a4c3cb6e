"""The commands that explore designs around a spec: `kvplan plan` (the cheapest topology meeting the SLO),
`sweep` (variants side by side), `capacity` (the highest rate within the SLO), `size` (hit ratio against
capacity per tier) and `report` (their results as one offline page).

Exit codes besides cli.py's: 4 when no plan meets the SLO.
"""

from __future__ import annotations

from typing import Optional

import typer

from ..errors import SpecError
from . import files
from .common import (CACHE_HELP, JSON_HELP, STDOUT, WIDE, ProgressBar, data_format, echo_change, emit, emit_document,
                     format_option, overrides, print_tables, run_cache, set_option, table_width)
from .console import err, fail as _fail, out
from .files import OVERWRITE_HELP

EXIT_NO_PLAN = 4


def plan(spec: str = typer.Argument(..., help="Topology spec (YAML) to start from."),
         rate: str = typer.Option(..., "--rate", help="Requests per second to serve, e.g. 40/s."),
         slo: list[str] = typer.Option([], "--slo", help="Latency target KEY=DURATION, e.g. ttft_p99=500ms (repeatable; "
                                                          "default: the spec's slo)."),
         budget: Optional[str] = typer.Option(None, "--budget", help="Most it may cost, USD per hour, e.g. 100/h."),
         headroom: str = typer.Option("25%", "--headroom", help="Judge every candidate at the rate plus this share "
                                                                  "(e.g. 25% or 0.25; 0: at the rate itself)."),
         top: int = typer.Option(4, "--top", min=1, max=100, help="List the N cheapest candidates meeting the SLO "
                                                                  "(the winner and N-1 alternatives)."),
         seeds: int = typer.Option(1, "--seeds", min=1, max=100, help="Simulate each candidate under N seeds: "
                                                                        "the mean counts, and a margin within the "
                                                                        "95 % interval is marked as such."),
         workers: int = typer.Option(1, "--workers", min=1, help="Simulations run in parallel."),
         gpus: list[str] = typer.Option([], "--gpu", help="Only these accelerators (repeatable; default: every priced one "
                                                           "of the spec's kind that has step-time coefficients)."),
         max_instances: int = typer.Option(8, "--max-instances", min=1, max=4096, help="Most vLLM instances tried."),
         max_runs: int = typer.Option(200, "--max-runs", min=1, help="Most simulation runs the search may make."),
         show_all: bool = typer.Option(False, "--all", help="List every candidate, not only the simulated ones."),
         as_json: bool = typer.Option(False, "--json", help="Print the plan (every candidate, its price, verdict and "
                                                             "metrics) as JSON on stdout instead of tables "
                                                             "(--format json)."),
         fmt: str = format_option("table"),
         out_file: Optional[str] = typer.Option(None, "--out", help="Write the winner as a spec YAML (ready for kvplan "
                                                                     "deploy; - for stdout)."),
         overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
         cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help=CACHE_HELP),
         no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the run cache."),
         disaggregated: str = typer.Option("auto", "--disaggregated", help="Also plan prefill:decode splits of the "
                                           "same accelerators: auto (when the SLO has a TPOT target or the spec is "
                                           "disaggregated), on, only, off."),
         wide: bool = WIDE, sets: Optional[list[str]] = set_option()) -> None:
    """Find the cheapest topology that meets the SLO at the rate: enumerate, prune, simulate, explain."""
    from ..plan.headroom import parse_headroom_arg
    from ..plan.pools import parse_disaggregated_arg
    from ..plan.search import parse_budget_arg, parse_rate_arg, plan as run_plan, winner_yaml
    from ..report.plan import plan_json, plan_tables, search_verdict
    from ..validation import load
    from ..spec.slo import parse_slo_flags

    data = data_format(fmt, as_json)
    if data and out_file == STDOUT:
        raise typer.BadParameter(f"--out - prints the winner's spec on stdout, --format {data} the plan: give one of "
                                 "them, or write the winner to a file", param_hint="--out/--format")
    try:
        wanted = parse_rate_arg(rate)
        targets = parse_slo_flags(slo)
        limit = parse_budget_arg(budget) if budget is not None else None
        margin = parse_headroom_arg(headroom)
        parse_disaggregated_arg(disaggregated)
    except SpecError as exc:       # the flags, not the spec
        _fail(exc)
    files.check(out_file, "--out", overwrite)
    given = overrides(sets)
    cache = run_cache(cache_dir, no_cache)
    try:
        topo = load(spec, given, echo_change)
        with ProgressBar() as bar:
            def progress(runs: int, most: int, best) -> None:
                if err.is_terminal:
                    bar(min(1.0, runs / most))
                else:   # piped: one line per batch
                    err.print(f"plan: {runs} runs (--max-runs {most}); cheapest meeting the SLO so far: "
                              + (f"#{best.index} ${best.usd_per_hour:,.2f}/h" if best else "none"))

            result = run_plan(topo, wanted, targets, budget=limit, seeds=seeds, workers=workers, gpus=gpus,
                              max_instances=max_instances, max_runs=max_runs, progress=progress, cache=cache,
                              headroom=margin, top=top, disaggregated=disaggregated)
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    if data:
        payload = plan_json(result)
        if given:                          # the --set the start spec was read with
            from ..spec.overrides import recorded

            payload["overrides"] = recorded(given)
        emit_document("PlanResult", payload, None, data, "plan", overwrite)
    elif out_file != STDOUT:
        print_tables(plan_tables(result, show_all=show_all, width=table_width(wide)), wide)
    winner = result.winner
    if result.unsearched:
        err.print("warning: the search was " + search_verdict(result))
    if winner is None:
        err.print("no candidate meets the SLO at this rate" + (" within the budget" if limit is not None else "")
                  + ("; raise --max-runs, " if result.unsearched else "; raise ")
                  + "--max-instances or --budget, add --gpu choices, or relax --slo")
        raise typer.Exit(EXIT_NO_PLAN)
    text = winner_yaml(winner, result, topo)
    if given:      # the winner holds them already; below kvplan's header (its mark, cli/files.py), where they came from
        head, _, body = text.partition("\n")
        text = head + "\n" + f"# from {spec} with --set {' --set '.join(map(str, given))}".replace("\n", " ") + "\n" + body
    if out_file == STDOUT:
        typer.echo(text, nl=False)
    elif out_file:
        files.write(out_file, text, "--out", overwrite)
        err.print(f"winner written to {out_file}: kvplan deploy {out_file} -i INVENTORY")


def _executor_options(workers: int, ray: Optional[str]) -> None:
    if ray is not None and workers != 1:
        raise typer.BadParameter("--workers runs local processes and --ray a Ray cluster; give one of them",
                                 param_hint="--workers/--ray")


def _runs_line(total: int, simulated: int, cache) -> None:
    if cache is None:
        err.print(f"{total} run(s) simulated (cache off)")
    else:
        err.print(f"{total} run(s): {simulated} simulated, {total - simulated} from the cache ({cache.root})")


def sweep(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
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
              fmt: str = format_option("table"),
              csv_file: Optional[str] = typer.Option(None, "--csv", help="Write the sweep as CSV to this file (- for stdout)."),
              overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
              cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help=CACHE_HELP),
              no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the run cache."),
              wide: bool = WIDE, sets: Optional[list[str]] = set_option()) -> None:
    """Simulate variants of a spec (--vary PATH=V1,V2,...) and compare them in one table."""
    from ..report import terminal
    from ..report.sweep import sweep_section
    from ..sweep.sweep import sweep
    from ..sweep.variants import VaryUsageError, parse_vary

    _executor_options(workers, ray)
    data = data_format(fmt, as_json)
    if data and csv_file == STDOUT:
        raise typer.BadParameter(f"--csv - prints the sweep as CSV on stdout, --format {data} as a document: give one "
                                 "of them", param_hint="--csv/--format")
    try:
        varies = [parse_vary(v) for v in vary]
    except VaryUsageError as exc:
        raise typer.BadParameter(str(exc), param_hint="--vary") from None
    given = overrides(sets)
    files.check(out_file, "--out", overwrite)
    files.check(csv_file, "--csv", overwrite)
    cache = run_cache(cache_dir, no_cache)
    try:
        with ProgressBar() as progress:
            result, simulated = sweep(spec, varies, zip_=zip_, seeds=seeds, first_seed=seed, workers=workers, ray=ray,
                                      cache=cache, on_done=lambda done, total: progress(done / total),
                                      overrides=given, on_change=echo_change)
    except VaryUsageError as exc:
        raise typer.BadParameter(str(exc), param_hint="--vary/--zip") from None
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    if not (data or STDOUT in (out_file, csv_file)):
        print_tables(terminal.tables([sweep_section(result)], table_width(wide)), wide)
    _runs_line(len(result.points) * seeds, simulated, cache)
    if out_file or data:
        emit_document("SweepResult", result, out_file, data, "sweep", overwrite)
    if csv_file:
        emit(result.to_csv(), csv_file, False, "CSV", overwrite, "--csv")


def capacity(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
                 slo: Optional[list[str]] = typer.Option(None, "--slo", help="KEY=VALUE target, e.g. ttft_p99=500ms "
                                                                             "(keys as in the spec's slo); repeatable. "
                                                                             "Default: the spec's slo."),
                 seeds: int = typer.Option(3, "--seeds", min=1, max=1000, help="Most seeds per probe: a probe starts "
                                                                               "with 2 and adds seeds while the SLO "
                                                                               "is within the noise (1: no interval)."),
                 seed: Optional[int] = typer.Option(None, "--seed", help="First seed (default: workload.seed)."),
                 low: Optional[str] = typer.Option(None, "--low", help="Lowest rate to try (e.g. 1/s; with sessions "
                                                                       "new sessions, e.g. 1sessions/s; a replay "
                                                                       "speed such as 0.5 for traces)."),
                 high: Optional[str] = typer.Option(None, "--high", help="Highest rate to try."),
                 tolerance: float = typer.Option(0.05, "--tolerance", help="Stop when the met and missed rates are "
                                                                           "this close (a share of the rate)."),
                 headroom: str = typer.Option("25%", "--headroom", help="Also say the rate to plan for with this share "
                                                                        "kept free: the limit / (1 + headroom)."),
                 workers: int = typer.Option(1, "--workers", min=1, max=1024, help="Local worker processes (seeds of "
                                                                                   "a probe run in parallel)."),
                 ray: Optional[str] = typer.Option(None, "--ray", help="Run on Ray: auto or a cluster address."),
                 out_file: Optional[str] = typer.Option(None, "--out", help="Write the search as JSON to this file "
                                                                            "(- for stdout)."),
                 overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
                 as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
                 fmt: str = format_option("table"),
                 cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help=CACHE_HELP),
                 no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the run cache."),
                 wide: bool = WIDE, sets: Optional[list[str]] = set_option()) -> None:
    """Find the highest arrival rate (new sessions/s for chat sessions, the replay speed for a trace or log) at
    which the spec still meets its SLO (bisection over simulations)."""
    from ..report import terminal
    from ..report.sections import Section
    from ..report.sweep import NARROW, TABLE_COLUMNS
    from ..spec.slo import parse_slo_flags
    from ..sweep.capacity import SloUsageError, headline, search
    from ..units import fmt_duration

    _executor_options(workers, ray)
    given = overrides(sets)
    data = data_format(fmt, as_json)
    files.check(out_file, "--out", overwrite)
    cache = run_cache(cache_dir, no_cache)
    state = {"n": 0}
    machine = data is not None or out_file == STDOUT
    say = err if machine else out          # with JSON on stdout, the probes are progress on stderr

    def verdict(p) -> str:
        return "  ".join(f"{key} {fmt_duration(p.metrics[key].mean):>9}"
                         + (f" ± {fmt_duration(p.metrics[key].ci95):>8}" if seeds > 1 else "") for key in targets)

    def show(p, fresh: int) -> None:
        state["n"] += 1
        word = {"met": "met", "missed": "MISSED", "undecided": "undecided"}[p.verdict]
        say.print(f"probe {state['n']:>2}  {knob.fmt_probe(p):>{26 if knob.sessions else 10}}  {verdict(p)}  {word}"
                  + (f" ({len(p.seeds)} seeds)" if seeds > 1 else ""))

    try:
        from ..sweep.capacity import parse_headroom_arg

        margin = parse_headroom_arg(headroom)
    except SpecError as exc:       # the flag, not the spec
        _fail(exc)
    try:
        targets = parse_slo_flags(slo or []).targets()
        from ..validation import load
        from ..sweep.capacity import Knob

        topo = load(spec, given, echo_change)
        knob = Knob.of(topo)
        targets = targets or topo.slo.targets()
        goal = ", ".join(f"{k} <= {fmt_duration(v)}" for k, v in targets.items())
        if targets:
            what = knob.meaning
            say.print(f"Capacity of {spec}: the highest {knob.path} ({what}) meeting {goal}"
                      + (f"; each probe runs 2 to {seeds} seeds and is decided at 95 % (mean ± 95 % CI)" if seeds > 1
                         else " on 1 seed (no interval)"))
        result, simulated = search(spec, targets, seeds=seeds, first_seed=seed, low=low, high=high,
                                   tolerance=tolerance, workers=workers, ray=ray, cache=cache, on_probe=show,
                                   headroom=margin, overrides=given)
    except SloUsageError as exc:
        raise typer.BadParameter(str(exc), param_hint="--slo/--low/--high/--tolerance") from None
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    for line in headline(result):
        say.print(line)
    section = Section("Bracketing probes" + (", mean ± 95 % CI" if seeds > 1 else ""),
                      ["", "rate", "seeds", *(label for _, label, _ in TABLE_COLUMNS)], narrow=NARROW)
    for name, p in (("met", result.met), ("missed", result.missed)):
        if p is not None:
            section.rows.append([name, knob.fmt_probe(p), str(len(p.seeds)),
                                 *("-" if p.metrics.get(key) is None else f(p.metrics[key].mean)
                                   for key, _, f in TABLE_COLUMNS)])
            if len(p.seeds) > 1:
                section.rows.append(["", "± 95 % CI", "", *("" if p.metrics.get(key) is None else f(p.metrics[key].ci95)
                                                            for key, _, f in TABLE_COLUMNS)])
    if not machine:
        print_tables(terminal.tables([section], table_width(wide)), wide)
    _runs_line(sum(len(p.seeds) for p in result.probes), simulated, cache)
    if out_file or data:
        emit_document("CapacityResult", result, out_file, data, "search", overwrite)


def size(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
             seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the workload (default: workload.seed)."),
             as_json: bool = typer.Option(False, "--json", help="Print the result as JSON instead of tables "
                                                                 "(--format json)."),
             fmt: str = format_option("table"),
             out_file: Optional[str] = typer.Option(None, "--out", help="Write the result as JSON to this file "
                                                                        "(for kvplan report; - for stdout)."),
             overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
             sets: Optional[list[str]] = set_option()) -> None:
    """Hit ratio against capacity for every tier, from one pass over the workload: working set, the sizes
    reaching 50/90/99 % of the reuse, and their cost."""
    from ..report.sizing import terminal_tables
    from ..sizing import size
    from ..validation import load

    data = data_format(fmt, as_json)
    files.check(out_file, "--out", overwrite)
    given = overrides(sets)
    try:
        result = size(load(spec, given, echo_change), seed=seed)
        if given:
            from ..spec.overrides import recorded

            result = result.model_copy(update={"overrides": recorded(given)})
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    if data or out_file == STDOUT:
        return emit_document("SizeResult", result, out_file, data, "result", overwrite)
    print_tables(terminal_tables(result, table_width(False)))
    if out_file:
        emit_document("SizeResult", result, out_file, None, "result", overwrite)


def report(result_or_sweep: str = typer.Argument(..., help="JSON kvplan wrote: `simulate --out` (one run, --seeds, "
                                                      "--ablate), `sweep --out`, `size --out`, `capacity --out`, "
                                                      "`plan --json`, `doctor --json`, `observe --json` or "
                                                      "`compare --json`."),
               out_file: str = typer.Option(..., "-o", "--out", help="The report: .html (one self-contained page "
                                                                      "with plots) or .md (the tables as Markdown)."),
               overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP)) -> None:
    """Turn any answer kvplan wrote as JSON into a report: plots and tables in one offline HTML page, or Markdown."""
    from ..errors import Problem
    from ..report import document, html, inputs

    if html.output_format(out_file) is None:
        raise typer.BadParameter(f"'{out_file}' is neither .html nor .md; name the report report.html or report.md",
                                 param_hint="-o/--out")
    files.check(out_file, "-o/--out", overwrite)
    try:
        doc = document.build(inputs.load(result_or_sweep))
    except SpecError as exc:
        _fail(exc)
    try:
        fmt = html.output_format(out_file)
        files.write(out_file, html.render(doc, fmt), "-o/--out", overwrite)
    except OSError as exc:
        _fail(SpecError([Problem("-o/--out", f"cannot write the report: {exc.strerror or exc}",
                                 fix="write it into an existing folder you may write to")], source=out_file))
    plots = f"{len(doc.figures)} plots" if fmt == "html" else f"{len(doc.figures)} plots listed"
    out.print(f"report written to {out_file}: {doc.title}; {len(doc.parts)} parts, {len(doc.tables)} tables, {plots}")
