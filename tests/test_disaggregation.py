"""Prefill/decode disaggregation (issue 51): the spec, each pool resolved, the simulated KV transfer, the render's refusal.

A spec says serving.disaggregation: prefill and decode pools, the connector and the network between them. Each pool
resolves as an aggregated deployment of its own; the simulator sends each request to a prefill instance with
max_tokens=1, moves its KV to a decode instance (vLLM's NixlConnector: the decode side reads it once it has given
the request its blocks; LMCache's PD mode: the prefill side pushes it), and decodes it there in batches without
prefills. An aggregated spec's results are what they were before disaggregation existed, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from kvplan.cost import cost_of, gpu_hour_usd
from kvplan.deploy.helm import refusals
from kvplan.deploy.render import check_deployable
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.sim.result import SimResult
from kvplan.sim.engine import Probe
from kvplan.sim.run import Simulation, run
from kvplan.sim.steptime import StepTime
from kvplan.spec import from_mapping

from conftest import REPO, inventory_for, with_changes

PROMPT, OUTPUT = 4000, 20
"""One request's lengths in the timing tests."""

BASE = {
    "name": "pd-test", "simulate_only": True, "model": "Llama-3.1-8B",
    "serving": {"gpu": "H100-SXM", "max_model_len": 8192,
                "disaggregation": {"prefill": {"instances": 1, "tensor_parallel": 1, "max_num_batched_tokens": 8192},
                                   "decode": {"instances": 1, "tensor_parallel": 2, "max_num_seqs": 64},
                                   "connector": "nixl", "network": "100GbE"}},
    "workload": {"kind": "rag", "seed": 1, "requests": 1, "arrivals": {"process": "poisson", "rate": "1/s"},
                 "prompt": {"dist": "fixed", "mean": PROMPT}, "output": {"dist": "fixed", "mean": OUTPUT}},
}
"""Llama-3.1-8B on H100s: one prefill instance of TP 1, one decode instance of TP 2, one request, no LMCache."""


def pd(**changes):
    return from_mapping(with_changes(BASE, **changes))


def problems(**changes) -> dict[str, str]:
    with pytest.raises(SpecError) as err:
        resolve(pd(**changes))
    return {p.path: p.render() for p in err.value.problems}


# ---------------------------------------------------------------------------------------------- the spec

def test_each_pool_resolves_as_its_own_deployment_and_the_whole_counts_both():
    r = resolve(pd())
    d = r.disaggregation
    assert (d.prefill.instances, d.prefill.tensor_parallel, d.decode.instances, d.decode.tensor_parallel) == (1, 1, 1, 2)
    assert (d.prefill.max_num_batched_tokens, d.decode.max_num_seqs) == (8192, 64)
    assert (r.instances, r.gpus_total) == (2, 3)
    assert r.hbm_bytes == d.prefill.hbm_bytes + d.decode.hbm_bytes
    # Llama-3.1-8B in bf16: 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 128 KiB per token. A decode rank holds 4 of
    # the 8 heads and reads them from the one prefill rank, which sends all 8 (to both decode ranks).
    assert (d.decode_bytes_per_token_per_port, d.prefill_bytes_per_token_per_port) == (64 * 1024, 128 * 1024)
    assert d.network.bandwidth == 100e9 / 8 and d.connector == "nixl"


def test_a_pool_may_run_on_another_gpu():
    d = resolve(pd(serving__disaggregation__decode__gpu="H200")).disaggregation
    assert (d.prefill.device.name, d.decode.device.name) == ("H100-SXM", "H200")
    assert d.decode.hbm_blocks > d.prefill.hbm_blocks


def test_an_aggregated_spec_keeps_its_hash_and_its_resolved_json():
    plain = from_mapping(with_changes(BASE, serving__disaggregation=None, simulate_only=None))
    same = from_mapping(with_changes(BASE, serving__disaggregation=None, simulate_only=None))
    assert plain.serving.disaggregation is None and plain.spec_hash() == same.spec_hash()
    assert "disaggregation" not in plain.model_dump_json(exclude={"serving": {"disaggregation"}})
    r = resolve(plain)
    assert r.disaggregation is None and '"disaggregation"' not in r.model_dump_json()


