"""`kvplan render`: what it refuses, what it writes, and how it keeps secrets."""

from __future__ import annotations

import stat

import pytest
import yaml

from conftest import REPO, spec
from kvplan.deploy import ansible_yaml, inventory as inventory_mod
from kvplan.deploy.render import render
from kvplan.deploy.secrets import Secrets, load_or_create
from kvplan.errors import SpecError
from kvplan.resolve import resolve

KEYS = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")
LOCAL = inventory_mod.load(REPO / "inventories" / "local")
EXAMPLE_CLUSTER = inventory_mod.load(REPO / "inventories" / "example-cluster")


def problems(exc: pytest.ExceptionInfo) -> dict[str, str]:
    return {p.path: p.message for p in exc.value.problems}


def test_every_rendered_file_names_the_spec_and_its_hash(tmp_path):
    r = resolve(spec("local"))
    root = render(r, LOCAL, tmp_path / "run", KEYS).root
    for rel in ("project/site.yml", "project/group_vars/all/ceph.yml", "project/host_vars/localhost.yml",
                "inventory/hosts.yml", "env/settings", "project/ansible.cfg"):
        head = (root / rel).read_text().splitlines()[0]
        assert f"spec 'local' (sha256 {r.spec_hash})" in head, rel
    assert (root / "project" / "roles" / "ceph" / "tasks" / "main.yml").is_file()


def test_secrets_are_owner_only_and_reused(tmp_path):
    first = load_or_create(tmp_path, "local")
    assert stat.S_IMODE((tmp_path / "secrets" / "local.yml").stat().st_mode) == 0o600
    assert load_or_create(tmp_path, "local") == first
    root = render(resolve(spec("local")), LOCAL, tmp_path / "run", first).root
    secrets_file = root / "project" / "group_vars" / "all" / "secrets.yml"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    assert ansible_yaml.load(secrets_file.read_text())["ceph_rgw_secret_key"] == first.ceph_rgw_secret_key
    others = [p for p in root.rglob("*") if p.is_file() and p != secrets_file]
    assert not [p for p in others if first.ceph_rgw_secret_key in p.read_text(errors="ignore")]


def test_a_simulate_only_spec_is_refused_naming_each_setting_the_stack_cannot_honour(tmp_path):
    r = resolve(spec("local", simulate_only=True, lmcache__merging={"window": "20ms"}, lmcache__ddr__ttl="1h"))
    with pytest.raises(SpecError) as exc:
        render(r, LOCAL, tmp_path / "run", KEYS)
    found = problems(exc)
    assert found["lmcache.merging"] == ("simulation-only: neither vLLM nor LMCache has a setting that holds requests back "
                                        "to merge their prefills")
    assert "no expiry by age on the ddr tier" in found["lmcache.ddr.ttl"]
    assert not (tmp_path / "run").exists()


def test_a_simulate_only_spec_that_needs_it_for_nothing_is_refused_saying_so(tmp_path):
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local", simulate_only=True)), LOCAL, tmp_path / "run", KEYS)
    assert "it sets nothing the real stack cannot honour" in problems(exc)["simulate_only"]


def test_a_missing_inventory_group_is_named_before_ansible_starts(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu": {"hosts": {"g1": {"ansible_host": "10.0.0.1"}}}}}}))
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), inventory_mod.load(inv), tmp_path / "run", KEYS)
    found = problems(exc)
    assert "group missing or empty" in found["inventory.ceph"] and "inventory.monitoring" in found


def test_the_bucket_host_needs_an_ip_to_map_in_etc_hosts(tmp_path):
    inv = tmp_path / "hosts.yml"
    hosts = {"gpu": {"hosts": {"g1": None}}, "ceph": {"hosts": {"ceph-a.example": None}},
             "monitoring": {"hosts": {"m1": None}}}
    inv.write_text(yaml.safe_dump({"all": {"children": hosts}}))
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), inventory_mod.load(inv), tmp_path / "run", KEYS)
    assert "ceph.rgw.address" in problems(exc)
    ok = render(resolve(spec("local", ceph__rgw__address="10.0.1.5")), inventory_mod.load(inv), tmp_path / "ok", KEYS)
    assert ok.stack.ceph.ceph_rgw_address == "10.0.1.5"


