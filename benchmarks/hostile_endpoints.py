"""Live commands against hostile endpoints (issue 49): how long a drip holds them, how much memory a 2 GB body takes.

    .venv/bin/python benchmarks/hostile_endpoints.py [--size-gb 2] [--timeout 10] [--skip-drip]

Each case runs the real `kvplan` command as its own process against tests/hostile_server.py on a loopback
port: `/v1/models` (bench), or `/health` and `/metrics` (observe, doctor) answering a body of --size-gb GB made
as it is sent (announced by Content-Length, or chunked without one), or an answer dripped one byte every 50 ms
(which would take about 25 minutes whole). Printed per case: the exit code, the wall time, the process's peak
RSS (its own rusage, from wait4) and the first line of what it said. The baseline is the same command against a
port nobody listens on. Issue 49's targets: a drip cut at the stated deadline (bench: its check, --timeout in
all, at most 10 s; observe and doctor: 3 x --timeout), a 2 GB body refused with memory under 300 MB.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from hostile_server import HostileServer, canned, drip, huge  # noqa: E402

SPEC = str(REPO / "examples" / "local.yaml")
KVPLAN = str(Path(sys.executable).parent / "kvplan")


def run(args: list[str], state: Path) -> tuple[int, float, float, str]:
    """(exit code, wall seconds, peak RSS MiB, first line it printed) of `kvplan args`, its RSS from its own rusage."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "NO_COLOR": "1", "KVPLAN_STATE_DIR": str(state)}
    with tempfile.TemporaryFile("w+") as said:
        begun = time.monotonic()
        proc = subprocess.Popen([KVPLAN, *args], env=env, stdout=said, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - begun
        proc.returncode = os.waitstatus_to_exitcode(status)
        said.seek(0)
        lines = [line.strip() for line in said if line.strip()]
    telling = ("Traceback", "refused", "longer than", "within", "deadline")
    first = next((line for line in lines if any(word in line for word in telling)), lines[0] if lines else "")
    return proc.returncode, wall, usage.ru_maxrss / 1024, first


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--timeout", type=float, default=10.0, help="--timeout given to observe and doctor "
                        "(bench keeps its default 120: its reads are cut at 10 s)")
    parser.add_argument("--skip-drip", action="store_true")
    args = parser.parse_args()
    size = int(args.size_gb * 2**30)
    state = Path(os.environ.get("TMPDIR", "/tmp")) / f"kvplan-hostile-{os.getpid()}"
    t = str(args.timeout)
    cases = []
    nobody = f"http://127.0.0.1:{unused_port()}"
    cases.append(("baseline: bench, nobody listening", None, ["bench", SPEC, "--target", nobody]))
    for chunked in (False, True):
        how = "chunked" if chunked else "content-length"
        cases.append((f"bench, {args.size_gb:g} GB /v1/models ({how})", {"/v1/models": huge(size, chunked)},
                      ["bench", SPEC, "--target", "URL"]))
    cases.append((f"observe, {args.size_gb:g} GB /health (chunked)",
                  {"/health": huge(size, True, start=b"")}, ["observe", SPEC, "--target", "URL", "--no-ceph",
                                                             "--lmcache-url", nobody, "--timeout", t]))
    cases.append((f"doctor, {args.size_gb:g} GB /metrics (chunked)",
                  {"/health": canned(200, b""), "/metrics": huge(size, True, start=b"")},
                  ["doctor", SPEC, "--target", "URL", "--no-ceph", "--lmcache-url", nobody, "--no-prove",
                   "--timeout", t]))
    if not args.skip_drip:
        slow = drip(pad=30_000)
        cases.append(("bench, dripped /v1/models (deadline 10 s)", {"/v1/models": slow}, ["bench", SPEC, "--target", "URL"]))
        cases.append((f"observe, every path dripped (deadline 3 x {t} s)", None,
                      ["observe", SPEC, "--target", "URL", "--no-ceph", "--lmcache-url", "URL", "--timeout", t]))
        cases.append((f"doctor, every path dripped (deadline 3 x {t} s)", None,
                      ["doctor", SPEC, "--target", "URL", "--no-ceph", "--lmcache-url", "URL", "--no-prove",
                       "--timeout", t]))
    print(f"{'case':52} {'exit':>4} {'wall s':>7} {'peak RSS MiB':>12}  said")
    worst = 0.0
    for label, answers, command in cases:
        default = drip(pad=30_000) if "every path dripped" in label else None
        with HostileServer(answers or {}, default=default) as server:
            command = [server.url if a == "URL" else a for a in command]
            code, wall, rss, said = run(command, state)
        if not label.startswith("baseline"):
            worst = max(worst, rss)
        print(f"{label:52} {code:>4} {wall:>7.1f} {rss:>12.0f}  {said[:110]}")
    print(f"largest peak RSS against a hostile server: {worst:.0f} MiB (target: under 300 MB)")
    return 0 if worst < 300 * 1e6 / 2**20 else 1


if __name__ == "__main__":
    sys.exit(main())