def test_connector_nixl_needs_no_simulate_only_and_lmcache_is_refused_with_the_reason():
    """kvplan deploys vLLM's NixlConnector behind vllm-router (tests/test_disagg_deploy.py); LMCache's PD mode needs
    a proxy that vllm-router is not, so connector: lmcache and its buffer_size need simulate_only: true."""
    assert pd(simulate_only=None).serving.disaggregation.connector == "nixl"
    with pytest.raises(SpecError) as err:
        pd(simulate_only=None, serving__disaggregation__connector="lmcache", serving__disaggregation__buffer_size="4GiB")
    found = {p.path: p for p in err.value.problems}
    assert set(found) == {"serving.disaggregation.connector", "serving.disaggregation.buffer_size"}
    assert "disagg_spec" in found["serving.disaggregation.connector"].message
    assert "vllm-router 0.1.17" in found["serving.disaggregation.connector"].message
    assert "simulate_only: true" in err.value.render()


@pytest.mark.parametrize("field, value", [("instances", 4), ("tensor_parallel", 2), ("max_num_seqs", 32),
                                          ("max_num_batched_tokens", 4096)])
def test_an_aggregated_pool_setting_beside_the_pools_is_refused_not_ignored(field, value):
    with pytest.raises(SpecError) as err:
        pd(**{f"serving__{field}": value})
    found = {p.path: p for p in err.value.problems}
    assert found[f"serving.{field}"].fix == f"move it to serving.disaggregation.prefill.{field} and .decode.{field}"


def test_llm_ds_router_is_refused_with_the_reason():
    with pytest.raises(SpecError, match="llm-d's disaggregated path .* is not modelled"):
        pd(serving__router="llm_d")
    with pytest.raises(SpecError, match="the proxy picks the instances"):
        pd(serving__router="least_loaded")


def test_native_offloading_beside_it_is_refused_naming_multiconnector():
    with pytest.raises(SpecError, match="MultiConnector"):
        pd(serving__kv_offloading={"size": "8GiB"})


def test_a_decode_tp_that_is_not_a_multiple_of_the_prefill_tp_is_refused():
    with pytest.raises(SpecError) as err:
        pd(serving__disaggregation__prefill__tensor_parallel=2, serving__disaggregation__decode__tensor_parallel=1)
    p = next(p for p in err.value.problems if p.path == "serving.disaggregation.decode.tensor_parallel")
    assert "tp_ratio" in p.message and p.allowed == "2, 4, 8, ..."


def test_a_pool_tp_must_divide_the_node():
    with pytest.raises(SpecError) as err:
        pd(serving__gpus_per_node=4, serving__disaggregation__decode__tensor_parallel=8)
    assert "serving.disaggregation.decode.tensor_parallel" in {p.path for p in err.value.problems}


def test_lmcache_pd_mode_needs_lmcache_inside_vllm():
    with pytest.raises(SpecError, match="LMCache's PD mode runs inside vLLM"):
        pd(serving__disaggregation__connector="lmcache", lmcache={"mode": "mp", "ddr": {"size": "8GiB"}})


def test_catalog_problems_are_named_by_the_pool_field():
    found = problems(serving__disaggregation__decode__gpu="H900", serving__disaggregation__network="7GbE")
    assert "serving.disaggregation.decode.gpu" in found and "serving.disaggregation.network" in found


def test_a_pool_that_cannot_hold_the_model_says_which_pool():
    # Llama-3.1-70B's weights do not fit one H100: the prefill pool (TP 1) is refused by its own field
    found = problems(model="Llama-3.1-70B", serving__disaggregation__decode__tensor_parallel=4)
    assert list(found) == ["serving.disaggregation.prefill.tensor_parallel"], found
    # at TP 2 they fit, but not a whole 131072-token sequence beside them: a serving setting both pools share,
    # said to be the prefill pool's problem (the decode pool, TP 4, holds one)
    found = problems(model="Llama-3.1-70B", serving__max_model_len=None,
                     serving__disaggregation__prefill__tensor_parallel=2,
                     serving__disaggregation__decode__tensor_parallel=4)
    assert list(found) == ["serving.max_model_len"] and found["serving.max_model_len"].startswith(
        "serving.max_model_len: (the prefill pool) one 131072-token sequence does not fit"), found


def test_each_pool_costs_its_own_accelerator_and_every_gpu_a_kv_port(catalog):
    topo = pd(serving__disaggregation__decode__gpu="H200")
    cost = cost_of(topo, resolve(topo))
    hbm = [line for line in cost.tiers if line.tier == "hbm"]
    assert [(line.quantity, line.what) for line in hbm] == [(1, "1 x H100-SXM (1 x TP 1 prefill)"),
                                                            (2, "2 x H200 (1 x TP 2 decode)")]
    assert hbm[1].usd_per_unit_hour == gpu_hour_usd(topo, "H200", catalog) != hbm[0].usd_per_unit_hour
    port = next(line for line in cost.tiers if line.tier == "network")
    assert (port.quantity, port.what) == (3, "3 GPU(s) x 100GbE (KV transfer)")


