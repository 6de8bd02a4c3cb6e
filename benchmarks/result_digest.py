"""Fingerprints of the simulator's complete results: the proof that a speed change changed no prediction.

For every example and docs example (at most 1,500 requests; each also with serving.max_num_seqs 4, which
forces preemption), the full Mooncake conversation trace at ddr 256 GiB and 4 TiB, and the chat example
at 5,000 requests, it simulates the spec and prints a SHA-256 of the whole result: every counter, summary
and sample, and every column of the per-request table, bit for bit. It simulates with the kvplan it
imports (printed first), so the same specs can be run through two builds:

    PYTHONPATH=. python benchmarks/result_digest.py --out /tmp/after.json
    git worktree add /tmp/before HEAD~1
    PYTHONPATH=/tmp/before python benchmarks/result_digest.py --out /tmp/before.json --compare /tmp/after.json

With --compare it exits 1 when any fingerprint differs and names the specs that do.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from pathlib import Path
from typing import Iterator

import yaml

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
MAX_REQUESTS = 1500


def cases(trace: Path) -> Iterator[tuple[str, dict, Path]]:
    """(name, spec as a mapping, the folder its relative paths are read from)."""
    files = sorted((REPO / "examples").glob("*.yaml")) + sorted((REPO / "examples" / "claims").glob("*.yaml")) \
        + sorted((REPO / "docs" / "examples").glob("*.yaml"))
    for path in files:
        spec = yaml.safe_load(path.read_text())
        workload = spec.get("workload") or {}
        if "requests" in workload:
            workload["requests"] = min(workload["requests"], MAX_REQUESTS)
        name = str(path.relative_to(REPO))
        yield name, spec, path.parent
        preempting = copy.deepcopy(spec)
        preempting["serving"]["max_num_seqs"] = 4
        yield f"{name} (max_num_seqs 4)", preempting, path.parent
    replay = yaml.safe_load((REPO / "examples" / "mooncake-replay.yaml").read_text())
    replay["workload"]["trace"].update(path=str(trace), time_scale=1.0)
    for size in ("256GiB", "4TiB"):
        whole = copy.deepcopy(replay)
        whole["lmcache"]["ddr"]["size"] = size
        yield f"{trace.name} (ddr {size})", whole, REPO / "examples"
    chat = yaml.safe_load((REPO / "examples" / "chat-llama2-13b.yaml").read_text())
    chat["workload"]["requests"] = 5000
    yield "examples/chat-llama2-13b.yaml (5,000 requests)", chat, REPO / "examples"


def fingerprint(spec: dict, base_dir: Path) -> str:
    from kvplan.errors import SpecError
    from kvplan.resolve import resolve
    from kvplan.sim.run import run
    from kvplan.spec import from_mapping

    try:
        result = run(resolve(from_mapping(spec, base_dir=base_dir)))
    except SpecError as e:                       # a docs example that shows a refusal: the refusal is its result
        return "refused: " + hashlib.sha256(str(e).encode()).hexdigest()[:16]
    digest = hashlib.sha256(json.dumps(result.model_dump(mode="json", exclude={"per_request"}),
                                       sort_keys=True).encode())
    table = result.per_request
    for column in type(table).model_fields:
        digest.update(getattr(table, column).tobytes())
    return f"{digest.hexdigest()[:16]} ({len(table)} requests)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=TRACE, help="the Mooncake conversation trace")
    ap.add_argument("--out", type=Path, help="write the fingerprints here (JSON)")
    ap.add_argument("--compare", type=Path, help="fingerprints of another build (JSON from --out)")
    args = ap.parse_args()
    import kvplan

    print(f"kvplan from {Path(kvplan.__file__).parent}", flush=True)
    found = {}
    for name, spec, base_dir in cases(args.trace):
        found[name] = fingerprint(spec, base_dir)
        print(f"{found[name]}  {name}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(found, indent=1) + "\n")
    if args.compare:
        other = json.loads(args.compare.read_text())
        differ = [name for name in found.keys() | other.keys() if found.get(name) != other.get(name)]
        print(f"{len(found) - len(differ)} of {len(found)} identical to {args.compare}"
              + "".join(f"\n  differs: {name}" for name in sorted(differ)))
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
