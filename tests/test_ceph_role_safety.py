"""The ceph role treats every spec and inventory value as data, never as config text or arguments.

Each test is an attack that worked before the role was fixed, run through ansible-playbook on
this machine (no Ceph needed: files go under the test's directory, and `ceph` is a stand-in):

- cephadm's service specs are built as data and written by a YAML serializer, so a device path
  with a line break (`/dev/nvme9n1\\n    all: true`) stays one path and cannot give cephadm
  every disk;
- values that ceph.conf and the monitor's bootstrap interpolate are checked by packages.yml's
  first task, which refuses a line break (a second `[global] mon_host = ...`) and names the
  variable, before anything is installed or written;
- `ceph config set` gets each option's name and value as argv items of their own, so a value
  with a space (`1 --yes-i-really-mean-it`) is one value, never extra arguments;
- no command string in the role interpolates a spec value or an RGW key (those go as argv
  items, and the keys only through stdin);
- `kvplan deploy --check` refuses, as the deploy does, to change an external cluster's
  existing pool without ceph.pool.adopt.

The same behaviour against a real cluster (keys never in any process's argv, the adopt refusal)
is in tests/test_deploy_ceph.py.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from kvplan.deploy import cephdiff
from kvplan.deploy.stack import build
from kvplan.resolve import resolve

from conftest import REPO, spec
from test_roles_run import LOCALHOST, run_play

pytestmark = pytest.mark.stack

ROLE = REPO / "templates" / "roles" / "ceph"
CEPH_HOST = {"all": {"children": {"ceph": {"hosts": {"localhost": LOCALHOST["all"]["hosts"]["localhost"]}}}}}
HOSTILE_DEVICE = "/dev/nvme9n1\n    all: true"
HOSTILE_ADDRESS = "127.0.0.1\n[global]\nmon_host = [v2:10.6.6.6:3300]"


def ceph_vars(**changes) -> dict:
    """The ceph role's variables as kvplan renders them for examples/local.yaml (with changes),
    under the role's defaults."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    rendered = build(resolve(spec("local", **changes)), ["localhost"], ["127.0.0.1"]).ceph.model_dump()
    return defaults | rendered


def role_tasks(file: str) -> list[dict]:
    return yaml.safe_load((ROLE / "tasks" / file).read_text())


def item_failures(r) -> list[dict]:
    """Results of the loop items that failed."""
    return [e["event_data"]["res"] for e in r.events if e["event"] == "runner_item_on_failed"]


# ----------------------------------------------------------------------------------------------
# cephadm service specs


def write_service_specs(tmp_path: Path, **overrides) -> list[dict]:
    """cephadm_specs.yml run as it is, but writing under tmp_path; the YAML documents it wrote."""
    (task,) = role_tasks("cephadm_specs.yml")
    out = tmp_path / "kvplan-services.yml"
    task["ansible.builtin.copy"]["dest"] = str(out)
    task["vars"] |= ceph_vars(ceph__deploy="cephadm") | overrides
    run_play(tmp_path / "project", [], tasks=[task], inventory_=CEPH_HOST)
    return list(yaml.safe_load_all(out.read_text()))


def test_a_device_path_with_a_line_break_stays_one_path_in_the_cephadm_specs(tmp_path):
    (tmp_path / "project").mkdir()
    devices = [HOSTILE_DEVICE, "/dev/nvme1n1"]
    osd, rgw = write_service_specs(tmp_path, ceph_osd_devices=devices)
    assert osd["service_type"] == "osd" and rgw["service_type"] == "rgw"
    assert osd["spec"]["data_devices"] == {"paths": devices}, "exactly the devices given, each one string"
    assert "all" not in osd["spec"]["data_devices"] and "all" not in osd["spec"]
    assert osd["placement"] == {"label": "osd"} and osd["spec"]["crush_device_class"] == "ssd"
    assert rgw["service_id"] == "kvplan" and rgw["spec"] == {"rgw_frontend_port": 7480}


def test_without_devices_the_cephadm_osd_spec_takes_every_empty_disk(tmp_path):
    (tmp_path / "project").mkdir()
    osd, _ = write_service_specs(tmp_path, ceph_osd_devices=[])
    assert osd["spec"]["data_devices"] == {"all": True}


