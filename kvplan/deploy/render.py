"""render(spec, inventory, out): an ansible-runner private_data_dir for one spec.

Layout (ansible-runner's, docs/deploy.md):

    inventory/hosts.yml              the user's inventory, copied
    project/site.yml                 one play per component, tagged ceph, lmcache, vllm, monitoring
    project/ceph-state.yml           read-only facts for `kvplan deploy --check`
    project/down.yml                 `kvplan deploy --down`: stops every component, reverse order
    project/ansible.cfg
    project/group_vars/all/<role>.yml  role variables from kvplan.deploy.stack
    project/group_vars/all/secrets.yml RGW keys, mode 0600
    project/host_vars/<gpu host>.yml   the host's vLLM instances
    project/roles/                   templates/roles, copied as they are (Ansible renders those)
    env/settings                     runner settings
    kvplan.json                      what was rendered: spec, hash, kvplan version, stack

kvplan's own Jinja templates live in templates/project and templates/env; every file kvplan
renders starts with a header naming the spec and its hash.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
from pathlib import Path

import jinja2

from .. import __version__
from ..errors import Problem, SpecError
from ..resolve import Resolved
from ..resources import data_root
from . import ansible_yaml, inventory as inventory_mod
from .secrets import Secrets, write_private
from .stack import Stack, build

MARKER = "kvplan.json"
ROLES = ("ceph", "lmcache", "vllm", "monitoring", "daemon")


class Rendered:
    """A rendered private_data_dir."""

    def __init__(self, root: Path, stack: Stack, resolved: Resolved):
        self.root, self.stack, self.resolved = root, stack, resolved

    @property
    def project(self) -> Path:
        return self.root / "project"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_root() / "templates")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["to_ansible_yaml"] = ansible_yaml.dump
    return env


def check_deployable(r: Resolved, inv: inventory_mod.Inventory) -> None:
    problems = []
    if r.simulate_only:
        problems.append(Problem("simulate_only", "the spec is marked simulate_only: it uses settings the real stack "
                                "cannot honour, so there is nothing faithful to deploy", True,
                                fix="remove simulate_only after `kvplan validate` passes without it"))
    if not r.model_path:
        problems.append(Problem("serving.model_path", f"{r.model.name} has no hf_id in the catalog, so vLLM would not know "
                                "what to serve", None, fix="set serving.model_path to a Hugging Face id or a local directory"))
    problems += inventory_mod.required(r, inv)
    if r.ceph is not None and r.ceph.access == "s3" and inv.hosts("ceph"):
        address = r.ceph.rgw_address or inv.hosts("ceph")[0].address
        try:
            ipaddress.ip_address(address)
        except ValueError:
            problems.append(Problem("ceph.rgw.address", "GPU nodes map the bucket's virtual host name to RGW in /etc/hosts, "
                                    "which needs an IP address", address, "an IPv4 or IPv6 address",
                                    "set ceph.rgw.address, or give the first ceph host an ansible_host IP"))
    if problems:
        raise SpecError(problems)


def render(r: Resolved, inv: inventory_mod.Inventory, out: Path, secrets: Secrets) -> Rendered:
    """Write the private_data_dir; `out` must be new, empty, or an earlier kvplan render."""
    check_deployable(r, inv)
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise SpecError([Problem("output", "exists, is not empty and is not a kvplan render; kvplan will not overwrite it",
                                 str(out), fix="choose a new directory with -o")])
    if out.exists():
        shutil.rmtree(out)
    gpu = inv.hosts("gpu")
    stack = build(r, [h.name for h in gpu], [h.address for h in inv.hosts("ceph")], [h.address for h in gpu])
    header = (f"# Rendered by kvplan {__version__} from spec '{r.name}' (sha256 {r.spec_hash}).\n"
              "# Do not edit: change the spec and render again.\n")
    env = _env()

    def write(rel: str, text: str, private: bool = False) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if private:
            write_private(path, text)
        else:
            path.write_text(text)

    def template(name: str, rel: str, **ctx) -> None:
        write(rel, env.get_template(name).render(header=header, r=r, stack=stack, **ctx))

    inventory_text = Path(inv.path).read_text()
    write("inventory/hosts.yml", header + inventory_text)
    template("project/site.yml.j2", "project/site.yml")
    template("project/ceph-state.yml.j2", "project/ceph-state.yml")
    template("project/down.yml.j2", "project/down.yml")
    template("project/ansible.cfg.j2", "project/ansible.cfg")
    template("env/settings.j2", "env/settings")
    for role in ("ceph", "lmcache", "vllm", "monitoring"):
        values = getattr(stack, role)
        if values is not None:
            template("project/role_vars.yml.j2", f"project/group_vars/all/{role}.yml", role=role,
                     values=values.model_dump())
    write("project/group_vars/all/secrets.yml", header + ansible_yaml.dump(secrets.model_dump()) + "\n", private=True)
    for host, instances in stack.instances.items():
        template("project/role_vars.yml.j2", f"project/host_vars/{host}.yml", role="vllm (this host's instances)",
                 values={"vllm_instances": instances})
    shutil.copytree(data_root() / "templates" / "roles", out / "project" / "roles")
    manifest = {"kvplan": __version__, "spec": r.name, "spec_hash": r.spec_hash, "inventory": inv.path,
                "stack": stack.model_dump()}
    write(MARKER, json.dumps(manifest, indent=2) + "\n")
    return Rendered(out, stack, r)
