"""The rendered Ansible project is production quality.

Every shipped example is rendered for the shipped inventory it names (inventories/local for
examples/local.yaml, ...) and the whole project/ (site.yml, the variables kvplan wrote, every
role) is linted with ansible-lint's `production` profile (FQCN,
role-prefixed variables, argument specs, explicit modes, changed_when, ...), offline, so that it
never tries to install collections. Findings are reported per area so that one role's findings do
not hide another's. ansible-playbook must also accept the playbook (--syntax-check).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.deploy import inventory
from kvplan.deploy.render import render
from kvplan.deploy.secrets import load_or_create
from kvplan.resolve import resolve
from kvplan.spec import load

from conftest import EXAMPLES, shipped_inventory

BIN = Path(sys.executable).parent
AREAS = ["roles/daemon", "roles/lmcache", "roles/vllm", "roles/router", "roles/warmup", "roles/monitoring", "roles/ceph",
         "playbook and variables"]


@pytest.fixture(scope="module", params=EXAMPLES, ids=lambda p: p.stem)
def project(request, tmp_path_factory) -> Path:
    r = resolve(load(request.param))
    tmp = tmp_path_factory.mktemp("lint")
    rendered = render(r, inventory.load(shipped_inventory(request.param)), tmp / "render",
                      load_or_create(tmp / "state", r.name))
    return rendered.project


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1"}


def _where(finding: dict) -> str:
    location = finding["location"]
    begin = location.get("lines", {}).get("begin") or location.get("positions", {}).get("begin", {})
    return f"{location['path']}:{begin['line'] if isinstance(begin, dict) else begin}"


def _describe(findings: list[dict]) -> str:
    return "\n".join(f"{_where(f)} {f['check_name']}: {f['description']}" for f in findings)


@pytest.fixture(scope="module")
def lint(project):
    """ansible-lint's exit status, its findings (JSON) and its report."""
    result = subprocess.run([str(BIN / "ansible-lint"), "--profile", "production", "--offline", "--nocolor", "-f", "json"],
                            cwd=project, env=_env(), capture_output=True, text=True)
    findings = json.loads(result.stdout or "[]")
    return result.returncode, findings, _describe(findings) + "\n" + result.stderr


def _area(path: str) -> str:
    return next((a for a in AREAS[:-1] if path == a or path.startswith(a + "/")), AREAS[-1])


def test_ansible_lint_production_profile_passes(lint):
    rc, _, report = lint
    assert rc == 0, report


@pytest.mark.parametrize("area", AREAS)
def test_no_lint_findings_in(lint, area):
    _, findings, _ = lint
    here = [f for f in findings if _area(f["location"]["path"]) == area]
    assert not here, _describe(here)


@pytest.mark.parametrize("playbook", ["site.yml", "down.yml"])
def test_ansible_playbook_accepts_the_playbook(project, playbook):
    result = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", "../inventory/hosts.yml", playbook],
                            cwd=project, env=_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