# ----------------------------------------------------------------------------------------------
# ceph.conf values


CONF_CHECK = "Values for ceph.conf are single-line and cannot open a section, a key or a comment"


def check_conf_values(tmp_path: Path, succeed: bool, **overrides):
    """packages.yml's first task, alone, with the rendered variables and these overrides."""
    (task,) = [t for t in role_tasks("packages.yml") if t["name"] == CONF_CHECK]
    (tmp_path / "project").mkdir(exist_ok=True)
    return run_play(tmp_path / "project", [], tasks=[task | {"vars": ceph_vars() | overrides}], succeed=succeed,
                    inventory_=CEPH_HOST)


def test_the_ceph_conf_check_comes_before_anything_is_installed_or_written():
    assert role_tasks("packages.yml")[0]["name"] == CONF_CHECK


def test_the_rendered_values_pass_the_ceph_conf_check(tmp_path):
    check_conf_values(tmp_path, succeed=True)


def test_an_address_with_a_line_break_cannot_add_a_global_section_to_ceph_conf(tmp_path):
    r = check_conf_values(tmp_path, succeed=False, ceph_address=HOSTILE_ADDRESS)
    messages = [f["msg"] for f in item_failures(r)]
    assert any(m.startswith("ceph_address = ") and "cannot be written into ceph.conf" in m for m in messages), messages
    # ceph_public_network defaults to ceph_address/32, so it is refused too; nothing else is.
    assert {m.split(" = ")[0] for m in messages} == {"ceph_address", "ceph_public_network"}


def test_an_ipv6_address_is_refused_by_the_ipv4_cluster_rather_than_written_unbracketed(tmp_path):
    # ceph.conf's mon_host would read '[v2:::1:3300,...]' and RGW's endpoint '::1:7480'; the cluster binds IPv4 only
    r = check_conf_values(tmp_path, succeed=False, ceph_address="fd00::10")
    messages = [f["msg"] for f in item_failures(r)]
    assert [m.split(" = ")[0] for m in messages] == ["ceph_address"], messages
    assert "must be an IPv4 address or host name" in messages[0], messages


def test_a_device_with_a_line_break_cannot_add_a_key_to_ceph_conf(tmp_path):
    r = check_conf_values(tmp_path, succeed=False, ceph_osd_devices=["/dev/sdb", "/dev/sdc\nosd_data = /etc"])
    assert [f["msg"].split(" = ")[0] for f in item_failures(r)] == ["ceph_osd_devices"]


# ----------------------------------------------------------------------------------------------
# ceph config set


STAND_IN_CEPH = '''#!{python}
"""Stand-in `ceph`: records its argv as a JSON line, answers `config dump -f json` with [] and `config help NAME -f json`
as Ceph does for an option a daemon takes at run time."""
import json, sys
with open({record!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:] == ["config", "dump", "-f", "json"]:
    print("[]")
if sys.argv[1:3] == ["config", "help"]:
    print(json.dumps({{"name": sys.argv[3], "can_update_at_runtime": True, "flags": ["runtime"]}}))
'''


def test_an_option_value_with_a_space_reaches_ceph_as_one_argument(tmp_path):
    record, bin_dir = tmp_path / "argv.jsonl", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ceph").write_text(STAND_IN_CEPH.format(python=sys.executable, record=str(record)))
    (bin_dir / "ceph").chmod(0o755)
    (tmp_path / "project").mkdir()
    # external: the rgw_dns_name change notifies a handler that only prints (no radosgw restart).
    variables = ceph_vars(ceph__deploy="external", ceph__options={"osd_memory_target": "1 --yes-i-really-mean-it"})
    run_play(tmp_path / "project", [], path=[bin_dir], tasks=[
        {"name": "Options", "ansible.builtin.include_role": {"name": "ceph", "tasks_from": "options"}, "vars": variables}])
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls == [["config", "dump", "-f", "json"],
                     ["config", "set", "global", "osd_memory_target", "1 --yes-i-really-mean-it"],
                     ["config", "help", "osd_memory_target", "-f", "json"],
                     ["config", "set", "client.rgw", "rgw_dns_name", "rgw.kvplan.local"]]


