"""A hit ratio means the same thing under load: each request's prefix lookup counts once.

vLLM preempts a request when its HBM blocks run out and later admits it again to recompute it;
that second admission asks LMCache again. The simulator counts a request's lookup at its first
admission only (`lookup_chunks`, `hit_chunks`, `chunk_hit_ratio`, `lmcache_hit_ratio`) and
reports the lookups of re-admissions apart (`relookup_chunks`, `relookup_hit_chunks`,
`relookup_chunk_hit_ratio` per tier; `relookups`, `relookup_hit_ratio` for the run). So under
load the ddr chunk hit ratio is what a plain replay of the trace through LMCache's chunk rules
gives, however many preemptions the load causes.

The trace is the whole public Mooncake conversation trace (12,031 requests, at its own
timestamps) from the shared traces folder beside the repository (shared/traces/README.md):
one instance simulates it in 8-20 s on a 2-core machine (well under the minute a test may take),
so the test replays all of it rather than its first N requests.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from pathlib import Path

import pytest
import yaml

from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.spec import from_mapping

from conftest import REPO

TRACE = REPO.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
TRACE_SHA256 = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"   # shared/traces/README.md
CHUNK, TRACE_BLOCK, DDR_CHUNKS = 256, 512, 20_000


def conversation_trace() -> Path:
    assert TRACE.is_file(), f"the full Mooncake conversation trace is expected at {TRACE} (shared/traces/README.md)"
    assert hashlib.sha256(TRACE.read_bytes()).hexdigest() == TRACE_SHA256, f"{TRACE} is not the published trace"
    return TRACE


def replay_spec(trace: Path, **serving) -> dict:
    """examples/mooncake-replay.yaml on one instance at the trace's own rate, LMCache with one ddr tier
    of exactly DDR_CHUNKS chunks under LRU. vLLM keeps its default scheduler settings (max_num_seqs,
    max_num_batched_tokens unset) and its prefix cache. In-process mode: its LocalCPU tier evicts on
    demand, one chunk at a time, like the replay's LRU (MP mode's L1 evicts in batches at a watermark)."""
    spec = yaml.safe_load((REPO / "examples" / "mooncake-replay.yaml").read_text())
    spec.pop("ceph")
    spec["serving"] |= {"instances": 1, **serving}
    spec["workload"]["trace"] = {"path": str(trace), "block_size": TRACE_BLOCK, "time_scale": 1.0}
    spec["lmcache"] = {"mode": "inprocess", "chunk_size": CHUNK, "ddr": {"size": "1GiB", "eviction": "LRU"}}
    chunk_bytes = resolve(from_mapping(spec)).lmcache.chunk_bytes      # the model's KV bytes of one chunk
    spec["lmcache"]["ddr"]["size"] = DDR_CHUNKS * chunk_bytes
    return spec


def lmcache_replay(trace: Path, capacity: int) -> tuple[int, int]:
    """(chunks looked up, chunks hit) replaying `trace` in arrival order through LMCache's chunk rules,
    with every store instantaneous, into an LRU of `capacity` chunks.

    A prompt's full 256-token chunks are keyed as LMCache keys them, each key a hash of the previous
    key and the chunk's tokens; a chunk's tokens are named by the trace block holding them (equal
    hash_ids hold equal tokens) and the chunk's offset in it. The trailing partial chunk is neither
    looked up nor stored. A lookup stops at the first chunk not held; the held ones are touched, the
    rest stored at once, oldest evicted first.
    """
    lru: OrderedDict[int, None] = OrderedDict()
    looked = hit = 0
    with trace.open() as lines:
        for line in lines:
            row = json.loads(line)
            keys, key = [], None
            for end in range(CHUNK, row["input_length"] + 1, CHUNK):
                block = (end - 1) // TRACE_BLOCK
                key = hash((key, row["hash_ids"][block], end - block * TRACE_BLOCK))
                keys.append(key)
            held = 0
            while held < len(keys) and keys[held] in lru:
                held += 1
            looked, hit = looked + len(keys), hit + held
            for k in keys[:held]:
                lru.move_to_end(k)
            for k in keys[held:]:
                lru[k] = None
                if len(lru) > capacity:
                    lru.popitem(last=False)
    return looked, hit


@pytest.fixture(scope="module")
def replayed():
    """(the simulator's result, chunks the replay looked up, chunks it hit) for the whole trace."""
    trace = conversation_trace()
    r = resolve(from_mapping(replay_spec(trace)))
    assert r.lmcache.tier("ddr").capacity_chunks == DDR_CHUNKS and r.lmcache.tier("ddr").caches == 1
    return run(r), *lmcache_replay(trace, DDR_CHUNKS)


def test_ddr_chunk_hit_ratio_under_preemption_is_the_replays(replayed):
    res, looked, hit = replayed
    ddr = res.tier("ddr")
    print(f"\nddr chunk hit ratio: simulator {ddr.chunk_hit_ratio:.4f}, LMCache replay {hit / looked:.4f} "
          f"({res.preemptions:,} preemptions)")
    assert res.preemptions > 0                            # the load preempts
    assert ddr.lookup_chunks == looked                    # every request's full chunks, asked once
    assert abs(ddr.chunk_hit_ratio - hit / looked) <= 0.005
    print(f"re-lookups: {res.relookups:,} asked {ddr.relookup_chunks:,} chunks, "
          f"{ddr.relookup_chunk_hit_ratio:.3f} of them held")
    assert res.relookups > 0                              # re-admissions looked up again, counted apart


def test_relookups_are_reported_apart_and_the_lmcache_hit_ratio_counts_first_lookups(replayed):
    res, _, _ = replayed
    ddr = res.tier("ddr")
    assert 0 < ddr.relookup_hit_chunks <= ddr.relookup_chunks
    assert ddr.relookup_chunk_hit_ratio == ddr.relookup_hit_chunks / ddr.relookup_chunks
    assert 0 < res.relookup_hit_ratio <= 1
    # one tier: the held prefix of each request's first lookup over every prompt token
    assert res.lmcache_hit_ratio == ddr.hit_chunks * CHUNK / res.prompt_tokens


TOY = {"name": "toy", "attention": "mha", "num_layers": 1, "hidden_size": 64, "num_attention_heads": 1,
       "num_kv_heads": 1, "head_dim": 64, "intermediate_size": 128, "vocab_size": 1000, "params": 1e6,
       "max_context": 131072}


def toy_run(tmp_path, prompts: list[list[int]], prefix_caching: bool):
    """One-chunk prompts (hash id, then one unique token) 100 s apart through a toy model whose HBM
    keeps every block, and a ddr tier of two chunks under LRU."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": i * 100_000, "input_length": CHUNK + 1, "output_length": 1,
                                         "hash_ids": ids + [1_000_000 + i]}) + "\n" for i, ids in enumerate(prompts)))
    spec = {"name": "toy", "model": TOY,
            "serving": {"gpu": "H100-SXM", "gpus_per_node": 1, "block_size": CHUNK, "kv_cache_memory": "64MiB",
                        "max_model_len": 131072, "prefix_caching": prefix_caching},
            "lmcache": {"mode": "inprocess", "chunk_size": CHUNK, "ddr": {"size": 2 * CHUNK * 256, "eviction": "LRU"}},
            "workload": {"kind": "trace", "trace": {"path": str(trace), "block_size": CHUNK}}}
    return run(resolve(from_mapping(spec)))


def test_a_chunk_vllm_serves_from_hbm_is_still_refreshed_in_lmcache(tmp_path):
    """vLLM asks LMCache about the whole prompt and loads only what its own prefix cache lacks; LMCache
    refreshes every chunk the lookup found (0.5.6: the lookup pins its hits, then `touch_cache` updates
    the policy for each), so vLLM's prefix cache changes what is loaded, not what LMCache keeps.

    a, b stored; a asked again (vLLM's HBM has it); c stored, evicting b, the least recently used;
    b misses. Without the refresh, a would have gone and b hit."""
    a, b, c = 1, 2, 3
    prompts = [[a], [b], [a], [c], [b]]
    with_hbm, without = toy_run(tmp_path, prompts, prefix_caching=True), toy_run(tmp_path, prompts, prefix_caching=False)
    assert with_hbm.per_request[2].hbm_tokens == CHUNK and with_hbm.per_request[2].ddr_tokens == 0
    assert without.per_request[2].ddr_tokens == CHUNK
    for res in (with_hbm, without):
        assert res.tier("ddr").hit_chunks == 1            # the second a; the second b missed
    assert with_hbm.tier("ddr").chunk_hit_ratio == without.tier("ddr").chunk_hit_ratio
