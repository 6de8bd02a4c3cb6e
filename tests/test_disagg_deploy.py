"""Disaggregated serving deployed: each pool's vLLM instances with NixlConnector, vllm-router's P/D mode in front.

kvplan.deploy.disagg places the prefill pool on the first gpu hosts and the decode pool after them, gives each pool's
hosts the pool's own `vllm serve` arguments (host_vars) and each instance a NIXL side channel of its own, and starts
vllm-router with --vllm-pd-disaggregation. vLLM's own parser reads each pool's arguments back, vllm-router's own
parser its arguments; what is not deployed is refused with the reason.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvplan.deploy import ansible_yaml
from kvplan.deploy.render import render
from kvplan.deploy.secrets import Secrets
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.spec import from_mapping, load

from conftest import REPO, flags, inventory_for, with_changes

KEYS = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")
EXAMPLE = REPO / "docs" / "examples" / "disaggregated.yaml"
VLLM_PYTHON = Path("/opt/kvplan/vllm-venv/bin/python")
ROUTER_PYTHON = Path("/opt/kvplan/router-venv/bin/python")


def rendered(r, tmp_path: Path) -> Path:
    return render(r, inventory_for(r, tmp_path), tmp_path / "run", KEYS).root


def host_vars(root: Path) -> dict[str, dict]:
    return {p.stem: ansible_yaml.load(p.read_text()) for p in sorted((root / "project" / "host_vars").glob("*.yml"))}


def router_args(root: Path) -> list[str]:
    return ansible_yaml.load((root / "project" / "group_vars" / "all" / "router.yml").read_text())["router_args"]


# ---------------------------------------------------------------------------------------------- the render

def test_the_example_places_the_prefill_pool_first_and_the_decode_pool_after_it(tmp_path):
    """docs/examples/disaggregated.yaml: two prefill instances of TP 2 fill the first 8-GPU host's first four devices;
    the decode instance of TP 4 gets a host of its own (a host never runs both pools)."""
    r = resolve(load(EXAMPLE))
    assert not r.simulate_only and r.nodes == 2
    hosts = host_vars(rendered(r, tmp_path))
    assert list(hosts) == ["gpu-1", "gpu-2"]
    prefill, decode = hosts["gpu-1"], hosts["gpu-2"]
    assert [(i["index"], i["port"], i["devices"]) for i in prefill["vllm_instances"]] == [(0, 8000, "0,1"), (1, 8001, "2,3")]
    assert [(i["index"], i["port"], i["devices"]) for i in decode["vllm_instances"]] == [(2, 8000, "0,1,2,3")]
    p, d = flags(prefill["vllm_args"]), flags(decode["vllm_args"])
    assert (p["--tensor-parallel-size"], d["--tensor-parallel-size"]) == (["2"], ["4"])
    assert (p["--max-num-batched-tokens"], d["--max-num-seqs"]) == (["8192"], ["128"])
    assert (prefill["vllm_tensor_parallel"], decode["vllm_tensor_parallel"]) == (2, 4)
    for args, role in ((p, "kv_producer"), (d, "kv_consumer")):
        assert json.loads(args["--kv-transfer-config"][0]) == {"kv_connector": "NixlConnector", "kv_role": role,
                                                                "kv_buffer_device": "cuda"}


def test_each_instance_has_a_side_channel_of_its_own_on_its_hosts_address(tmp_path):
    """The decode instance reads from the prefill instance at the host and port the prefill instance returns
    (VLLM_NIXL_SIDE_CHANNEL_HOST/PORT): two instances on one host must not share a port, nor say localhost."""
    r = resolve(load(EXAMPLE))
    hosts = host_vars(rendered(r, tmp_path))
    channels = [(i["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"], i["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"])
                for h in hosts.values() for i in h["vllm_instances"]]
    assert channels == [("10.0.2.1", "5600"), ("10.0.2.1", "5601"), ("10.0.2.2", "5600")]


def test_the_router_runs_vllms_pd_mode_over_both_pools(tmp_path):
    r = resolve(load(EXAMPLE))
    args = flags(router_args(rendered(r, tmp_path)))
    assert args["--vllm-pd-disaggregation"] == [""]
    assert args["--prefill"] == ["http://10.0.2.1:8000", "http://10.0.2.1:8001"]
    assert args["--decode"] == ["http://10.0.2.2:8000"]
    assert (args["--kv-connector"], args["--policy"]) == (["nixl"], ["round_robin"])
    assert "--worker-urls" not in args


def test_an_aggregated_render_is_what_it_was(tmp_path):
    """No pools key in the manifest, host_vars with the instances only, and instances without an env of their own."""
    r = resolve(load(REPO / "examples" / "chat-llama2-13b.yaml"))
    root = rendered(r, tmp_path)
    assert "pools" not in json.loads((root / "kvplan.json").read_text())["stack"]
    for values in host_vars(root).values():
        assert list(values) == ["vllm_instances"]
        assert all(set(i) == {"index", "port", "devices"} for i in values["vllm_instances"])
    assert "--vllm-pd-disaggregation" not in router_args(root)


def test_a_pool_with_lmcache_tiers_is_simulation_only_and_the_render_refuses_it(tmp_path):
    """The prefill pool's LMCache tiers would need vLLM's MultiConnector, which the render does not write: validate
    asks for simulate_only, and the render refuses the spec rather than deploy pools that do not do what kvplan
    simulated."""
    data = with_changes(load(EXAMPLE).model_dump(mode="json", exclude_unset=True),
                        lmcache={"mode": "inprocess", "ddr": {"size": "64GB"}})
    with pytest.raises(SpecError) as err:
        from_mapping(data)
    assert "MultiConnector" in {p.path: p.message for p in err.value.problems}["lmcache"]
    r = resolve(from_mapping({**data, "simulate_only": True}))
    with pytest.raises(SpecError) as err:
        rendered(r, tmp_path)
    why = {p.path: p.message for p in err.value.problems}
    assert "MultiConnector" in why["lmcache"]
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------- the programs' parsers

READ_BACK = """
import json, os, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.engine.arg_utils import EngineArgs

