"""What you simulate is what you deploy.

Every example that the real stack can honour is rendered, and each number the simulator runs
with — read from the simulator's own objects, not from the spec — must appear identically in
the rendered LMCache configuration, the vLLM arguments and the Ceph role's variables: block
size, chunk size, the capacity and eviction policy of each LMCache tier (per rank in-process,
per server in MP mode), MP mode's batch eviction (watermark and ratio), the pool's replica
count, the ceph tier's expiry, the weights' bytes, the router's policy and the warm-up prompts.
A stack fact changed in `Resolved` moves the simulator and the render together.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from conftest import REPO, flags, inventory_for
from kvplan.accelerator_fit import WEIGHT_BYTES
from kvplan.deploy import ansible_yaml
from kvplan.deploy.render import render
from kvplan.deploy.secrets import Secrets
from kvplan.errors import SpecError
from kvplan.resolve import Resolved, resolve
from kvplan.sim.eviction import POLICIES, TTL
from kvplan.deploy.vllm_command import VLLM_DTYPE, router_policy
from kvplan.sim import workload as wl
from kvplan.sim.run import Simulation
from kvplan.spec.serving import QUANTIZATIONS
from kvplan.spec import load
from kvplan.units import GIB

SPECS = sorted((REPO / "examples").glob("*.yaml")) + sorted((REPO / "docs" / "examples").glob("*.yaml"))
KEYS = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")


@functools.cache
def resolved_examples() -> list[tuple[Path, Resolved]]:
    """Every shipped example that resolves (documented invalid ones, such as docs/examples/arc-inprocess.yaml, do not)
    and is not simulation-only."""
    out = []
    for path in SPECS:
        try:
            r = resolve(load(path))
        except SpecError:
            continue
        if not r.simulate_only:
            out.append((path, r))
    return out


def deployable() -> list[Path]:
    """The aggregated examples the Ansible render deploys (llm-d's scheduler deploys through the Helm path only:
    test_llmd and test_deploy_fields hold its render)."""
    return [path for path, r in resolved_examples() if r.router != "llm_d" and r.disaggregation is None]


def role_vars(root: Path, role: str) -> dict:
    return ansible_yaml.load((root / "project" / "group_vars" / "all" / f"{role}.yml").read_text())


def policy(cache) -> str:
    inner = cache.inner if isinstance(cache, TTL) else cache
    return next(name for name, cls in POLICIES.items() if type(inner) is cls)


LMCACHE_MP_NAME = {"none": "noop"}


def disaggregated() -> list[Path]:
    """The deployable examples with prefill and decode pools (the test after the next)."""
    return [path for path, r in resolved_examples() if r.disaggregation is not None]


def test_an_example_deploys_disaggregated_serving():
    assert disaggregated(), "docs/examples/disaggregated.yaml is deployable: the test below must have a case"


@pytest.mark.parametrize("path", disaggregated(), ids=lambda p: p.stem)
def test_the_rendered_pools_carry_the_simulators_pools(path, tmp_path):
    """Each pool's hosts run the simulator's engines of that pool, with its block size, TP and limits, and the
    router's P/D legs go over exactly the simulator's prefill and decode engines, picked as its proxy picks them."""
    r = resolve(load(path))
    pools = Simulation(r).pools
    root = render(r, inventory_for(r, tmp_path), tmp_path / "run", KEYS).root
    hosts = [ansible_yaml.load((root / "project" / "host_vars" / f"gpu-{i + 1}.yml").read_text()) for i in range(r.nodes)]
    first = r.disaggregation.prefill.nodes
    for engines, pool_hosts in ((pools.prefills, hosts[:first]), (pools.decodes, hosts[first:])):
        assert sum(len(h["vllm_instances"]) for h in pool_hosts) == len(engines)
        for h in pool_hosts:
            vllm = flags(h["vllm_args"])
            assert int(vllm["--block-size"][0]) == engines[0].bs
            tp = int(vllm["--tensor-parallel-size"][0])
            assert tp == h["vllm_tensor_parallel"]      # the simulator's steps stream each rank's share of the weights
            assert engines[0].steptime.weight_bytes * tp / r.model.params == pytest.approx(
                WEIGHT_BYTES[r.weights_dtype], rel=1e-6)
            assert int(vllm["--max-num-seqs"][0]) == engines[0].max_seqs
            assert int(vllm["--max-num-batched-tokens"][0]) == engines[0].budget
            assert json.loads(vllm["--kv-transfer-config"][0])["kv_connector"] == "NixlConnector"
    args = flags(role_vars(root, "router")["router_args"])
    assert (len(args["--prefill"]), len(args["--decode"])) == (len(pools.prefills), len(pools.decodes))
    assert args["--policy"] == [pools.pick.kind] and args["--kv-connector"] == [r.disaggregation.connector]


@pytest.mark.parametrize("path", deployable(), ids=lambda p: p.stem)
def test_the_rendered_stack_carries_the_simulators_numbers(path, tmp_path):
    r = resolve(load(path))
    sim = Simulation(r)
    root = render(r, inventory_for(r, tmp_path), tmp_path / "run", KEYS).root

    vllm = flags(role_vars(root, "vllm")["vllm_args"])
    assert int(vllm["--block-size"][0]) == sim.engines[0].bs == r.block_size
    assert int(vllm["--tensor-parallel-size"][0]) == r.tensor_parallel
    assert int(vllm["--max-num-seqs"][0]) == r.max_num_seqs
    assert int(vllm["--max-num-batched-tokens"][0]) == r.max_num_batched_tokens
    # the KV bytes the simulator counts: the dtype named, or auto where vLLM has no name for it (fp32: the --dtype)
    assert vllm["--kv-cache-dtype"] in ([r.kv_cache_dtype], ["auto"])
    assert vllm["--kv-cache-dtype"] == [r.kv_cache_dtype] or vllm["--dtype"] == [r.kv_cache_dtype]
    assert ("--enable-prefix-caching" in vllm) == r.prefix_caching
    placed = [ansible_yaml.load((root / "project" / "host_vars" / f"gpu-{i + 1}.yml").read_text())["vllm_instances"]
              for i in range(r.nodes)]
    assert sum(len(p) for p in placed) == len(sim.engines) == r.instances
    # the weights the simulator's steps stream are the ones vLLM loads: unquantised as --dtype, else quantised
    per_param = sim.engines[0].steptime.weight_bytes * r.tensor_parallel / r.model.params
    if "--quantization" in vllm:
        assert vllm["--quantization"][0] in QUANTIZATIONS[r.weights_dtype] and per_param < 2
    else:
        assert vllm["--dtype"] == [VLLM_DTYPE[r.weights_dtype]]
        assert per_param == pytest.approx(WEIGHT_BYTES[r.weights_dtype], rel=1e-6)
    # the router routes as the simulator's Router does, over every instance
    args, wanted = role_vars(root, "router")["router_args"], router_policy(sim.router.kind, sim.router.thresholds)
    assert any(args[i:i + len(wanted)] == wanted for i in range(len(args))), (args, wanted)
    workers = args[args.index("--worker-urls") + 1:]
    assert len(workers[:next(i for i, a in enumerate(workers) if a.startswith("--"))]) == len(sim.engines)
    # the warm-up play prefills exactly the simulator's warm-up requests
    warmup_vars = root / "project" / "group_vars" / "all" / "warmup.yml"
    warm = role_vars(root, "warmup")["warmup_prompts"] if warmup_vars.is_file() else []
    assert [len(p["prompt"]) for p in warm] == [w.prompt_tokens for w in wl.warmup(r, sim.seed)]

    if r.lmcache is not None:
        lm = role_vars(root, "lmcache")
        caches = sim.lmcache.caches
        per_rank = r.lmcache.storing_ranks
        if r.lmcache.mode == "inprocess":
            cfg = lm["lmcache_config"]
            assert cfg["chunk_size"] == r.lmcache.chunk_size
            assert ("ddr" in caches) == cfg["local_cpu"]
            if "ddr" in caches:
                assert cfg["max_local_cpu_size"] * GIB * per_rank == caches["ddr"][0].capacity
                assert cfg["cache_policy"] == policy(caches["ddr"][0])
            if "nvme" in caches:
                assert cfg["max_local_disk_size"] * GIB * per_rank == caches["nvme"][0].capacity
                assert cfg["cache_policy"] == policy(caches["nvme"][0])
            if "ceph" in caches:
                assert cfg["remote_url"] == f"s3://{r.ceph.rgw_bucket}.{r.ceph.rgw_dns_name}:{r.ceph.rgw_port}"
                assert policy(caches["ceph"][0]) == "none"      # in-process remote storage never evicts
            # in-process LMCache evicts one object at a time, on demand: no watermark to write, none simulated
            assert all(tier[0].watermark is None for tier in caches.values())
        else:
            server = flags(lm["lmcache_server_args"])
            assert int(server["--chunk-size"][0]) == r.lmcache.chunk_size
            assert float(server["--l1-size-gb"][0]) * GIB == caches["ddr"][0].capacity
            assert server["--eviction-policy"] == [LMCACHE_MP_NAME.get(policy(caches["ddr"][0]), policy(caches["ddr"][0]))]
            assert float(server["--eviction-trigger-watermark"][0]) == caches["ddr"][0].watermark
            assert float(server["--eviction-ratio"][0]) == caches["ddr"][0].ratio
            adapters = [json.loads(a) for a in server.get("--l2-adapter", [])]
            lower = [t for t in ("nvme", "ceph") if t in caches]
            assert len(adapters) == len(lower), "one L2 adapter per lower tier, in lookup order"
            for tier, adapter in zip(lower, adapters):
                cache = caches[tier][0]
                servers = r.nodes if tier == "ceph" else 1   # the ceph budget is split over the nodes' servers
                assert adapter["max_capacity_gb"] * GIB * servers == pytest.approx(cache.capacity, abs=servers)
                assert adapter["eviction"]["eviction_policy"] == LMCACHE_MP_NAME.get(policy(cache), policy(cache))
                assert adapter["eviction"]["trigger_watermark"] == cache.watermark
                assert adapter["eviction"]["eviction_ratio"] == cache.ratio
    if r.kv_offloading is not None:                 # vLLM's native CPU tier: the connector's extra config
        transfer = json.loads(vllm["--kv-transfer-config"][0])
        extra, tier = transfer["kv_connector_extra_config"], sim.native.cache(0)
        assert transfer["kv_connector"] == "OffloadingConnector" and sim.lmcache is None
        assert extra["cpu_bytes_to_use"] == tier.capacity == r.kv_offloading.capacity_bytes
        assert extra["block_size"] == sim.native.chunk_tokens
        assert extra["eviction_policy"] == policy(tier).lower()
        assert len(sim.native.caches["ddr"]) == r.instances             # one tier per vLLM instance
    if r.ceph is not None:
        ceph = role_vars(root, "ceph")
        assert len(sim.fabric.placement(12345)) == ceph["ceph_pool_size"] == r.ceph.pool_size
        assert ceph["ceph_pool_min_size"] == r.ceph.pool_min_size and ceph["ceph_pool_pg_num"] == r.ceph.pool_pg_num
        assert ceph["ceph_device_class"] == r.ceph.device_class.name
        assert ceph["ceph_failure_domain"] == r.ceph.failure_domain
        ceph_cache = sim.lmcache.caches["ceph"][0] if sim.lmcache and "ceph" in sim.lmcache.caches else None
        if ceph_cache is not None and isinstance(ceph_cache, TTL):
            assert ceph["ceph_rgw_expiration_days"] * 86400 == ceph_cache.ttl
        else:
            assert ceph["ceph_rgw_expiration_days"] is None


def test_mp_batch_eviction_changed_in_resolved_changes_the_simulator_and_the_render(tmp_path):
    """The watermark and ratio are LMCache's defaults, but the render does not lean on that: it writes what
    `Resolved` says, and so does the simulator build its caches."""
    r = resolve(load(REPO / "examples" / "local.yaml"))
    assert r.lmcache.mode == "mp"
    changed = r.model_copy(update={"lmcache": r.lmcache.model_copy(update={"eviction_watermark": 0.9,
                                                                           "eviction_ratio": 0.25})})
    caches = Simulation(changed).lmcache.caches
    assert {(c[0].watermark, c[0].ratio) for c in caches.values()} == {(0.9, 0.25)}
    server = flags(role_vars(render(changed, inventory_for(changed, tmp_path), tmp_path / "run", KEYS).root,
                             "lmcache")["lmcache_server_args"])
    assert (server["--eviction-trigger-watermark"], server["--eviction-ratio"]) == (["0.9"], ["0.25"])
    assert {(a["eviction"]["trigger_watermark"], a["eviction"]["eviction_ratio"])
            for a in map(json.loads, server["--l2-adapter"])} == {(0.9, 0.25)}


def test_every_shipped_example_but_the_invalid_one_is_deployable():
    names = {p.stem for p in deployable()}
    assert {"chat-llama2-13b", "codegen-70b", "mooncake-replay", "local"} <= names
