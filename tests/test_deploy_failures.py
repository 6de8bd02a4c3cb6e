"""How a deploy fails: the host or task is named, with its message and where the full log is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from kvplan.deploy import inventory as inventory_mod
from kvplan.deploy import runner
from kvplan.deploy.render import render
from kvplan.deploy.secrets import Secrets
from kvplan.resolve import resolve
from kvplan.spec import load

pytestmark = pytest.mark.stack

KVPLAN = str(Path(sys.executable).parent / "kvplan")


def test_an_unreachable_host_fails_the_deploy_naming_it(tmp_path):
    unreachable = {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_connection": "ssh",
                   "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no"}
    groups = {g: {"hosts": {"gpu-node-7": unreachable}} for g in ("gpu", "ceph", "monitoring")}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": groups}}))
    done = subprocess.run([KVPLAN, "deploy", "examples/local.yaml", "-i", str(inv), "--tags", "ceph",
                           "--state-dir", str(tmp_path / "state")], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "120"})
    assert done.returncode == 3, done.stdout + done.stderr
    assert "unreachable: gpu-node-7:" in done.stderr
    log = Path(done.stderr.split("full log: ")[1].split()[0])
    assert log.is_file() and "UNREACHABLE" in log.read_text()


def test_a_failed_task_reports_its_name_host_and_message(tmp_path):
    r = resolve(load(REPO / "examples" / "local.yaml"))
    keys = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")
    root = render(r, inventory_mod.load(REPO / "inventories" / "local"), tmp_path / "run", keys).root
    (root / "project" / "broken.yml").write_text(yaml.safe_dump([{
        "name": "A play that fails", "hosts": "gpu", "gather_facts": False,
        "tasks": [{"name": "Step that cannot work", "ansible.builtin.fail": {"msg": "disk /dev/nvme9 not found"}}]}]))
    result = runner.run(root, "broken.yml", ident="broken")
    assert not result.ok and result.rc == 2
    [failure] = result.failures
    assert (failure.host, failure.task, failure.message) == ("localhost", "Step that cannot work", "disk /dev/nvme9 not found")
    assert (result.artifacts / "stdout").is_file()
    assert result.hosts["localhost"]["failed"] == 1
