"""Each role declares, in meta/argument_specs.yml, every variable kvplan renders for it, with the
type kvplan gives it; Ansible then validates the rendered values before the role's first task."""

from __future__ import annotations

import types
import typing

import pytest
import yaml

from conftest import REPO
from kvplan.deploy.stack import CephVars, LMCacheVars, MonitoringVars, VllmVars, WarmupVars
from kvplan.deploy.vllm_command import RouterVars

ROLES = {"ceph": CephVars, "lmcache": LMCacheVars, "vllm": VllmVars, "router": RouterVars, "warmup": WarmupVars, "monitoring": MonitoringVars}
ANSIBLE_TYPE = {int: "int", str: "str", bool: "bool", float: "float", list: "list", dict: "dict"}


def ansible_type(annotation) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return ansible_type(args[0])
    return ANSIBLE_TYPE.get(typing.get_origin(annotation) or annotation, "raw")


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_declare_every_rendered_variable_with_its_type(role):
    spec = yaml.safe_load((REPO / "templates" / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    for name, field in ROLES[role].model_fields.items():
        assert name in options, f"{role}: {name} is rendered but not declared"
        assert options[name]["type"] in (ansible_type(field.annotation), "raw"), f"{role}: {name}"
    assert all(name.startswith(f"{role}_") for name in options if not name.startswith("ceph_rgw_")), \
        f"{role}: role variables are prefixed with the role name"