def test_an_existing_directory_that_is_not_a_render_is_never_overwritten(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, tmp_path, KEYS)
    assert "will not overwrite" in problems(exc)["output"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_inventory_errors_say_how_to_fix_them(tmp_path):
    (tmp_path / "hosts.ini").write_text("[gpu]\nlocalhost\n")
    with pytest.raises(SpecError) as exc:
        inventory_mod.load(tmp_path)
    assert "holds no hosts.yml" in problems(exc)["inventory"]
    bad = tmp_path / "bad.yml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(SpecError):
        inventory_mod.load(bad)


def test_instances_fill_nodes_in_order_with_their_own_devices_and_ports():
    from kvplan.deploy.stack import build

    r = resolve(spec("codegen-70b", serving__instances=4))       # 4 instances of TP 4 on 8-GPU nodes
    placed = build(r, ["gpu-1", "gpu-2"], ["10.0.1.1"]).instances
    assert placed["gpu-1"] == [{"index": 0, "port": 8000, "devices": "0,1,2,3"},
                               {"index": 1, "port": 8001, "devices": "4,5,6,7"}]
    assert [i["index"] for i in placed["gpu-2"]] == [2, 3]


def test_ipv6_addresses_are_bracketed_in_targets_and_urls():
    # a link-local address needs its interface (issue 49: the only scope id the host grammar takes); in a URL its
    # '%' is written %25 (RFC 6874), and a Prometheus target or URL without brackets would read '::1:8000' wrongly
    from kvplan.deploy.stack import build

    r = resolve(spec("codegen-70b", serving__instances=4))
    stack = build(r, ["gpu-1", "gpu-2"], ["fd00::10"], ["fe80::1%eth0", "10.0.0.2"])
    assert stack.monitoring.monitoring_vllm_targets == ["[fe80::1%eth0]:8000", "[fe80::1%eth0]:8001", "10.0.0.2:8000",
                                                        "10.0.0.2:8001"]
    workers = stack.router.router_args[stack.router.router_args.index("--worker-urls") + 1:][:4]
    assert workers == ["http://[fe80::1%25eth0]:8000", "http://[fe80::1%25eth0]:8001", "http://10.0.0.2:8000",
                       "http://10.0.0.2:8001"]
    assert stack.router.router_url.startswith("http://[fe80::1%25eth0]:")


def test_rules_refuse_what_the_deployment_cannot_honour():
    with pytest.raises(SpecError) as exc:
        spec("chat-llama2-13b", lmcache__nvme__eviction="LFU")
    assert "one cache_policy for DRAM and disk" in problems(exc)["lmcache.nvme.eviction"]
    with pytest.raises(SpecError) as exc:
        spec("local", lmcache__ceph__ttl="12h")
    assert "whole days" in problems(exc)["lmcache.ceph.ttl"]
    with pytest.raises(SpecError) as exc:
        spec("local", ceph__hosts=7, ceph__pool__size=1)
    assert "a monitor on every host" in problems(exc)["ceph.hosts"]
    assert spec("local", ceph__hosts=7, ceph__pool__size=1, simulate_only=True).simulate_only
    assert spec("local", ceph__hosts=3, ceph__failure_domain="host", ceph__pool__size=3).ceph.hosts == 3


def test_quantised_weights_without_a_way_for_vllm_to_load_them_are_refused_with_the_fix(tmp_path):
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("chat-llama2-13b", serving__weights_dtype="int4")), EXAMPLE_CLUSTER, tmp_path / "a", KEYS)
    text = exc.value.render()
    assert "serving.quantization: serving.weights_dtype is int4, but nothing says how vLLM gets int4 weights" in text
    assert "fix: set serving.quantization: awq or gptq, with serving.model_path an AWQ or GPTQ checkpoint" in text
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("chat-llama2-13b", serving__weights_dtype="int4", serving__quantization="awq")), EXAMPLE_CLUSTER,
               tmp_path / "b", KEYS)
    assert "meta-llama/Llama-2-13b-hf is the catalog's release of Llama-2-13B" in exc.value.render()
    root = render(resolve(spec("chat-llama2-13b", serving__weights_dtype="int4", serving__quantization="awq",
                               serving__model_path="TheBloke/Llama-2-13B-chat-AWQ")), EXAMPLE_CLUSTER, tmp_path / "c", KEYS).root
    args = ansible_yaml.load((root / "project" / "group_vars" / "all" / "vllm.yml").read_text())["vllm_args"]
    assert args[args.index("--quantization") + 1] == "awq" and "--dtype" not in args
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_checkpoint_released_in_fp8_renders_as_released(tmp_path):
    """DeepSeek-V3 ships fp8 weights: vLLM reads the method from the checkpoint, so the deployment passes neither
    --quantization nor a --dtype that would contradict the simulated one byte per weight."""
    r = resolve(spec("codegen-70b", model="DeepSeek-V3", serving__gpu="H200", serving__tensor_parallel=8,
                     serving__instances=4, serving__max_model_len=None))
    root = render(r, EXAMPLE_CLUSTER, tmp_path / "run", KEYS).root
    args = ansible_yaml.load((root / "project" / "group_vars" / "all" / "vllm.yml").read_text())["vllm_args"]
    assert "--quantization" not in args and "--dtype" not in args
    assert args[args.index("--kv-cache-dtype") + 1] == "bfloat16"


