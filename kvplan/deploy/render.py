"""render(spec, inventory, out): an ansible-runner private_data_dir for one spec.

Layout (ansible-runner's, docs/deploy.md):

    inventory/hosts.yml              the user's inventory, copied
    project/site.yml                 one play per component, tagged ceph, lmcache, vllm, monitoring
    project/ceph-state.yml           read-only facts for `kvplan deploy --check`
    project/down.yml                 `kvplan deploy --down`: stops every component, reverse order
    project/ansible.cfg
    project/group_vars/all/<role>.yml  role variables from kvplan.deploy.stack
    project/group_vars/all/secrets.yml RGW keys
    project/host_vars/<gpu host>.yml   the host's vLLM instances
    project/roles/                   templates/roles, copied as they are (Ansible renders those)
    env/settings                     runner settings
    kvplan.json                      what was rendered: spec, hash, kvplan version, stack
    grafana/kvplan-dashboard.json    the Grafana dashboard, live beside predicted (kvplan.deploy.dashboard)
    .kvplan-render.json              the marker: every file above, with its sha256

kvplan's own Jinja templates live in templates/project and templates/env; every file kvplan
renders starts with a header naming the spec and its hash.

The output directory and how files are written there (owner-only; only a directory kvplan
provably rendered is ever replaced) are kvplan.deploy.output's.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Callable

import jinja2

from .. import __version__
from ..errors import Problem, SpecError
from ..resolve import Resolved
from ..resources import data_root
from ..spec.grammar import host_problem
from . import ansible_yaml, inventory as inventory_mod, output as output_mod, rerender
from .dashboard import Predicted, dashboard
from .secrets import Secrets
from .stack import Stack, build

MANIFEST = "kvplan.json"
DASHBOARD = "grafana/kvplan-dashboard.json"
"""The Grafana dashboard, to import by hand (the monitoring role also writes it on the monitoring host)."""
"""What was rendered (spec, hash, kvplan version, stack), for people and tools; it decides nothing."""
ROLES = ("ceph", "lmcache", "vllm", "router", "warmup", "monitoring", "daemon")


class Rendered:
    """A rendered private_data_dir."""

    def __init__(self, root: Path, stack: Stack, resolved: Resolved, changes: rerender.Changes | None = None):
        self.root, self.stack, self.resolved = root, stack, resolved
        self.changes = changes
        """What this render changed against an earlier one it replaced in the same directory (None: there was none)."""

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
        problems += [Problem(path, f"simulation-only: {why}", fix="remove the setting (and simulate_only) to deploy this spec")
                     for path, why in r.simulation_only]
        if not r.simulation_only:
            problems.append(Problem("simulate_only", "the spec is marked simulate_only, so render refuses it, but it sets "
                                    "nothing the real stack cannot honour", True, fix="remove simulate_only"))
    problems += _quantised_weights(r)
    if r.router == "llm_d":
        problems.append(Problem("serving.router", "llm-d's scheduler is the endpoint picker of a Kubernetes gateway (an "
                                "InferencePool); the Ansible deployment runs vllm-router, which has no weighted scorers",
                                "llm_d", fix="render --format production-stack, which writes llm-d's "
                                "EndpointPickerConfig beside the values, or choose a vllm-router policy"))
    if not r.model_path:
        problems.append(Problem("serving.model_path", f"{r.model.name} has no hf_id in the catalog, so vLLM would not know "
                                "what to serve", None, fix="set serving.model_path to a Hugging Face id or a local directory"))
    problems += inventory_mod.required(r, inv)
    if r.ceph is not None and r.ceph.access == "s3" and inv.hosts("ceph"):
        address = r.ceph.rgw_address or inv.hosts("ceph")[0].address
        try:
            ipaddress.ip_address(address)
            if host_problem(address):             # ipaddress takes any scope id; the /etc/hosts line takes none of those
                raise ValueError(address)
        except ValueError:
            problems.append(Problem("ceph.rgw.address", "GPU nodes map the bucket's virtual host name to RGW in /etc/hosts, "
                                    "which needs an IP address", address, "an IPv4 or IPv6 address",
                                    "set ceph.rgw.address, or give the first ceph host an ansible_host IP"))
    if problems:
        raise SpecError(problems)


def _quantised_weights(r: Resolved) -> list[Problem]:
    """A simulation of fp8 or int4 weights deploys only with a checkpoint that vLLM loads as such."""
    if r.weights_dtype not in ("fp8", "int4"):
        return []
    if r.weights_dtype == r.model.weights_dtype and r.quantization is None and r.model_path in (None, r.model.hf_id):
        return []                  # released quantised: vLLM reads the method from the checkpoint's config
    methods = {"fp8": "fp8 (vLLM quantises the 16-bit checkpoint as it loads it)",
               "int4": "awq or gptq, with serving.model_path an AWQ or GPTQ checkpoint of the model"}[r.weights_dtype]
    if r.quantization is None:
        return [Problem("serving.quantization", f"serving.weights_dtype is {r.weights_dtype}, but nothing says how vLLM gets "
                        f"{r.weights_dtype} weights: it would serve {r.model_path or 'the checkpoint'} as released", None,
                        fix=f"set serving.quantization: {methods}")]
    if r.quantization != "fp8" and r.model_path is not None and r.model_path == r.model.hf_id:
        return [Problem("serving.model_path", f"serving.quantization: {r.quantization} needs a checkpoint quantised that "
                        f"way, and {r.model_path} is the catalog's release of {r.model.name}", r.model_path,
                        fix=f"set serving.model_path to a {r.quantization} checkpoint of {r.model.name} (a Hugging Face id "
                            "or a local directory)")]
    return []


def render(r: Resolved, inv: inventory_mod.Inventory, out: Path,
           secrets: Secrets | Callable[[], Secrets], predicted: Predicted | None = None) -> Rendered:
    """Write the private_data_dir; `out` must be new, empty, or an earlier kvplan render.

    `secrets` may be a callable (load_or_create): it is called only once the spec, the inventory
    and `out` have been accepted, so a refused render leaves no keys behind. `predicted`: the
    simulator's figures the Grafana dashboard draws beside the live ones."""
    check_deployable(r, inv)
    out = Path(out)
    earlier = output_mod.claim(out)
    before = rerender.read(out, earlier, output_mod.marker(out))
    keys = secrets() if callable(secrets) else secrets
    output_mod.clear(out, earlier)
    output = output_mod.Output(out)
    try:
        stack = _write(r, inv, keys, output, predicted)
    except BaseException:
        output.discard()
        raise
    if before is None:
        return Rendered(out, stack, r)
    written = {rel: (out / rel).read_bytes() for rel in output.files}
    return Rendered(out, stack, r, rerender.compare(before, written, r.spec_hash, __version__))