out = []
for pool in json.loads(sys.argv[1]):
    engine = EngineArgs.from_cli_args(make_arg_parser(FlexibleArgumentParser()).parse_args(["model", *pool["args"]]))
    kt = engine.kv_transfer_config
    os.environ.update(pool["env"])
    import vllm.envs as envs
    out.append({"connector": kt.kv_connector, "role": kt.kv_role, "buffer": kt.kv_buffer_device,
                "producer": kt.is_kv_producer, "consumer": kt.is_kv_consumer, "tp": engine.tensor_parallel_size,
                "max_num_seqs": engine.max_num_seqs, "max_num_batched_tokens": engine.max_num_batched_tokens,
                "side_channel": [envs.VLLM_NIXL_SIDE_CHANNEL_HOST, envs.VLLM_NIXL_SIDE_CHANNEL_PORT]})
print(json.dumps(out))
"""


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="vLLM is not installed at /opt/kvplan/vllm-venv")
def test_vllm_reads_each_pools_arguments_and_side_channel_back(tmp_path):
    """vLLM 0.32's own `vllm serve` parser and EngineArgs read each pool's rendered arguments: NixlConnector, the
    prefill pool its producer and the decode pool its consumer, the pool's TP and limits; vLLM's envs read the
    instance's side channel."""
    r = resolve(load(EXAMPLE))
    hosts = host_vars(rendered(r, tmp_path))
    given = [{"args": h["vllm_args"], "env": h["vllm_instances"][0]["env"]} for h in hosts.values()]
    done = subprocess.run([str(VLLM_PYTHON), "-c", READ_BACK, json.dumps(given)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    prefill, decode = json.loads(done.stdout.strip().splitlines()[-1])
    pools = r.disaggregation
    assert (prefill["role"], prefill["producer"], prefill["consumer"]) == ("kv_producer", True, False)
    assert (decode["role"], decode["producer"], decode["consumer"]) == ("kv_consumer", False, True)
    for read, pool, port in ((prefill, pools.prefill, 5600), (decode, pools.decode, 5600)):
        assert (read["connector"], read["buffer"]) == ("NixlConnector", "cuda")
        assert (read["tp"], read["max_num_seqs"], read["max_num_batched_tokens"]) == \
               (pool.tensor_parallel, pool.max_num_seqs, pool.max_num_batched_tokens)
        assert read["side_channel"][1] == port
    assert (prefill["side_channel"][0], decode["side_channel"][0]) == ("10.0.2.1", "10.0.2.2")


ROUTER_READ_BACK = """
import json, sys
from vllm_router.launch_router import parse_router_args
args = parse_router_args(json.loads(sys.argv[1]))
args._validate_router_args()
print(json.dumps({"pd": args.vllm_pd_disaggregation, "prefill": args.prefill_urls, "decode": args.decode_urls,
                  "connector": args.kv_connector, "policy": args.policy, "prefill_policy": args.prefill_policy,
                  "decode_policy": args.decode_policy, "workers": args.worker_urls}))
"""


@pytest.mark.skipif(not ROUTER_PYTHON.exists(), reason="vllm-router is not installed at /opt/kvplan/router-venv "
                                                       "(scripts/install-router.sh)")
def test_vllm_router_reads_its_pd_arguments_back(tmp_path):
    """vllm-router's own parser (vllm_router/launch_router.py parse_router_args, and RouterArgs' validation) takes
    the rendered arguments: P/D mode, each prefill URL without a bootstrap port, each decode URL, NIXL, round robin
    for both pools (neither pool's policy is overridden), no plain workers."""
    r = resolve(load(EXAMPLE))
    done = subprocess.run([str(ROUTER_PYTHON), "-c", ROUTER_READ_BACK, json.dumps(router_args(rendered(r, tmp_path)))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read == {"pd": True, "prefill": [["http://10.0.2.1:8000", None], ["http://10.0.2.1:8001", None]],
                    "decode": ["http://10.0.2.2:8000"], "connector": "nixl", "policy": "round_robin",
                    "prefill_policy": None, "decode_policy": None, "workers": []}


def test_an_inventory_short_of_the_decode_pools_hosts_is_refused_naming_both_pools(tmp_path):
    from kvplan.deploy import inventory

    r = resolve(load(EXAMPLE))
    hosts = tmp_path / "hosts.yml"
    hosts.write_text("all:\n  children:\n    gpu: {hosts: {gpu-1: {}}}\n    monitoring: {hosts: {mon-1: {}}}\n")
    (problem,) = inventory.required(r, inventory.load(hosts))
    assert problem.path == "inventory.gpu" and problem.allowed == "2 host(s)"
    assert "2 prefill instance(s) of TP 2 on 1 node(s), then 1 decode instance(s) of TP 4 on 1 more" in problem.message
