"""`kvplan deploy examples/local.yaml -i inventories/local --tags ceph`, for real.

A single-node Ceph from Debian's packages on loopback (two file-backed BlueStore OSDs), the
kvcache pool, RGW with its DNS name, the S3 user, the bucket and its lifecycle rule — checked
with the real `ceph` and `radosgw-admin` commands and with an S3 client speaking to
<bucket>.<dns name> the way LMCache does. While the first deploy runs, every process's command
line is sampled: the RGW keys are never on one. A second deploy changes nothing; `--check` with
a different pool size names the change and leaves the cluster alone. Deployed as an external
cluster, a spec whose pool differs from the live one stops the deploy (and `--check` says it
would) unless ceph.pool.adopt is set. The cluster is built from nothing and torn down by pid at
the end.

These tests need Ceph's packages (./install.sh test installs them) and root. Without them they
fail — never skip — so CI cannot go green without exercising a real cluster.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

import ceph_local
from conftest import REPO, example_data, with_changes

pytestmark = pytest.mark.stack

KVPLAN = str(Path(sys.executable).parent / "kvplan")
INVENTORY = str(REPO / "inventories" / "local")


def kvplan(*args: str, state: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run([KVPLAN, *args, "--state-dir", str(state)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def last_stats(state: Path, ident: str = "apply") -> dict:
    """ansible-playbook's final per-host counts from the newest run directory."""
    run = sorted((state / "runs").iterdir())[-1]
    events = sorted((run / "artifacts" / ident / "job_events").glob("*.json"), key=lambda p: int(p.name.split("-")[0]))
    stats = json.loads(events[-1].read_text())
    assert stats["event"] == "playbook_on_stats", stats["event"]
    return stats["event_data"]


