"""The deploy path, attacked the way a hostile or careless spec, inventory or file layout would.

- A spec string never reaches Ansible as a template: where a field's meaning allows no braces
  (hosts, paths, devices, model ids, regions) `validate` refuses them; where free text is allowed
  (a Ceph option value) or a value was forged past validation, the rendered variable is `!unsafe`
  data, and the real ansible-playbook, templating every variable of the rendered project as a task
  does, prints the characters and runs nothing.
- A value cannot carry a line break into a config file (OSD devices, inventory addresses).
- The local-disk tier is never a system directory, and the lmcache role never changes the mode
  or owner of a directory it did not create.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import ansible_runner
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from conftest import REPO, example_data, spec, with_changes
from kvplan.deploy import ansible_yaml, inventory as inventory_mod
from kvplan.deploy.render import render
from kvplan.deploy.secrets import Secrets
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.spec import from_mapping

pytestmark = pytest.mark.stack

KEYS = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")
LOCAL = inventory_mod.load(REPO / "inventories" / "local")
BIN = Path(sys.executable).parent


def payload(mark: Path) -> str:
    """A template that, if Ansible ever evaluated it, would create `mark` on the controller."""
    return "{{ lookup('ansible.builtin.pipe', 'touch " + str(mark) + "; echo ran') }}"


def refused(data: dict) -> dict[str, str]:
    """The problems `validate` reports for this spec mapping, by field."""
    with pytest.raises(SpecError) as exc:
        from_mapping(data, base_dir=REPO / "examples")
    return {p.path: p.message for p in exc.value.problems}


# ----------------------------------------------------------------------------------------------
# Templates and line breaks in spec fields

TEMPLATE = "{{ lookup('ansible.builtin.pipe', 'id') }}"


@pytest.mark.parametrize("field, value", [
    ("serving__model_path", TEMPLATE),
    ("serving__model_path", "/var/lib/models/{{ x }}"),
    ("serving__host", TEMPLATE),
    ("serving__host", "127.0.0.1\n  extra: 1"),
    ("monitoring__metrics_address", TEMPLATE),
    ("ceph__rgw__region", TEMPLATE),
    ("ceph__rgw__address", "10.0.0.1 evil.example"),
    ("ceph__cephfs_mount", "/mnt/cephfs/{{ x }}"),
    ("lmcache__nvme__path", "/var/lib/lmcache/{{ x }}"),
    ("lmcache__nvme__path", "/var/lib/../../etc"),
    ("lmcache__nvme__path", "relative/dir"),
    # S1 (issue 49): ipaddress.ip_address takes any IPv6 scope id but '/' and '%', so these were hosts
    ("ceph__rgw__address", "::1%x\n203.0.113.66 huggingface.co pypi.org"),
    ("serving__host", "::1%x\nExecStartPre=/bin/touch /tmp/pwn"),
    ("serving__host", "127.0.0.1\n"),
    ("monitoring__metrics_address", "::1%$(id)"),
    ("monitoring__metrics_address", "fe80::1%{{ x }}"),
    ("ceph__rgw__address", "fe80::1%eth0 evil.example"),
    ("ceph__rgw__address", "10.0.0.1%eth0"),
    # every grammar matched with re's `$`, which also matches before a final line break
    ("lmcache__nvme__path", "/var/lib/lmcache/nvme\n"),
    ("serving__model_path", "meta-llama/Llama-3.1-8B\n"),
    ("ceph__rgw__region", "default\n"),
    ("ceph__options", {"osd_op_queue": "wpq\n"}),
])
def test_a_template_or_line_break_in_a_deployed_field_is_refused_at_validate(field, value):
    data = with_changes(example_data("local"), **{field: value})
    found = refused(data)
    assert any(path.startswith(field.replace("__", ".")) for path in found), found


def test_a_scope_id_is_taken_only_on_a_link_local_address_and_only_as_an_interface_name():
    ok = from_mapping(with_changes(example_data("local"), serving__host="fe80::1%eth0",
                                   monitoring__metrics_address="::1"), base_dir=REPO / "examples")
    assert ok.serving.host == "fe80::1%eth0"
    found = refused(with_changes(example_data("local"), serving__host="::1%lo"))
    assert "only a link-local IPv6 address needs" in found["serving.host"], found
    found = refused(with_changes(example_data("local"), serving__host="fe80::1%eth0'"))
    assert "not an interface name" in found["serving.host"], found


def test_an_osd_device_cannot_smuggle_yaml_or_ini_lines():
    for device in ("/dev/nvme9n1\n    all: true", "/dev/sdb\n[global]\nmon_host = 10.9.9.9", "/dev/../etc/passwd",
                   "/etc/passwd"):
        found = refused(with_changes(example_data("local"), ceph__osds_per_host=1, ceph__osd_devices=[device]))
        assert any(path.startswith("ceph.osd_devices") for path in found), (device, found)
    ok = from_mapping(with_changes(example_data("local"), ceph__osds_per_host=1,
                                   ceph__osd_devices=["/dev/disk/by-id/nvme-eui.0025388b91b1f2a4"]))
    assert ok.ceph.osd_devices == ["/dev/disk/by-id/nvme-eui.0025388b91b1f2a4"]


def test_a_ceph_option_is_a_plain_name_and_a_one_line_value():
    for options in ({"osd memory target": 1}, {"Osd_Memory": 1}, {"osd_memory_target": "1\nmon_host = x"},
                    {"osd_memory_target": "--yes-i-really-mean-it"}):
        found = refused(with_changes(example_data("local"), ceph__options=options))
        assert any(path.startswith("ceph.options") for path in found), (options, found)
    assert from_mapping(with_changes(example_data("local"), ceph__options={"osd_op_queue": "wpq", "debug_ms": -1}))


def test_an_inline_model_name_is_one_word():
    data = example_data("local")
    tiny = yaml.safe_load((REPO / "models" / "llm" / "kvplan-tiny-llama.yaml").read_text())
    tiny.pop("sources", None)
    found = refused(with_changes(data, model={**tiny, "name": "tiny " + TEMPLATE}))
    assert "model.name" in found, found


@pytest.mark.parametrize("host, host_vars", [
    ("localhost\n  evil", {}),
    ("../../etc/cron.d/x", {}),
    ("localhost", {"ansible_host": "127.0.0.1 rgw.evil"}),
    ("localhost", {"ansible_host": TEMPLATE}),
    # S1a (issue 49): a host Python's ipaddress takes, written raw into the router play's hosts:
    ("::1%{{lookup('ansible.builtin.pipe','touch PWN')}}", {}),
    ("localhost", {"ansible_host": "::1%x\n203.0.113.66 huggingface.co"}),
    ("localhost\n", {}),
    ("fe80::1%eth0", {}),                # a link-local address with its interface is an ansible_host, not a name
])
def test_an_inventory_host_is_a_host_name_or_address(tmp_path, host, host_vars):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu": {"hosts": {host: host_vars}}}}}))
    with pytest.raises(SpecError) as exc:
        inventory_mod.load(inv)
    assert exc.value.problems[0].path.startswith("inventory.gpu."), exc.value.problems


def test_a_link_local_address_with_its_interface_is_an_ansible_host(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu": {"hosts": {"gpu-1": {"ansible_host": "fe80::1%eth0"}}}}}}))
    assert inventory_mod.load(inv).hosts("gpu")[0].address == "fe80::1%eth0"


# ----------------------------------------------------------------------------------------------
# What reaches Ansible is data: the real ansible-playbook on the rendered project


def test_a_host_name_forged_past_the_inventory_check_is_not_a_template_in_the_router_play(tmp_path):
    # S1a (issue 49): `ansible-playbook site.yml --list-hosts` ran this host name's lookup on the controller.
    mark = tmp_path / "ran-on-the-controller"
    attack = "::1%" + payload(mark)
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local"}, "children": {
        group: {"hosts": {attack: {}}} for group in ("gpu", "ceph", "monitoring")}}}))
    host = inventory_mod.Host(name=attack, vars={"ansible_host": "127.0.0.1"})
    forged = inventory_mod.Inventory(path=str(hosts), groups={g: [host] for g in ("gpu", "ceph", "monitoring")})
    root = render(resolve(spec("local")), forged, tmp_path / "run", KEYS).root
    project = root / "project"
    for playbook in ("site.yml", "down.yml"):
        plays = ansible_yaml.load((project / playbook).read_text())
        assert any(play["hosts"] == attack for play in plays), "the router play names the forged host exactly"
        listed = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(root / "inventory" / "hosts.yml"), playbook,
                                 "--list-hosts"], cwd=project, capture_output=True, text=True, timeout=120,
                                env={**os.environ, "ANSIBLE_CONFIG": str(project / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"})
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert not mark.exists(), f"ansible-playbook {playbook} --list-hosts evaluated a host name as a template"




@settings(max_examples=300, deadline=None)
@given(st.recursive(st.text() | st.integers() | st.booleans() | st.none(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
                                                                                   inner, max_size=4), max_leaves=12))
def test_every_string_is_written_unsafe_and_reads_back_exactly(value):
    text = ansible_yaml.dump({"v": value})
    assert ansible_yaml.load(text) == {"v": value}, "strings stay strings and numbers, booleans and nulls keep their type"
    templates = [v for v in _leaves(value) if isinstance(v, str) and ("{" in v or "#" in v)]
    tagged = text.count(ansible_yaml.UNSAFE_TAG + " ") + text.count(ansible_yaml.UNSAFE_TAG + "\n")
    assert tagged >= len(templates), "every string that could hold a template is tagged"


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def rendered_variables(project: Path) -> dict[str, object]:
    """Every variable kvplan wrote into the project's group_vars and host_vars, with its value."""
    found: dict[str, object] = {}
    for path in [*(project / "group_vars").rglob("*.yml"), *(project / "host_vars").rglob("*.yml")]:
        found |= ansible_yaml.load(path.read_text()) or {}
    return found


