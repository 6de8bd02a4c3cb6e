"""Two commands timed as whole processes in alternation, the speed ratio pair by pair (vs_*.py).

The vs_*.py scripts run kvplan as `python -P -m kvplan` / `python -P -c`: without -P, Python puts the
current directory first on the import path, and from the repository's root that is the source tree,
whose modules run interpreted, not the installed, compiled kvplan (about 3.5 times slower)."""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path


def timed(command: list[str]) -> float:
    """Wall seconds of one run of `command`; exits with its stderr if it fails."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{shlex.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def machine() -> str:
    """The processor's model name and the CPUs this process may use. A ratio holds for the machine it was
    measured on: the same two programs on the 100k-request chat gave 0.626 on a 2-vCPU EPYC, 0.554 on a
    2-vCPU Xeon."""
    model = "unknown processor"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} CPUs"


def alternate(ours: list[str], theirs: list[str], peer: str, pairs: int) -> list[float]:
    """Run kvplan (`ours`) then `peer` (`theirs`) `pairs` times; print the machine, each pair's seconds and
    the ratio peer seconds / kvplan seconds (above 1: kvplan is faster), then its median and range."""
    print(f"on {machine()}", flush=True)
    ratios = []
    for i in range(pairs):
        a, b = timed(ours), timed(theirs)
        ratios.append(b / a)
        print(f"pair {i + 1}: kvplan {a:.1f} s, {peer} {b:.1f} s, {peer} / kvplan {b / a:.3f}", flush=True)
    print(f"speed of kvplan against {peer} ({peer} s / kvplan s), pair by pair: median "
          f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
    return ratios