class Cluster(NamedTuple):
    state: Path
    """kvplan's --state-dir: runs and the generated keys."""
    first: subprocess.CompletedProcess
    """The first deploy."""
    argv: ceph_local.ArgvWatch
    """Every command line seen on this machine while the first deploy ran."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = ceph_local.missing_packages()
    if missing or os.geteuid() != 0:
        pytest.fail(f"a real Ceph is needed: missing {', '.join(missing) or 'nothing'}, root: {os.geteuid() == 0}. "
                    "Run ./install.sh test as root, which installs Debian's ceph packages.")
    state = tmp_path_factory.mktemp("kvplan-state")
    ceph_local.wipe()
    try:
        with ceph_local.ArgvWatch() as argv:
            first = kvplan("deploy", "examples/local.yaml", "-i", INVENTORY, "--tags", "ceph", state=state)
        assert first.returncode == 0, f"first deploy failed:\n{first.stdout}\n{first.stderr}"
        yield Cluster(state, first, argv)
    finally:
        ceph_local.wipe()


def pool_size(name: str = "kvcache") -> int:
    return json.loads(ceph_local.ceph("osd", "pool", "get", name, "size", "-f", "json"))["size"]


def pool_id(name: str = "kvcache") -> int:
    pools = json.loads(ceph_local.ceph("osd", "pool", "ls", "detail", "-f", "json"))
    return next(p["pool_id"] for p in pools if p["pool_name"] == name)


def external_spec(tmp_path: Path, **changes) -> str:
    """examples/local.yaml as a spec for the same cluster reached as an external one, with changes."""
    path = tmp_path / "local-external.yaml"
    path.write_text(yaml.safe_dump(with_changes(example_data("local"), ceph__deploy="external", **changes)))
    return str(path)


def test_first_deploy_builds_the_cluster_the_spec_describes(cluster):
    state = cluster.state
    assert last_stats(state)["changed"], "a deploy onto nothing must change something"
    spec = example_data("local")
    pool = spec["ceph"]["pool"]
    assert json.loads(ceph_local.ceph("osd", "stat", "-f", "json"))["num_up_osds"] == spec["ceph"]["osds_per_host"]
    for key in ("size", "min_size", "pg_num"):
        assert json.loads(ceph_local.ceph("osd", "pool", "get", pool["name"], key, "-f", "json"))[key] == pool[key]
    rule = json.loads(ceph_local.ceph("osd", "pool", "get", pool["name"], "crush_rule", "-f", "json"))["crush_rule"]
    assert rule == "kvplan-ssd-osd"
    assert "rgw" in json.loads(ceph_local.ceph("osd", "pool", "application", "get", pool["name"], "-f", "json"))
    assert ceph_local.ceph("config", "get", "client.rgw", "rgw_dns_name").strip() == spec["ceph"]["rgw"]["dns_name"]
    assert ceph_local.ceph("config", "get", "osd", "osd_memory_target").strip() == "939524096"


def test_the_bucket_keeps_lmcache_objects_in_the_kv_pool_and_expires_them(cluster):
    stats = json.loads(ceph_local.radosgw_admin("bucket", "stats", "--bucket=kvcache"))
    assert stats["placement_rule"] == "kvplan"
    assert stats["owner"] == "kvplan"
    lc = json.loads(ceph_local.radosgw_admin("lc", "get", "--bucket=kvcache"))
    rule = next(r["rule"] for r in lc["rule_map"] if r["id"] == "kvplan-ttl")
    assert rule["status"] == "Enabled" and rule["expiration"]["days"] == "1"   # lmcache.ceph.ttl: 24h


def test_an_s3_client_reaches_the_bucket_by_its_virtual_host_name(cluster):
    import boto3
    from botocore.config import Config

    keys = yaml.safe_load((cluster.state / "secrets" / "local.yml").read_text())
    s3 = boto3.client("s3", endpoint_url="http://rgw.kvplan.local:7480", region_name="default",
                      aws_access_key_id=keys["ceph_rgw_access_key"], aws_secret_access_key=keys["ceph_rgw_secret_key"],
                      config=Config(s3={"addressing_style": "virtual"}, signature_version="s3v4"))
    chunk = os.urandom(64 * 1024)
    s3.put_object(Bucket="kvcache", Key="model@1@0@abc@bfloat16", Body=chunk)
    assert s3.get_object(Bucket="kvcache", Key="model@1@0@abc@bfloat16")["Body"].read() == chunk
    objects = subprocess.run(["rados", "-p", "kvcache", "ls"], capture_output=True, text=True, check=True).stdout
    assert "model@1@0@abc@bfloat16" in objects, "the object should live in the spec's KV pool"


def test_keys_are_private_and_never_printed(cluster):
    state, first = cluster.state, cluster.first
    secrets_file = state / "secrets" / "local.yml"
    keys = yaml.safe_load(secrets_file.read_text())
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    run = sorted((state / "runs").iterdir())[0]
    assert stat.S_IMODE((run / "project" / "group_vars" / "all" / "secrets.yml").stat().st_mode) == 0o600
    log = (run / "artifacts" / "apply" / "stdout").read_text()
    for key in keys.values():
        assert key not in first.stdout + first.stderr
        assert key not in log


def test_the_rgw_keys_never_appear_on_any_command_line(cluster):
    keys = yaml.safe_load((cluster.state / "secrets" / "local.yml").read_text())
    watch = cluster.argv
    # The watch saw the short radosgw-admin commands that once carried the keys, so it would see a key there.
    assert watch.containing("radosgw-admin user create --uid=kvplan"), f"{watch.sweeps} sweeps missed the user's creation"
    assert watch.containing("radosgw-admin metadata put user:kvplan"), f"{watch.sweeps} sweeps missed the key's write"
    for name in ("ceph_rgw_access_key", "ceph_rgw_secret_key"):
        assert not watch.containing(keys[name]), f"{name} was on a command line"
    user = json.loads(ceph_local.radosgw_admin("user", "info", "--uid=kvplan"))
    assert [(k["access_key"], k["secret_key"]) for k in user["keys"]] == \
        [(keys["ceph_rgw_access_key"], keys["ceph_rgw_secret_key"])], "kvplan's key only (the random one is replaced)"


def test_a_second_deploy_changes_nothing(cluster):
    state = cluster.state
    again = kvplan("deploy", "examples/local.yaml", "-i", INVENTORY, "--tags", "ceph", state=state)
    assert again.returncode == 0, again.stdout + again.stderr
    assert last_stats(state)["changed"] == {}, again.stdout


def test_check_names_a_pool_size_change_and_leaves_the_cluster_alone(cluster, tmp_path):
    state = cluster.state
    changed = with_changes(example_data("local"), ceph__pool__size=2)
    spec_file = tmp_path / "local-size2.yaml"
    spec_file.write_text(yaml.safe_dump(changed))
    check = kvplan("deploy", str(spec_file), "-i", INVENTORY, "--tags", "ceph", "--check", state=state)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Ceph: 1 change(s) a deploy would make:" in check.stdout
    assert "pool kvcache size: 1 -> 2" in check.stdout
    assert pool_size() == 1


def test_an_external_clusters_pool_that_differs_is_left_alone_without_adopt(cluster, tmp_path):
    spec_file = external_spec(tmp_path, ceph__pool__size=2)
    check = kvplan("deploy", spec_file, "-i", INVENTORY, "--tags", "ceph", "--check", state=cluster.state)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Ceph: 1 change(s) a deploy would make:" in check.stdout
    assert "pool kvcache: size 1 -> size 2 (refused: " in check.stdout and "ceph.pool.adopt is false" in check.stdout

    deploy = kvplan("deploy", spec_file, "-i", INVENTORY, "--tags", "ceph", state=cluster.state)
    assert deploy.returncode == 3, deploy.stdout + deploy.stderr
    message = " ".join(deploy.stderr.split())   # rich wraps long lines
    assert "pool kvcache already exists in the external cluster and differs from the spec: size 1 -> 2." in message
    assert "ceph.pool.adopt: true" in message
    assert pool_size() == 1
    assert last_stats(cluster.state)["changed"] == {}, "the deploy stops before changing anything"


# Last: it changes the pool (and puts it back), which the tests above must not see.
def test_with_adopt_an_external_deploy_sets_the_existing_pool_to_the_spec(cluster, tmp_path):
    spec_file = external_spec(tmp_path, ceph__pool__size=2, ceph__pool__adopt=True)
    before = pool_id()
    try:
        deploy = kvplan("deploy", spec_file, "-i", INVENTORY, "--tags", "ceph", state=cluster.state)
        assert deploy.returncode == 0, deploy.stdout + deploy.stderr
        assert pool_size() == 2
        assert pool_id() == before, "the pool is changed, never recreated"
    finally:
        ceph_local.ceph("osd", "pool", "set", "kvcache", "size", "1", "--yes-i-really-mean-it")