# ---------------------------------------------------------------------------------------------- the render

def test_the_ansible_render_takes_it_and_the_helm_path_refuses_it_with_the_reason(tmp_path):
    r = resolve(pd(simulate_only=None))
    assert r.simulation_only == []
    check_deployable(r, inventory_for(r, tmp_path))          # no refusal: tests/test_disagg_deploy.py renders it
    why = {p.path: p.message for p in refusals(r)}
    assert "select_decode_endpoint" in why["serving.disaggregation"]


# ---------------------------------------------------------------------------------------------- the simulation

def idle_ttft_parts(r) -> tuple[float, float, float, float]:
    """What one request on idle pools costs, from the same models the simulator uses: (prefill steps, transfer, the
    decode instance's first step, the two legs' HTTP overheads)."""
    d = r.disaggregation
    p, dec = d.prefill, d.decode
    prefill = StepTime(p).step([(PROMPT, 0)], 0, 0)                 # one chunk: the budget (8192) holds the prompt
    transfer = d.network.latency + max(PROMPT * d.prefill_bytes_per_token_per_port,   # the whole prompt's KV
                                       PROMPT * d.decode_bytes_per_token_per_port) / d.network.bandwidth
    first = StepTime(dec).step([(1, PROMPT - 1)], 0, 0)             # the last prompt token, recomputed
    return prefill, transfer, first, 2 * p.step.request_overhead


def test_an_idle_requests_ttft_is_prefill_then_transfer_then_the_first_decode_step():
    r = resolve(pd())
    res = run(r)
    prefill, transfer, first, http = idle_ttft_parts(r)
    # On idle pools nothing waits: each engine schedules an arrival at once, the read starts when the decode
    # instance admits the request, and the request is scheduled as soon as the read lands. Every part is a sum of
    # the same floating-point numbers, so the only tolerance is rounding (1e-9 s).
    assert res.ttft.mean == pytest.approx(prefill + transfer + first + http, abs=1e-9)
    d = res.disaggregation
    assert d.prefill.mean == pytest.approx(prefill, abs=1e-9)
    assert d.transfer.mean == pytest.approx(transfer, abs=1e-9)
    assert d.first_step.mean == pytest.approx(first, abs=1e-9)
    assert d.prefill_queue.mean == d.decode_queue.mean == 0.0
    assert (d.transfers, d.transfer_bytes) == (1, PROMPT * 128 * 1024)
    assert res.per_request.instance[0] == 1                            # the decode instance's row


def test_a_slower_link_raises_ttft_by_the_transfer_time():
    fast = resolve(pd())
    slow = resolve(pd(serving__disaggregation__network="25GbE"))
    gap = run(slow).ttft.mean - run(fast).ttft.mean
    # 4000 tokens x 128 KiB from the prefill rank's port: 524 MB at 25 Gbit/s instead of 100 Gbit/s
    nbytes = PROMPT * 128 * 1024
    assert gap == pytest.approx(nbytes / (25e9 / 8) - nbytes / (100e9 / 8), abs=1e-9)
    assert gap > 0.1


def test_a_port_bandwidth_override_is_the_links_rate():
    r = resolve(pd(serving__disaggregation__network_bandwidth="400Gbit"))
    assert r.disaggregation.network.bandwidth == 400e9 / 8
    assert run(r).disaggregation.transfer.mean < run(resolve(pd())).disaggregation.transfer.mean


def recorded_steps(sim: Simulation) -> dict[int, list[list[tuple[int, int]]]]:
    """Every step's prefill chunks (new tokens, computed before), per engine, as each step is scheduled (an engine's
    Probe: the installed simulator is compiled, so its step-time model cannot be wrapped)."""
    steps: dict[int, list] = {e.index: [] for e in sim.engines}
    for engine in sim.engines:
        engine.probe = Probe(on_prefills=lambda e, chunks: steps[e.index].append(chunks))
    return steps


def on_each_step(engine, seen) -> None:
    """Call `seen()` as each step of `engine` is scheduled."""
    engine.probe = Probe(on_step=lambda _e, _tokens: seen())