def test_fp32_renders_as_dtype_float32_with_kv_left_to_vllms_auto(tmp_path):
    """vLLM's --kv-cache-dtype has no float32: auto keeps KV in the dtype the model runs in, the fp32 simulated."""
    root = render(resolve(spec("local")), LOCAL, tmp_path / "run", KEYS).root
    args = ansible_yaml.load((root / "project" / "group_vars" / "all" / "vllm.yml").read_text())["vllm_args"]
    assert args[args.index("--dtype") + 1] == "float32"
    assert args[args.index("--kv-cache-dtype") + 1] == "auto"


def test_a_quantization_that_disagrees_with_the_simulated_weights_is_refused_at_validate():
    with pytest.raises(SpecError) as exc:
        spec("chat-llama2-13b", serving__quantization="awq")
    text = exc.value.render()
    assert "awq weights are int4, but serving.weights_dtype is auto, so the simulation would count weights" in text
    assert "fix: set serving.weights_dtype: int4, or remove serving.quantization" in text


def test_a_re_render_into_its_own_folder_says_which_files_changed_and_how(tmp_path):
    first = render(resolve(spec("local")), LOCAL, tmp_path / "run", KEYS)
    assert first.changes is None, "a first render replaces nothing"

    same = render(resolve(spec("local")), LOCAL, tmp_path / "run", KEYS)
    assert not (same.changes.changed or same.changes.added or same.changes.removed)
    assert "no file changed" in same.changes.summary()

    topo = spec("local")
    changed = topo.model_copy(update={"serving": topo.serving.model_copy(update={"max_num_seqs": 7})})
    again = render(resolve(changed), LOCAL, tmp_path / "run", Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE01",
                                                                      ceph_rgw_secret_key="another-secret"))
    # Every header names the new spec hash, yet only the files whose settings changed are listed
    assert set(again.changes.changed) == {"project/group_vars/all/vllm.yml", "project/group_vars/all/secrets.yml",
                                          "kvplan.json"}, again.changes.changed
    diff = again.changes.unified()
    vllm = diff[diff.index("+++ project/group_vars/all/vllm.yml (this render)"):]
    assert vllm[4:7] == ["   - !unsafe '--max-num-seqs'", "-  - '8'", "+  - '7'"], vllm
    assert "another-secret" not in "\n".join(diff) and "example-secret" not in "\n".join(diff), "a secret was shown"
    assert "project/group_vars/all/secrets.yml" in again.changes.summary()
