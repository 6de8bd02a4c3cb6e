"""An Ansible inventory as kvplan reads it: which hosts are in the groups the spec needs.

Groups (inventories/README.md):
- `gpu`: the serving nodes, exactly as many as the spec needs (serving.instances over the node
  size); each runs its vLLM instances and, with LMCache, the node's LMCache server or config.
- `ceph`: the Ceph hosts when the spec has a ceph section: the ceph.hosts hosts of deploy:
  packages (a monitor and the OSDs on each, the manager and RGW on the first) or of deploy:
  cephadm (the first bootstraps), or for deploy: external one admin host with the `ceph` CLI
  and an admin keyring.
- `monitoring`: the host that runs Prometheus.

kvplan reads YAML inventories (a hosts.yml file, or a directory holding one) and checks the groups
before Ansible starts, so a missing group is an error naming it rather than a play that silently
matches no host. Host names and their `ansible_host` addresses reach rendered files (host_vars
file names, Prometheus targets, RGW's address in /etc/hosts, the router play's `hosts:`), so each
must be a host name or an IP address (kvplan/spec/grammar.py); a host's name carries no IPv6 scope
id (Ansible's host patterns cannot name one: a link-local address with its interface goes in
ansible_host).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import Problem, SpecError
from ..resolve import Resolved
from ..spec import bounds
from ..spec.base import SpecModel
from ..spec.grammar import HOST_FORMS, host_problem

INVENTORY_FILES = ("hosts.yml", "hosts.yaml", "inventory.yml", "inventory.yaml")


class Host(SpecModel):
    name: str
    vars: dict[str, Any] = {}

    @property
    def address(self) -> str:
        """Where other hosts reach it: ansible_host when set, else its name."""
        return str(self.vars.get("ansible_host", self.name))


class Inventory(SpecModel):
    """Hosts by group, from a YAML inventory."""

    path: str
    """The inventory file."""
    groups: dict[str, list[Host]]

    def hosts(self, group: str) -> list[Host]:
        return self.groups.get(group, [])


def load(path: str | Path) -> Inventory:
    """Read a YAML inventory file, or the hosts.yml in a directory; errors name the file and the fix."""
    p = Path(path)
    if p.is_dir():
        found = next((p / n for n in INVENTORY_FILES if (p / n).is_file()), None)
        if found is None:
            raise SpecError([Problem("inventory", f"{p} holds no {' or '.join(INVENTORY_FILES[:2])}", str(p),
                                     fix="point -i at a YAML inventory (see inventories/local/hosts.yml)")])
        p = found
    if not p.is_file():
        raise SpecError([Problem("inventory", "no such file or directory", str(p), fix="check the -i path")])
    try:
        bounds.check_size(p.stat().st_size)
        data = bounds.load(p.read_text())
    except SpecError as exc:
        raise SpecError([Problem("inventory", f"{p}: {q.message}", str(p), fix=q.fix) for q in exc.problems]) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecError([Problem("inventory", f"{p} is not YAML ({exc.__class__.__name__})", str(p),
                                 fix="kvplan reads YAML inventories; convert an INI one with "
                                     "`ansible-inventory -i hosts.ini --list -y > hosts.yml`")]) from None
    if not isinstance(data, dict):
        raise SpecError([Problem("inventory", f"{p} must be a YAML mapping of groups", str(p),
                                 fix="start it with `all:` (see inventories/local/hosts.yml)")])
    groups: dict[str, dict[str, Host]] = {}
    _walk("all", data.get("all", data), {}, groups, str(p))
    return Inventory(path=str(p), groups={g: list(hosts.values()) for g, hosts in groups.items()})


def _walk(name: str, node: Any, inherited: dict, groups: dict[str, dict[str, Host]], path: str) -> dict[str, Host]:
    """Collect a group's hosts, its children's included (Ansible's YAML inventory shape)."""
    node = node or {}
    if not isinstance(node, dict):
        raise SpecError([Problem(f"inventory.{name}", "a group must be a mapping with hosts, vars or children", node,
                                 fix=f"see {path} and inventories/example-cluster/hosts.yml")])
    def mapping(value: Any, where: str, what: str) -> dict:
        if not isinstance(value or {}, dict):
            raise SpecError([Problem(where, f"{what} must be a mapping", value,
                                     fix=f"see {path} and inventories/example-cluster/hosts.yml")])
        return value or {}

    group_vars = {**inherited, **mapping(node.get("vars"), f"inventory.{name}.vars", "a group's vars")}
    members = groups.setdefault(name, {})
    for host, host_vars in mapping(node.get("hosts"), f"inventory.{name}.hosts", "a group's hosts").items():
        merged = {**group_vars, **mapping(host_vars, f"inventory.{name}.{host}", "a host's vars")}
        for field, value in (("", host), (".ansible_host", merged.get("ansible_host", host))):
            if not isinstance(value, str) or host_problem(value):
                why = host_problem(value) if isinstance(value, str) else "is not text"
                raise SpecError([Problem(f"inventory.{name}.{host}{field}", f"must be a host name or IP address: it {why}",
                                         value, HOST_FORMS,
                                         f"name the host in {path} by its DNS name or IP address (or set ansible_host)")])
        if "%" in host:
            raise SpecError([Problem(f"inventory.{name}.{host}", "a host name cannot carry a scope id: Ansible's host "
                                     "patterns (a play's hosts:) cannot name it", host, "a DNS name or an IP address "
                                     "without '%'", f"name the host in {path} without it and set its ansible_host "
                                     f"to {host}")])
        members[host] = Host(name=host, vars=merged)
    for child, child_node in mapping(node.get("children"), f"inventory.{name}.children", "a group's children").items():
        members.update(_walk(child, child_node, group_vars, groups, path))
    return members


def required(r: Resolved, inv: Inventory) -> list[Problem]:
    """The groups this spec needs, with host counts; empty when the inventory fits."""
    problems = []

    def need(group: str, count: int | None, why: str) -> None:
        hosts = inv.hosts(group)
        if not hosts:
            problems.append(Problem(f"inventory.{group}", f"group missing or empty: {why}", None,
                                    f"{count or 'at least 1'} host(s)", f"add a `{group}` group to {inv.path}"))
        elif count is not None and len(hosts) != count:
            problems.append(Problem(f"inventory.{group}", f"has {len(hosts)} hosts but {why}", [h.name for h in hosts],
                                    f"{count} host(s)", f"list exactly {count} host(s) under `{group}`"))

    d = r.disaggregation
    if d is None:
        placed = f"{r.instances} instance(s) of TP {r.tensor_parallel} on {r.nodes} node(s)"
    else:                   # the prefill pool on the first hosts, the decode pool on the next (kvplan.deploy.disagg)
        placed = (f"{d.prefill.instances} prefill instance(s) of TP {d.prefill.tensor_parallel} on {d.prefill.nodes} "
                  f"node(s), then {d.decode.instances} decode instance(s) of TP {d.decode.tensor_parallel} on "
                  f"{d.decode.nodes} more")
    need("gpu", r.nodes, f"the spec places {placed} of {r.gpus_per_node} accelerators")
    if r.ceph is not None:
        if r.ceph.deploy == "packages":
            need("ceph", r.ceph.hosts, f"ceph.hosts is {r.ceph.hosts} (deploy: packages: a monitor and "
                                       f"{r.ceph.osds // r.ceph.hosts} OSD(s) on each, the manager and RGW on the first)")
        elif r.ceph.deploy == "cephadm":
            need("ceph", r.ceph.hosts, f"ceph.hosts is {r.ceph.hosts}")
        else:
            need("ceph", None, "deploy: external needs an admin host with the ceph CLI and admin keyring")
    need("monitoring", None, "Prometheus runs there")
    return problems