def test_decode_batches_carry_no_prefill_besides_each_prompts_last_token():
    # 60 requests of prompts of many lengths: the decode side reads each prompt's KV and recomputes its last token
    r = resolve(pd(workload__requests=60, workload__arrivals__rate="20/s",
                   workload__prompt={"dist": "lognormal", "mean": 3000, "cv": 0.5, "max": 6000}))
    sim = Simulation(r)
    steps = recorded_steps(sim)
    res = sim.run()
    assert res.requests == 60 and res.disaggregation.transfers == 60
    decode = [chunk for step in steps[1] for chunk in step]
    prompts = set(res.per_request.prompt_tokens.tolist())
    assert len(decode) == 60 and all(new == 1 and done + 1 in prompts for new, done in decode), decode[:5]
    prefill = [chunk for step in steps[0] for chunk in step]
    assert sum(new for new, _ in prefill) == int(res.per_request.prompt_tokens.sum())   # each prompt once, there
    assert res.engine_steps[1] > res.engine_steps[0]                    # the decode instance steps every token


def test_decode_kv_memory_bounds_admission():
    # 1 GiB of KV per GPU: the decode instance (TP 2) holds 16384 tokens = 1024 blocks; each request is given the
    # 188 blocks of its 3000-token prompt when it is admitted (and grows to 192), so at most 5 hold KV there at
    # once, and the others wait for blocks in the decode queue while the prefill instances finish more.
    r = resolve(pd(serving__kv_cache_memory="1GiB", serving__max_model_len=4096,
                   serving__disaggregation__prefill__instances=4, workload__requests=40,
                   workload__arrivals__rate="200/s", workload__prompt={"dist": "fixed", "mean": 3000},
                   workload__output={"dist": "fixed", "mean": 64}))
    dec = r.disaggregation.decode
    assert dec.hbm_blocks == 1024
    sim = Simulation(r)
    decode = sim.pools.decodes[0]
    most = []
    # requests holding KV there: running, receiving (`loading` counts them until they rejoin the queue), received
    on_each_step(decode, lambda: most.append(
        len(decode.running) + decode.loading + sum(seq.loaded for seq in decode.waiting)))
    res = sim.run()
    assert res.requests == 40 and max(most) == 1024 // 188
    assert res.disaggregation.decode_queue.p90 > 0.05
    roomy = run(resolve(pd(serving__max_model_len=4096, serving__disaggregation__prefill__instances=4,
                           workload__requests=40, workload__arrivals__rate="200/s",
                           workload__prompt={"dist": "fixed", "mean": 3000},
                           workload__output={"dist": "fixed", "mean": 64})))
    assert roomy.disaggregation.decode_queue.p90 < res.disaggregation.decode_queue.p90


