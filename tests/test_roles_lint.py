"""The rendered Ansible project is production quality.

Every shipped example is rendered for the shipped inventory it names (inventories/local for
examples/local.yaml, ...) and the whole project/ (site.yml, the variables kvplan wrote, every
role) is linted with ansible-lint's `production` profile (FQCN,
role-prefixed variables, argument specs, explicit modes, changed_when, ...), offline, so that it
never tries to install collections. Findings are reported per area so that one role's findings do
not hide another's. ansible-playbook must also accept the playbook (--syntax-check).

The roles are copied into every project as they are (kvplan/deploy/render.py), and ansible-lint's
findings in a file do not depend on the project's other files: so each distinct roles/ tree (with
the ansible.cfg it is linted under) is linted once, with the first project that has it, and every
other project is linted without it (`--exclude roles`) and given those findings. Every file of
every project is still linted; ansible-lint's time is per file (one run over the five projects
together costs what five runs do), and a role tree linted five times was four fifths of it.
"""

from __future__ import annotations

import hashlib
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


ROLES_FINDINGS: dict[str, list[dict]] = {}
"""ansible-lint's findings in a roles/ tree, by what `_roles_key` makes of it: filled by the first project that has it."""


def _roles_key(project: Path) -> str:
    """The roles/ tree of `project`, every file by path and content, and the settings of its ansible.cfg (its comments,
    which name the spec, left out): two projects with the same key have the same findings in roles/."""
    digest = hashlib.sha256()
    for path in sorted(p for p in (project / "roles").rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(project)}\0".encode() + path.read_bytes() + b"\0")
    settings = [line for line in (project / "ansible.cfg").read_text().splitlines() if not line.startswith("#")]
    digest.update("\n".join(settings).encode())
    return digest.hexdigest()


def _in_roles(finding: dict) -> bool:
    return finding["location"]["path"].startswith("roles/")


@pytest.fixture(scope="module")
def lint(project):
    """ansible-lint's exit status, its findings (JSON) and its report, for the whole project; roles/ is linted by this
    project's run only if no earlier project had the same roles (the module docstring)."""
    key = _roles_key(project)
    known = ROLES_FINDINGS.get(key)
    result = subprocess.run([str(BIN / "ansible-lint"), "--profile", "production", "--offline", "--nocolor", "-f", "json",
                             *([] if known is None else ["--exclude", "roles"])],
                            cwd=project, env=_env(), capture_output=True, text=True)
    findings = json.loads(result.stdout or "[]")
    if known is None:
        ROLES_FINDINGS[key] = [f for f in findings if _in_roles(f)]
        return result.returncode, findings, _describe(findings) + "\n" + result.stderr
    assert not [f for f in findings if _in_roles(f)], "roles/ was excluded"
    returncode = result.returncode or (2 if known else 0)     # 2: ansible-lint's status when it has findings
    report = (_describe(findings) + "\n" + result.stderr + "\nroles/, linted with an earlier project with the same "
              "roles: " + (("\n" + _describe(known)) if known else "no findings"))
    return returncode, findings + known, report


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
