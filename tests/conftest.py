"""Shared fixtures: the shipped catalog, the shipped examples, and a way to vary a spec."""

from __future__ import annotations

import copy
import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

import kvplan
from kvplan.catalog import load_catalog
from kvplan.spec import from_mapping, read_yaml

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))

FROM_SOURCE = Path(kvplan.__file__).resolve().parent == REPO / "kvplan"
"""True when the tests import kvplan from this checkout (`PYTHONPATH=$PWD .venv/bin/pytest -m unit`, README.md
"Tests"), not from the installed wheel: an edit is seen at once, with no reinstall, and the simulator runs
interpreted. Every kvplan a test starts as a process then runs from the checkout too."""
if FROM_SOURCE:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])

# Every kvplan a test starts keeps its runs, keys and cache here, never in the user's directories.
os.environ["KVPLAN_STATE_DIR"] = tempfile.mkdtemp(prefix="kvplan-tests-state-")


LEVELS = ("unit", "stack", "cluster")


def pytest_collection_modifyitems(config, items):
    """A test without `stack` or `cluster` is a unit test. Run from the source tree, the tests of the installed
    build (`compiled`) are left out, and said to be; in CI that is an error, since CI tests what it installs."""
    for item in items:
        if not any(item.get_closest_marker(level) for level in LEVELS[1:]):
            item.add_marker(pytest.mark.unit)
    if not FROM_SOURCE:
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(f"CI imports kvplan from the checkout ({kvplan.__file__}), not from the installed "
                                "wheel: run `.venv/bin/pytest` without PYTHONPATH")
    left_out = [item for item in items if item.get_closest_marker("compiled")]
    if left_out:
        items[:] = [item for item in items if not item.get_closest_marker("compiled")]
        config.hook.pytest_deselected(items=left_out)


def pytest_report_header(config):
    where = "the source tree (interpreted; the compiled build's tests are left out)" if FROM_SOURCE else "the installed wheel"
    return f"kvplan from {where}: {Path(kvplan.__file__).parent}"


def source_module(relative: str, name: str):
    """The module at `relative` (a path under the repository) run from its source file, as `name`: beside the
    installed one, which is compiled (hatch_build.py), to hold the two together or to watch its calls."""
    spec = importlib.util.spec_from_file_location(name, REPO / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def catalog():
    return load_catalog()


def inventory_for(r, tmp: Path):
    """An inventory with exactly the hosts the resolved spec `r` needs, written under `tmp`."""
    import yaml

    from kvplan.deploy import inventory

    ceph_hosts = 0 if r.ceph is None else (1 if r.ceph.deploy == "external" else r.ceph.hosts)
    groups = {"gpu": {"hosts": {f"gpu-{i + 1}": {"ansible_host": f"10.0.2.{i + 1}"} for i in range(r.nodes)}},
              "monitoring": {"hosts": {"mon-1": {"ansible_host": "10.0.3.1"}}}}
    if ceph_hosts:
        groups["ceph"] = {"hosts": {f"ceph-{i + 1}": {"ansible_host": f"10.0.1.{i + 1}"} for i in range(ceph_hosts)}}
    path = tmp / f"hosts-{r.spec_hash[:12]}.yml"
    path.write_text(yaml.safe_dump({"all": {"children": groups}}))
    return inventory.load(path)


def flags(args: list[str]) -> dict[str, list[str]]:
    """--flag value pairs of a command line (a flag may repeat); bare flags map to ['']."""
    out: dict[str, list[str]] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
            out.setdefault(arg, []).append(value)
    return out


def shipped_inventory(example: Path) -> Path:
    """The inventory an example names in its header (`# Deploy: kvplan deploy ... -i inventories/NAME`)."""
    for line in example.read_text().splitlines():
        if line.startswith("# Deploy: kvplan deploy ") and " -i inventories/" in line:
            return REPO / line.split(" -i ", 1)[1].strip()
    raise AssertionError(f"{example.name} names no inventory (# Deploy: kvplan deploy {example.name} -i inventories/NAME)")


def example_data(name: str) -> dict:
    """An example spec as a plain mapping, ready to be changed by a test."""
    return read_yaml(REPO / "examples" / f"{name}.yaml")


def with_changes(data: dict, **changes: Any) -> dict:
    """A copy of `data` with dotted paths set (`lmcache__ddr__eviction="ARC"`); None deletes."""
    data = copy.deepcopy(data)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return data


def spec(example: str = "chat-llama2-13b", /, **changes: Any):
    """Load an example with changes applied (relative paths are read from examples/)."""
    return from_mapping(with_changes(example_data(example), **changes), base_dir=REPO / "examples")


def tokens_shared(a, b) -> int:
    """How many leading prompt tokens two requests (kvplan.sim.workload.Request) have in common, by their keys at one
    token per unit."""
    ka, kb = a.content.keys(1, a.prompt_tokens), b.content.keys(1, b.prompt_tokens)
    return next((i for i, (x, y) in enumerate(zip(ka, kb)) if x != y), min(len(ka), len(kb)))