def test_the_nixl_read_holds_the_prefill_blocks_until_it_is_done():
    # the prefill instance's blocks stay held after its one token (delay_free_blocks) and are freed by the read
    r = resolve(pd())
    sim = Simulation(r)
    held = []
    original = sim.pools.sent

    def sent(handoff):
        held.append(handoff.prefill.holding.blocks)
        original(handoff)
        held.append(handoff.prefill.holding.blocks)
    sim.pools.sent = sent
    sim.run()
    assert held == [PROMPT // 16, 0]             # the prompt's 250 blocks (the sampled token is never computed there)


LMCACHE = {"serving__disaggregation__connector": "lmcache", "lmcache": {"mode": "inprocess", "ddr": {"size": "8GiB"}}}


def test_with_lmcache_the_client_gets_the_prefills_token_once_the_kv_is_in_the_decode_buffer():
    # LMCache's proxy streams the prefill's token (ret_first_tok) after the KV is ready at the decode instance, and
    # asks the decode instance for the other output tokens: TTFT has no decode step in it, but the push
    r = resolve(pd(**LMCACHE))
    res = run(r)
    d = res.disaggregation
    prefill, transfer, _, http = idle_ttft_parts(r)
    assert d.connector == "lmcache" and d.transfers == 1 and d.transfer_bytes == PROMPT * 128 * 1024
    assert d.transfer.mean == pytest.approx(transfer, abs=1e-9)        # the same bytes over the same ports as nixl
    assert d.prefill.mean > prefill                                     # its step also saves the chunks to ddr
    assert res.ttft.mean == pytest.approx(d.prefill.mean + transfer + http, abs=1e-9)
    assert d.decode_queue.mean == 0.0 and d.first_step.mean > 0         # after the client's first token
    assert res.per_request[0].output_tokens == OUTPUT and res.tpot.mean > 0


def test_with_lmcache_a_one_token_request_never_reaches_the_decode_pool():
    res = run(resolve(pd(workload__output={"dist": "fixed", "mean": 1}, **LMCACHE)))
    assert res.requests == 1 and res.engine_steps[1] == 0 and res.per_request.instance[0] == 0
    assert res.tpot.mean == 0.0


def test_lmcaches_proxy_holds_requests_until_their_chunks_fit_in_the_decode_buffer():
    # 2 GiB by default: 2 GiB / (128 KiB x 256) = 64 chunks; a 4000-token prompt takes 16, so 4 at once; a buffer of
    # 512 MiB (16 chunks, a 4096-token prompt's) lets one through at a time, and the others wait before their prefill
    many = dict(workload__requests=8, workload__arrivals__rate="100/s", serving__disaggregation__prefill__instances=4,
                serving__max_model_len=4096)
    roomy = resolve(pd(**many, **LMCACHE))
    tight = resolve(pd(**many, **LMCACHE, serving__disaggregation__buffer_size="512MiB"))
    assert (roomy.disaggregation.buffer_slots, tight.disaggregation.buffer_slots) == (64, 16)
    sim = Simulation(tight)
    prefilling = []                              # requests in the prefill pool at each of its steps
    for engine in sim.pools.prefills:
        on_each_step(engine, lambda: prefilling.append(sum(len(e.running) + len(e.waiting) for e in sim.pools.prefills)))
    res = sim.run()
    assert res.requests == 8 and max(prefilling) == 1
    assert res.disaggregation.prefill_queue.p90 > run(roomy).disaggregation.prefill_queue.p90 + 0.05


def test_a_buffer_too_small_for_the_longest_prompt_is_refused():
    # LMCache's proxy raises for a request needing more slots than the buffer has: kvplan refuses the spec instead
    found = problems(serving__disaggregation__buffer_size="64MiB", **LMCACHE)
    assert "serving.disaggregation.buffer_size" in found
    assert "a 8192-token prompt (max_model_len) needs 32" in found["serving.disaggregation.buffer_size"]


def test_a_buffer_size_without_lmcaches_pd_mode_is_refused():
    with pytest.raises(SpecError, match="only connector: lmcache has"):
        pd(serving__disaggregation__buffer_size="1GiB")


def test_the_prefill_pool_keeps_its_lmcache_tier():
    # two prefill instances on one node share an LMCache server (mp): round robin sends the requests that open with
    # the same 2048-token prefix to both, and the one whose HBM lacks it loads it from the node's ddr tier
    r = resolve(pd(workload__requests=6, workload__kind="chat", workload__prompt={"dist": "fixed", "mean": 500},
                   workload__shared_prefixes={"count": 1, "tokens": 2048},
                   serving__disaggregation__prefill__instances=2, lmcache={"mode": "mp", "ddr": {"size": "8GiB"}}))
    res = run(r)
    ddr = res.tier("ddr")
    assert res.lmcache_mode == "mp" and ddr.stored_chunks > 0 and ddr.served_tokens > 0
    assert res.recomputed_tokens < res.prompt_tokens


# ---------------------------------------------------------------------------------------------- aggregated

AGGREGATED_JSON = {
    "docs/examples/native-offload.yaml": "2caa5e82dd9481e47fc29eab4ec0ea6f454b618a275dfd0f37001b7523c4cf2c",
    "examples/local.yaml": "33477549300ab06c476a892184ff79de226e505764821bbd7614558d3f1de3df",
}
"""sha256 of the result `kvplan simulate EXAMPLE --seed 3 --out FILE` wrote at the commit before disaggregation
(7c21335), as canonical JSON (keys sorted; the document's kind and schema_version, which came later, left out):
every key and every number of the result as it was."""


@pytest.mark.parametrize("example", sorted(AGGREGATED_JSON))
def test_an_aggregated_examples_result_is_byte_identical_to_before(example, tmp_path):
    out = tmp_path / "result.json"
    subprocess.run([sys.executable, "-m", "kvplan", "simulate", example, "--seed", "3", "--out", str(out)],
                   cwd=REPO, check=True, capture_output=True, timeout=300)
    data = json.loads(out.read_bytes())
    data.pop("kind"), data.pop("schema_version")
    assert hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest() == AGGREGATED_JSON[example]
    data.pop("cost")                              # the file's "cost" beside the result's keys (kvplan.cli.app)
    assert SimResult.model_validate(data).disaggregation is None   # a result written before reads back


def test_a_disaggregated_result_reads_back_from_its_json():
    res = run(resolve(pd(workload__requests=3)))
    back = SimResult.model_validate_json(res.model_dump_json())
    assert back.disaggregation == res.disaggregation and back.disaggregation.transfers == 3
    assert [link.name for link in back.links][-2:] == ["kv-tx/prefill0", "kv-rx/decode0"]
