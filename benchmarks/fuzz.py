"""The long fuzz run: many more cases than CI's tests/test_fuzz.py, with the figures issues 16 and 49 ask for.

    .venv/bin/python benchmarks/fuzz.py [--specs 10000] [--texts 2000] [--traces 1000] [--sims 200] [--kept 1000]
                                        [--edges 1000] [--tags 1000] [--hosts 1000] [--cli 200]

Each strategy (tests/fuzzing.py, tests/fuzzing_fields.py) runs in a process of its own, forked from this one, so
its peak memory is its own; the CLI cases run as real `kvplan validate` processes. A case is classed by how far it
got: refused (a SpecError at validate or resolve: a clean error), resolved (a SpecError later, such as a
simulation stopped at its bound), simulated (simulated and sized; rendered too for the edge and host cases), or
accepted (an input that is not a spec: a trace); traceback (any other exception: a bug) or hang (past the
per-case bound). Printed: one row per strategy with its cases, the shares that reached resolve and the simulator,
tracebacks, hangs, peak RSS and the slowest case; then the tracebacks with their first message. Exit status 1 when
any case was a traceback or a hang. Fixed seeds: the same command gives the same cases.
"""

from __future__ import annotations

import argparse
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from hypothesis import HealthCheck, given, settings  # noqa: E402

import fuzzing  # noqa: E402
import fuzzing_fields as fields  # noqa: E402
from kvplan.errors import SpecError  # noqa: E402
from kvplan.resolve import resolve  # noqa: E402
from kvplan.sim.run import Bounds, run  # noqa: E402
from kvplan.sim.trace import read_trace  # noqa: E402
from kvplan.spec import from_mapping  # noqa: E402

HANG_SECONDS = 30


class Hang(Exception):
    pass


class Tally:
    """The outcomes of one strategy's cases, its tracebacks and its slowest case."""

    def __init__(self, kind: str):
        self.kind, self.outcomes, self.tracebacks = kind, Counter(), []
        self.slowest = (0.0, "")
        self.peak_mb = 0.0

    def case(self, label: str, fn) -> None:
        """Run one case: `fn` returns how far it got (fuzzing_fields.STAGES) or None for an input accepted."""
        def alarm(signum, frame):
            raise Hang()
        signal.signal(signal.SIGALRM, alarm)
        signal.alarm(HANG_SECONDS)
        start = time.perf_counter()
        try:
            outcome = fn() or "accepted"
        except SpecError:
            outcome = "refused"
        except Hang:
            outcome = "hang"
        except BaseException as exc:  # noqa: BLE001 - what the run counts
            outcome = "traceback"
            self.tracebacks.append(f"{label}: {type(exc).__name__}: {str(exc)[:160]}")
        finally:
            signal.alarm(0)
        took = time.perf_counter() - start
        if took > self.slowest[0]:
            self.slowest = (took, label)
        self.outcomes[outcome] += 1

    def share(self, *stages: str) -> str:
        cases = sum(self.outcomes.values())
        return f"{sum(self.outcomes[s] for s in stages) / cases:.0%}" if cases else "-"


