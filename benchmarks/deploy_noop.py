"""Benchmark: a `kvplan deploy` that changes nothing, and where its playbook spends the time.

A deploy is idempotent: run again on a converged stack it must change nothing, and an SRE runs it
often (after an edit that touches one role, to heal a killed service, in CI). Its cost is Ansible's
per-task overhead more than any real work: each module run is a new Python process on the target
that imports Ansible's module code from source. This script deploys the spec once (to converge),
then `--runs` more times, timing each whole `kvplan deploy` process, and reads each no-op run's
ansible-runner events: seconds per role (from each task's start to the next's), tasks started, and
results (a task or loop item that ran, not skipped). It fails if a no-op run changed anything.

Usage: python benchmarks/deploy_noop.py [SPEC] [-i INVENTORY] [--state-dir DIR] [--runs N]
Defaults: examples/local.yaml on inventories/local (root; ./install.sh test installs what it needs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def deploy(spec: str, inventory: str, state_dir: Path) -> float:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kvplan", "deploy", spec, "-i", inventory, "--state-dir", str(state_dir)],
                          capture_output=True, text=True)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"kvplan deploy failed (exit code {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return took


def playbook_profile(run_dir: Path) -> dict:
    """Seconds per role, tasks, module runs and changed results of a run's `apply` events."""
    events = sorted((json.loads(p.read_text()) for p in (run_dir / "artifacts" / "apply" / "job_events").glob("*.json")),
                    key=lambda e: e["counter"])
    at = [datetime.fromisoformat(e["created"]).timestamp() for e in events]
    starts = [(t, e["event_data"].get("role") or "(play)") for t, e in zip(at, events) if e["event"] == "playbook_on_task_start"]
    per_role: dict[str, float] = defaultdict(float)
    for (t, role), (next_t, _) in zip(starts, [*starts[1:], (at[-1], None)]):
        per_role[role] += next_t - t
    ran = [e for e in events if e["event"] == "runner_item_on_ok"
           or (e["event"] == "runner_on_ok" and "results" not in (e["event_data"].get("res") or {}))]
    return {"playbook_s": at[-1] - at[0], "per_role_s": dict(per_role), "tasks": len(starts), "ran": len(ran),
            "changed": [e["event_data"]["task"] for e in ran if (e["event_data"].get("res") or {}).get("changed")]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", nargs="?", default="examples/local.yaml")
    ap.add_argument("-i", "--inventory", default="inventories/local")
    ap.add_argument("--state-dir", type=Path, default=REPO / ".kvplan" / "deploy-noop")
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()

    first = deploy(args.spec, args.inventory, args.state_dir)
    print(f"converging deploy: {first:.1f} s", flush=True)
    profiles = []
    for n in range(1, args.runs + 1):
        took = deploy(args.spec, args.inventory, args.state_dir)
        profile = playbook_profile(sorted((args.state_dir / "runs").iterdir())[-1])
        profiles.append(profile)
        roles = ", ".join(f"{role} {s:.1f}" for role, s in sorted(profile["per_role_s"].items(), key=lambda kv: -kv[1]))
        print(f"no-op deploy {n}: {took:.1f} s (playbook {profile['playbook_s']:.1f} s, {profile['tasks']} tasks, "
              f"{profile['ran']} ran); seconds per role: {roles}", flush=True)
    changed = sorted({task for p in profiles for task in p["changed"]})
    if changed:
        raise SystemExit(f"a deploy on the converged stack changed something: {', '.join(changed)}")


if __name__ == "__main__":
    main()
