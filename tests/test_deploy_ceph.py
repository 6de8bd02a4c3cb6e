"""`kvplan deploy examples/local.yaml -i inventories/local --tags ceph`, for real.

A single-node Ceph from Debian's packages on loopback (two file-backed BlueStore OSDs), the
kvcache pool, RGW with its DNS name, the S3 user, the bucket and its lifecycle rule — checked
with the real `ceph` and `radosgw-admin` commands and with an S3 client speaking to
<bucket>.<dns name> the way LMCache does. A second deploy changes nothing; `--check` with a
different pool size names the change and leaves the cluster alone. The cluster is built from
nothing and torn down by pid at the end.

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

import pytest
import yaml

import ceph_local
from conftest import REPO, example_data, with_changes

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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = ceph_local.missing_packages()
    if missing or os.geteuid() != 0:
        pytest.fail(f"a real Ceph is needed: missing {', '.join(missing) or 'nothing'}, root: {os.geteuid() == 0}. "
                    "Run ./install.sh test as root, which installs Debian's ceph packages.")
    state = tmp_path_factory.mktemp("kvplan-state")
    ceph_local.wipe()
    try:
        first = kvplan("deploy", "examples/local.yaml", "-i", INVENTORY, "--tags", "ceph", state=state)
        assert first.returncode == 0, f"first deploy failed:\n{first.stdout}\n{first.stderr}"
        yield state, first
    finally:
        ceph_local.wipe()


def test_first_deploy_builds_the_cluster_the_spec_describes(cluster):
    state, first = cluster
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

    state, _ = cluster
    keys = yaml.safe_load((state / "secrets" / "local.yml").read_text())
    s3 = boto3.client("s3", endpoint_url="http://rgw.kvplan.local:7480", region_name="default",
                      aws_access_key_id=keys["ceph_rgw_access_key"], aws_secret_access_key=keys["ceph_rgw_secret_key"],
                      config=Config(s3={"addressing_style": "virtual"}, signature_version="s3v4"))
    chunk = os.urandom(64 * 1024)
    s3.put_object(Bucket="kvcache", Key="model@1@0@abc@bfloat16", Body=chunk)
    assert s3.get_object(Bucket="kvcache", Key="model@1@0@abc@bfloat16")["Body"].read() == chunk
    objects = subprocess.run(["rados", "-p", "kvcache", "ls"], capture_output=True, text=True, check=True).stdout
    assert "model@1@0@abc@bfloat16" in objects, "the object should live in the spec's KV pool"


def test_keys_are_private_and_never_printed(cluster):
    state, first = cluster
    secrets_file = state / "secrets" / "local.yml"
    keys = yaml.safe_load(secrets_file.read_text())
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    run = sorted((state / "runs").iterdir())[0]
    assert stat.S_IMODE((run / "project" / "group_vars" / "all" / "secrets.yml").stat().st_mode) == 0o600
    log = (run / "artifacts" / "apply" / "stdout").read_text()
    for key in keys.values():
        assert key not in first.stdout + first.stderr
        assert key not in log


def test_a_second_deploy_changes_nothing(cluster):
    state, _ = cluster
    again = kvplan("deploy", "examples/local.yaml", "-i", INVENTORY, "--tags", "ceph", state=state)
    assert again.returncode == 0, again.stdout + again.stderr
    assert last_stats(state)["changed"] == {}, again.stdout


def test_check_names_a_pool_size_change_and_leaves_the_cluster_alone(cluster, tmp_path):
    state, _ = cluster
    changed = with_changes(example_data("local"), ceph__pool__size=2)
    spec_file = tmp_path / "local-size2.yaml"
    spec_file.write_text(yaml.safe_dump(changed))
    check = kvplan("deploy", str(spec_file), "-i", INVENTORY, "--tags", "ceph", "--check", state=state)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Ceph: 1 change(s) a deploy would make:" in check.stdout
    assert "pool kvcache size: 1 -> 2" in check.stdout
    assert json.loads(ceph_local.ceph("osd", "pool", "get", "kvcache", "size", "-f", "json"))["size"] == 1