def drive(strategy, count: int, body) -> None:
    if count < 1:
        return

    @settings(max_examples=count, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def each(value):
        body(value)
    each()


def in_child(kind: str, count: int, cases) -> Tally:
    """Run `cases(tally, count)` in a forked process; its tally, with that process's peak RSS."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:                                        # the child: run, report, leave without cleanup
        os.close(reader)
        tally = Tally(kind)
        try:
            cases(tally, count)
        except BaseException as exc:  # noqa: BLE001 - a crash of the driver itself is counted, not lost
            tally.outcomes["traceback"] += 1
            tally.tracebacks.append(f"{kind} driver: {type(exc).__name__}: {str(exc)[:160]}")
        tally.peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        with os.fdopen(writer, "wb") as out:
            pickle.dump(tally, out)
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as got:
        data = got.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        tally = Tally(kind)
        tally.outcomes["traceback"] += 1
        tally.tracebacks.append(f"{kind}: the process died (wait status {status})")
        return tally
    return pickle.loads(data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=int, default=10_000)
    ap.add_argument("--texts", type=int, default=2_000)
    ap.add_argument("--traces", type=int, default=1_000)
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--kept", type=int, default=1_000)
    ap.add_argument("--edges", type=int, default=1_000)
    ap.add_argument("--tags", type=int, default=1_000)
    ap.add_argument("--hosts", type=int, default=1_000)
    ap.add_argument("--cli", type=int, default=200)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="kvplan-fuzz-"))
    dirs = {p.name: p.parent for p in fuzzing.EXAMPLES}
    fields.seeds()                                      # once, before the forks

    def specs(tally, count):
        n = [0]

        def each(case):
            n[0] += 1
            name, data = case
            tally.case(f"#{n[0]} mutated {name}", lambda: fields.reach(name, fields.capped(data)))
        drive(fuzzing.mutated_specs(), count, each)

    def texts(tally, count):
        n = [0]

        def each(text):
            n[0] += 1
            tally.case(f"#{n[0]} yaml text", lambda: fields.reach("spec.yaml", text=text))
        drive(fuzzing.yaml_texts(), count, each)

    def traces(tally, count):
        n = [0]

        def each(text):
            n[0] += 1
            path = folder / f"trace-{os.getpid()}-{n[0]}.jsonl"
            path.write_text(text)
            tally.case(f"#{n[0]} {path.name}", lambda: read_trace(str(path)) and None)
            path.unlink()
        drive(fuzzing.trace_texts(), count, each)

    def sims(tally, count):
        n = [0]

        def each(data):
            n[0] += 1

            def case():
                try:
                    r = resolve(from_mapping(data, base_dir=dirs["local.yaml"]))
                except SpecError:
                    return "refused"
                try:
                    run(r, bounds=Bounds(max_wall=20.0))
                except SpecError:
                    return "resolved"
                return "simulated"
            tally.case(f"#{n[0]} valid odd local.yaml", case)
        drive(fuzzing.odd_specs(), count, each)

    def field_aware(strategy, render: bool = False, text: bool = False):
        def cases(tally, count):
            n = [0]

            def each(case):
                n[0] += 1
                if text:
                    tally.case(f"#{n[0]} {case[0]}", lambda: fields.reach(case[0], text=case[1]))
                elif len(case) == 3:                    # hostile hosts: one that validates must be harmless
                    tally.case(f"#{n[0]} {case[0]} {case[2]}", lambda: _harmless(case, render))
                else:
                    tally.case(f"#{n[0]} {case[0]} {fields.changes(*case)}",
                               lambda: fields.reach(case[0], case[1], render=render))
            drive(strategy, count, each)
        return cases

    plan = [("mutated specs", args.specs, specs), ("yaml texts", args.texts, texts),
            ("traces", args.traces, traces), ("odd valid specs", args.sims, sims),
            ("kept-kind changes", args.kept, field_aware(fields.kept_valid_specs())),
            ("zero/extreme numbers", args.edges, field_aware(fields.edge_specs(), render=True)),
            ("malformed yaml tags", args.tags, field_aware(fields.tagged_texts(), text=True)),
            ("hostile hosts", args.hosts, field_aware(fields.hostile_host_specs(), render=True))]
    tallies = [in_child(kind, count, cases) for kind, count, cases in plan if count > 0]

    cli_cases = []
    for i, text in enumerate(_texts(min(args.cli, args.texts))):
        path = folder / f"text-{i}.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        cli_cases.append(path)
    exits: Counter = Counter()
    cli_tracebacks = []
    slowest_cli = (0.0, "")
    kvplan = str(Path(sys.executable).parent / "kvplan")
    for path in cli_cases:
        start = time.perf_counter()
        try:
            done = subprocess.run([kvplan, "validate", str(path)], capture_output=True, text=True, timeout=60)
            code = str(done.returncode)
            if "Traceback" in done.stderr or done.returncode == 70:
                cli_tracebacks.append(f"{path.name}: {done.stderr.strip().splitlines()[-1][:160]}")
        except subprocess.TimeoutExpired:
            code = "hang"
        took = time.perf_counter() - start
        slowest_cli = max(slowest_cli, (took, path.name))
        exits[code] += 1

    print("| strategy | cases | reached resolve | reached the simulator | tracebacks | hangs | peak RSS | slowest |")
    print("|---|---|---|---|---|---|---|---|")
    for t in tallies:
        cases = sum(t.outcomes.values())
        spec_like = t.kind != "traces"
        print(f"| {t.kind} | {cases:,} | {t.share('resolved', 'simulated') if spec_like else 'n/a'} | "
              f"{t.share('simulated') if spec_like else 'n/a'} | {t.outcomes['traceback']} | {t.outcomes['hang']} | "
              f"{t.peak_mb:,.0f} MB | {t.slowest[0]:.2f} s |")
    hist = ", ".join(f"exit {k}: {v}" for k, v in sorted(exits.items()))
    print(f"| yaml texts (kvplan validate) | {sum(exits.values()):,} | {hist} | | {len(cli_tracebacks)} | "
          f"{exits['hang']} | | {slowest_cli[0]:.2f} s |")
    problems = [line for t in tallies for line in t.tracebacks] + cli_tracebacks
    for line in problems[:60]:
        print("traceback:", line)
    bad = sum(t.outcomes["traceback"] + t.outcomes["hang"] for t in tallies) + len(cli_tracebacks) + exits["hang"]
    return 1 if bad else 0


def _harmless(case, render: bool) -> str:
    """How far a hostile-host case got; AssertionError (a traceback here) when a host with a line break,
    template, command or quote in it was accepted."""
    name, data, hosts = case
    outcome = fields.reach(name, data, render=render)
    accepted = [h for h in hosts.values() if fields.HOSTILE.search(h)]
    if outcome != "refused" and accepted:
        raise AssertionError(f"accepted the host {accepted[0]!r}")
    return outcome


def _texts(count: int) -> list[str]:
    """The first `count` YAML texts of the strategy, for the CLI cases."""
    found: list[str] = []
    drive(fuzzing.yaml_texts(), count, found.append)
    return found


if __name__ == "__main__":
    sys.exit(main())