def _write(r: Resolved, inv: inventory_mod.Inventory, secrets: Secrets, output: output_mod.Output,
           predicted: Predicted | None) -> Stack:
    gpu = inv.hosts("gpu")
    stack = build(r, [h.name for h in gpu], [h.address for h in inv.hosts("ceph")], [h.address for h in gpu])
    if stack.monitoring is not None:
        board = dashboard(r, stack, predicted)
        stack = stack.model_copy(update={"monitoring": stack.monitoring.model_copy(update={"monitoring_dashboard": board})})
        output.write(DASHBOARD, json.dumps(board, indent=2) + "\n")
    header = (f"# Rendered by kvplan {__version__} from spec '{r.name}' (sha256 {r.spec_hash}).\n"
              "# Do not edit: change the spec and render again.\n")
    env = _env()

    def template(name: str, rel: str, **ctx) -> None:
        output.write(rel, env.get_template(name).render(header=header, r=r, stack=stack, **ctx))

    output.write("inventory/hosts.yml", header + Path(inv.path).read_text())
    template("project/site.yml.j2", "project/site.yml")
    template("project/ceph-state.yml.j2", "project/ceph-state.yml")
    template("project/down.yml.j2", "project/down.yml")
    template("project/ansible.cfg.j2", "project/ansible.cfg")
    template("env/settings.j2", "env/settings")
    for role in ("ceph", "lmcache", "vllm", "router", "warmup", "monitoring"):
        values = getattr(stack, role)
        if values is not None:
            template("project/role_vars.yml.j2", f"project/group_vars/all/{role}.yml", role=role,
                     values=values.model_dump())
    output.write("project/group_vars/all/secrets.yml", header + ansible_yaml.dump(secrets.model_dump()) + "\n")
    for host, instances in stack.instances.items():
        values = {"vllm_instances": instances} if stack.pools is None else stack.pools[host]
        template("project/role_vars.yml.j2", f"project/host_vars/{host}.yml", role="vllm (this host's instances)",
                 values=values)
    output.copy(data_root() / "templates" / "roles", "project/roles")
    manifest = {"kvplan": __version__, "spec": r.name, "spec_hash": r.spec_hash, "inventory": inv.path,
                "stack": stack.model_dump()}
    output.write(MANIFEST, json.dumps(manifest, indent=2) + "\n")
    output.seal(kvplan=__version__, spec=r.name, spec_hash=r.spec_hash)
    return stack
