"""The long fuzz run: many more cases than CI's tests/test_fuzz.py, with the figures issue 16 asks for.

    .venv/bin/python benchmarks/fuzz.py [--specs 10000] [--texts 2000] [--traces 1000] [--sims 200] [--cli 200]

Each case is run in this process (the CLI cases as real `kvplan validate` processes) and classed:
accepted, refused (a SpecError: a clean error), traceback (any other exception: a bug) or hang (past
the per-case bound). Printed: cases per kind, the outcome histogram (for the CLI, exit codes),
tracebacks with their first message, the slowest case, and this process's peak RSS. Exit status 1
when any case was a traceback or a hang. Fixed seeds: the same command gives the same cases.
"""

from __future__ import annotations

import argparse
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
from kvplan.errors import SpecError  # noqa: E402
from kvplan.resolve import resolve  # noqa: E402
from kvplan.sim.run import Bounds, run  # noqa: E402
from kvplan.sim.trace import read_trace  # noqa: E402
from kvplan.spec import from_mapping, load  # noqa: E402

HANG_SECONDS = 30


class Hang(Exception):
    pass


class Tally:
    def __init__(self, kind: str):
        self.kind, self.outcomes, self.tracebacks = kind, Counter(), []
        self.slowest = (0.0, "")

    def case(self, label: str, fn) -> None:
        def alarm(signum, frame):
            raise Hang()
        signal.signal(signal.SIGALRM, alarm)
        signal.alarm(HANG_SECONDS)
        start = time.perf_counter()
        try:
            fn()
            outcome = "accepted"
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

    def line(self) -> str:
        cases = sum(self.outcomes.values())
        hist = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        return (f"{self.kind:<8} {cases:>6} cases: {hist}; slowest {self.slowest[0]:.2f} s "
                f"({self.slowest[1][:70]})")


def drive(strategy, count: int, seed_label: str, body) -> None:
    if count < 1:
        return

    @settings(max_examples=count, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def each(value):
        body(value)
    each()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=int, default=10_000)
    ap.add_argument("--texts", type=int, default=2_000)
    ap.add_argument("--traces", type=int, default=1_000)
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--cli", type=int, default=200)
    args = ap.parse_args()
    tallies = []
    folder = Path(tempfile.mkdtemp(prefix="kvplan-fuzz-"))
    dirs = {p.name: p.parent for p in fuzzing.EXAMPLES}

    specs = Tally("specs")
    n = [0]

    def spec_case(case):
        n[0] += 1
        name, data = case
        specs.case(f"#{n[0]} mutated {name}", lambda: resolve(from_mapping(data, base_dir=dirs[name])))
    drive(fuzzing.mutated_specs(), args.specs, "specs", spec_case)
    tallies.append(specs)

    texts = Tally("yaml")
    cli_cases: list[Path] = []

    def text_case(text):
        n[0] += 1
        path = folder / f"text-{n[0]}.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        if len(cli_cases) < args.cli:
            cli_cases.append(path)
        texts.case(f"#{n[0]} {path.name}", lambda: resolve(load(path)))
    drive(fuzzing.yaml_texts(), args.texts, "texts", text_case)
    tallies.append(texts)

    traces = Tally("traces")

    def trace_case(text):
        n[0] += 1
        path = folder / f"trace-{n[0]}.jsonl"
        path.write_text(text)
        traces.case(f"#{n[0]} {path.name}", lambda: read_trace(str(path)))
        path.unlink()
    drive(fuzzing.trace_texts(), args.traces, "traces", trace_case)
    tallies.append(traces)

    sims = Tally("simulate")

    def sim_case(data):
        n[0] += 1
        try:
            r = resolve(from_mapping(data, base_dir=dirs["local.yaml"]))
        except SpecError:
            return
        sims.case(f"#{n[0]} valid odd local.yaml", lambda: run(r, bounds=Bounds(max_wall=20.0)))
    drive(fuzzing.odd_specs(), args.sims, "sims", sim_case)
    tallies.append(sims)

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

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("| inputs | cases | outcomes | tracebacks | hangs | slowest |")
    print("|---|---|---|---|---|---|")
    for t in tallies:
        cases = sum(t.outcomes.values())
        hist = ", ".join(f"{k} {v}" for k, v in sorted(t.outcomes.items()))
        print(f"| {t.kind} (in-process) | {cases:,} | {hist} | {t.outcomes['traceback']} | {t.outcomes['hang']} | "
              f"{t.slowest[0]:.2f} s |")
    hist = ", ".join(f"exit {k}: {v}" for k, v in sorted(exits.items()))
    print(f"| yaml (kvplan validate) | {sum(exits.values()):,} | {hist} | {len(cli_tracebacks)} | {exits['hang']} | "
          f"{slowest_cli[0]:.2f} s |")
    print(f"\npeak RSS of the in-process runs: {peak_mb:,.0f} MB")
    problems = [line for t in tallies for line in t.tracebacks] + cli_tracebacks
    for line in problems[:40]:
        print("traceback:", line)
    bad = sum(t.outcomes["traceback"] + t.outcomes["hang"] for t in tallies) + len(cli_tracebacks) + exits["hang"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