def template_every_variable(root: Path) -> list[str]:
    """Run a playbook in the rendered project that templates each rendered variable the way a task
    argument would (`{{ var }}`) on every host of the rendered inventory, and check that Ansible
    sees exactly what kvplan wrote (same text, same types); the values, as JSON."""
    project = root / "project"
    written = rendered_variables(project)
    names = sorted(written)
    assert {"vllm_model", "ceph_options", "vllm_instances", "lmcache_env"} <= set(names), names
    probe = [{"name": "Template every rendered variable", "hosts": "all", "gather_facts": False, "tasks": [{
        "name": "Variable as a task argument",
        "ansible.builtin.debug": {"msg": "{{ lookup('ansible.builtin.vars', item) | to_json }}"}, "loop": names}]}]
    (project / "probe.yml").write_text(yaml.safe_dump(probe))
    r = ansible_runner.run(private_data_dir=str(root), playbook="probe.yml", quiet=True, suppress_env_files=True,
                           ident="probe", envvars={"ANSIBLE_CONFIG": str(project / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                                                   "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert r.rc == 0, r.stdout.read()
    seen = {e["event_data"]["res"]["item"]: e["event_data"]["res"]["msg"] for e in r.events
            if e["event"] == "runner_item_on_ok"}
    assert {name: json.loads(seen[name]) for name in names} == json.loads(json.dumps(written))
    return list(seen.values())


def test_a_template_in_a_free_text_value_reaches_ansible_as_text(tmp_path):
    # A Ceph option value may be any one-line text, so this template passes validate and render.
    mark = tmp_path / "ran-on-the-controller"
    attack = payload(mark)
    r = resolve(spec("local", ceph__options={"osd_memory_target": attack}))
    root = render(r, LOCAL, tmp_path / "run", KEYS).root
    written = (root / "project" / "group_vars" / "all" / "ceph.yml").read_text()
    assert "osd_memory_target: !unsafe " in written
    assert ansible_yaml.load(written)["ceph_options"]["osd_memory_target"] == attack

    messages = template_every_variable(root)

    assert not mark.exists(), "ansible-playbook evaluated a template from the spec"
    assert any(attack in m for m in messages), messages


def test_values_forged_past_validation_are_still_data_to_ansible(tmp_path):
    # Grammars stop these at validate; the rendering must not depend on that alone.
    mark = tmp_path / "ran-on-the-controller"
    attack = payload(mark)
    r = resolve(spec("local"))
    forged = r.model_copy(update={"model_path": attack, "api_host": attack, "name": "local"})
    root = render(forged, LOCAL, tmp_path / "run", KEYS).root

    messages = template_every_variable(root)

    assert not mark.exists(), "ansible-playbook evaluated a template from the spec"
    assert sum(attack in m for m in messages) >= 2, messages


def run_client_tasks(tmp_path: Path, address: str):
    """The ceph role's client tasks (the GPU nodes' /etc/hosts line for RGW) on this machine, in check mode: a
    check reads /etc/hosts and writes nothing, so the attack below is safe to run even where the role has no guard."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    play = [{"name": "RGW in /etc/hosts", "hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "Client tasks", "ansible.builtin.include_role": {"name": "ceph", "tasks_from": "client"},
        "vars": {"ceph_access": "s3", "ceph_rgw_address": address, "ceph_rgw_dns_name": "rgw.kvplan.internal",
                 "ceph_rgw_bucket": "kvcache"}}]}]
    (project / "play.yml").write_text(yaml.safe_dump(play))
    return ansible_runner.run(
        private_data_dir=str(tmp_path), project_dir=str(project), playbook="play.yml", quiet=True, suppress_env_files=True,
        inventory={"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                    "ansible_python_interpreter": sys.executable}}}},
        cmdline="--check --diff", envvars={"ANSIBLE_ROLES_PATH": str(REPO / "templates" / "roles"), "ANSIBLE_NOCOLOR": "1",
                                           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})


def test_a_line_break_in_the_rgw_address_never_reaches_etc_hosts(tmp_path):
    # S1b (issue 49), forged past the grammar (which now refuses it at validate): the second line would have sent
    # every GPU node's pip and model downloads to 203.0.113.66.
    r = run_client_tasks(tmp_path, "::1%x\n203.0.113.66 huggingface.co pypi.org")
    out = r.stdout.read()
    assert r.rc != 0 and "refusing to write" in out, out
    assert changed(r) == [], "nothing reached lineinfile"
    ok = run_client_tasks(tmp_path, "10.0.0.5")
    assert ok.rc == 0, ok.stdout.read()


# ----------------------------------------------------------------------------------------------
# The local-disk tier's directory


@pytest.mark.parametrize("path", ["/", "/etc", "/usr", "/var", "/var/lib", "/home", "/tmp", "/etc/lmcache", "/usr/local",
                                  "/proc/self", "/var/lib/"])
def test_the_local_disk_tier_is_never_a_system_directory(path):
    found = refused(with_changes(example_data("local"), lmcache__nvme__path=path))
    assert "system directory" in found["lmcache.nvme.path"] or "normalised" in found["lmcache.nvme.path"], found


def run_nvme_dir_tasks(tmp_path: Path, path: Path, check: bool = False, own_volume: bool = False):
    """The lmcache role's directory tasks on this machine, as a deploy (or `--check --diff`) runs them."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    play = [{"name": "Local-disk tier directory", "hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "Directory tasks", "ansible.builtin.include_role": {"name": "lmcache", "tasks_from": "nvme_dir"},
        "vars": {"lmcache_nvme_path": str(path), "lmcache_nvme_own_volume": own_volume}}]}]
    (project / "play.yml").write_text(yaml.safe_dump(play))
    return ansible_runner.run(
        private_data_dir=str(tmp_path), project_dir=str(project), playbook="play.yml", quiet=True, suppress_env_files=True,
        inventory={"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                    "ansible_python_interpreter": sys.executable}}}},
        cmdline="--check --diff" if check else None,
        envvars={"ANSIBLE_ROLES_PATH": str(REPO / "templates" / "roles"), "ANSIBLE_NOCOLOR": "1",
                 "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})


def changed(r) -> list[str]:
    return [e["event_data"]["task"] for e in r.events if e["event"] == "runner_on_ok" and e["event_data"]["res"].get("changed")]


def test_an_existing_directory_keeps_its_mode_and_owner(tmp_path):
    existing = tmp_path / "mnt-nvme0"
    existing.mkdir()
    existing.chmod(0o755)
    before = existing.stat()

    check = run_nvme_dir_tasks(tmp_path, existing, check=True)
    assert check.rc == 0 and changed(check) == [], check.stdout.read()
    apply = run_nvme_dir_tasks(tmp_path, existing)
    assert apply.rc == 0 and changed(apply) == [], apply.stdout.read()

    after = existing.stat()
    assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_gid) == (0o755, before.st_uid, before.st_gid)


def test_a_missing_directory_is_created_for_lmcache_only(tmp_path):
    fresh = tmp_path / "lmcache" / "nvme"
    r = run_nvme_dir_tasks(tmp_path, fresh)
    assert r.rc == 0 and changed(r) == ["Create the local-disk tier directory"], r.stdout.read()
    assert fresh.is_dir() and stat.S_IMODE(fresh.stat().st_mode) == 0o750


def test_a_tier_on_several_drives_must_be_on_a_mounted_volume_and_nothing_is_created_on_the_root_filesystem(tmp_path):
    on_root = Path("/kvplan-test-not-mounted") / tmp_path.name / "lmcache"     # nearest existing directory: /
    r = run_nvme_dir_tasks(tmp_path, on_root, own_volume=True)
    assert r.rc != 0 and "never builds, formats or mounts drives" in r.stdout.read()
    assert not on_root.parent.parent.exists()


def test_a_tier_on_several_drives_on_a_mounted_volume_is_created(tmp_path):
    mounted = Path("/dev/shm")                       # a tmpfs: another filesystem than /
    if not mounted.is_dir() or mounted.stat().st_dev == Path("/").stat().st_dev:
        pytest.skip("no filesystem other than / to stand in for the array")
    fresh = mounted / f"kvplan-test-{tmp_path.name}" / "lmcache"
    try:
        r = run_nvme_dir_tasks(tmp_path, fresh, own_volume=True)
        assert r.rc == 0 and changed(r) == ["Create the local-disk tier directory"], r.stdout.read()
        assert fresh.is_dir()
    finally:
        if fresh.exists():
            fresh.rmdir()
            fresh.parent.rmdir()


def test_a_symlink_or_file_at_the_tier_path_stops_the_deploy(tmp_path):
    target = tmp_path / "etc-like"
    target.mkdir()
    target.chmod(0o755)
    link = tmp_path / "nvme-link"
    link.symlink_to(target)
    r = run_nvme_dir_tasks(tmp_path, link)
    assert r.rc != 0 and "is not a directory" in r.stdout.read()
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