# ----------------------------------------------------------------------------------------------
# every command of the role


SPEC_VARIABLES = re.compile(r"\b(ceph_pool_\w+|ceph_options|ceph_crush_rule|ceph_device_class|ceph_failure_domain|"
                            r"ceph_osd_devices|ceph_rgw_(?:dns_name|bucket|user|region|address))\b")
KEYS = re.compile(r"\bceph_rgw_(access|secret)_key\b")


def command_tasks():
    for path in sorted((ROLE / "tasks").glob("*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            for module in ("ansible.builtin.command", "ansible.builtin.shell"):
                if module in task:
                    args = task[module]
                    yield path.name, task["name"], module, args if isinstance(args, str) else args.get("cmd", ""), \
                        (args.get("argv") if isinstance(args, dict) else None)


def test_no_command_string_of_the_role_interpolates_a_spec_value():
    offenders = []
    for file, name, module, cmd, _ in command_tasks():
        templated = " ".join(re.findall(r"{{(.*?)}}", cmd or "", re.S))
        found = set(SPEC_VARIABLES.findall(templated))
        if found:
            offenders.append(f"{file}: {name}: {sorted(found)}")
    assert not offenders, "spec values go as argv items:\n" + "\n".join(offenders)


def test_the_rgw_keys_are_in_no_command_line():
    for file, name, _, cmd, argv in command_tasks():
        assert not KEYS.search(json.dumps([cmd, argv])), f"{file}: {name} puts an RGW key on a command line"
    put = next(t for t in role_tasks("rgw.yml") if t["name"] == "Give the S3 user kvplan's key, through stdin")
    assert KEYS.search(json.dumps(put["vars"])) and "ceph_rgw_keys" in put["ansible.builtin.command"]["stdin"]
    assert put["no_log"] is True


# ----------------------------------------------------------------------------------------------
# kvplan deploy --check, against an external cluster's pool


def pool_state(**pool) -> dict[str, dict]:
    """`State:` task results of a cluster whose kvcache pool has these settings."""
    live = {"pool_name": "kvcache", "size": 1, "min_size": 1, "pg_num": 8, "pg_autoscale_mode": "off", "crush_rule": 1,
            "application_metadata": {"rgw": {}}} | pool
    rules = [{"rule_id": 0, "rule_name": "replicated_rule"}, {"rule_id": 1, "rule_name": "kvplan-ssd-osd"}]
    return {"State: pools": {"rc": 0, "stdout": json.dumps([live])},
            "State: crush rules": {"rc": 0, "stdout": json.dumps(rules)},
            "State: config": {"rc": 0, "stdout": "[]"}}


def wanted(**changes):
    return build(resolve(spec("local", **changes)), ["localhost"], ["127.0.0.1"]).ceph


def test_check_says_a_deploy_stops_at_an_external_pool_that_differs_without_adopt():
    changes = cephdiff.diff(wanted(ceph__deploy="external", ceph__pool__size=2), pool_state(crush_rule=0))
    assert [str(c) for c in changes] == [
        "pool kvcache: size 1, crush_rule replicated_rule -> size 2, crush_rule kvplan-ssd-osd (" + cephdiff.ADOPT_REFUSAL + ")"]
    assert "ceph.pool.adopt" in cephdiff.ADOPT_REFUSAL


def test_check_lists_the_pool_changes_of_an_external_pool_with_adopt():
    changes = cephdiff.diff(wanted(ceph__deploy="external", ceph__pool__size=2, ceph__pool__adopt=True), pool_state())
    assert "pool kvcache size: 1 -> 2" in [str(c) for c in changes]


def test_check_lists_pool_changes_as_before_where_kvplan_built_the_cluster():
    changes = [str(c) for c in cephdiff.diff(wanted(ceph__pool__size=2), pool_state(pg_autoscale_mode="on"))]
    assert changes[:2] == ["pool kvcache size: 1 -> 2", "pool kvcache pg_autoscale_mode: on -> off"]


def test_an_external_pool_that_matches_the_spec_needs_no_adopt():
    changes = cephdiff.diff(wanted(ceph__deploy="external"), pool_state())
    assert not [c for c in changes if c.what.startswith("pool")]
