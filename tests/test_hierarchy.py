"""Where each prompt's KV comes from: HBM, ddr, nvme, ceph or recomputation, chunk for chunk.

The runs use a toy model whose numbers are easy to follow: one layer, one KV head of width 64
in bf16, so a token is 256 bytes and a 256-token chunk 64 KiB. Requests come from small
hand-written traces with 256-token blocks, so one trace block is one LMCache chunk, and they
arrive 100 s apart so that every asynchronous write has landed before the next request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.spec import from_mapping

CHUNK = 256
CHUNK_BYTES = 256 * 256
FIXTURE = Path(__file__).parent / "fixtures" / "mooncake_conversation_head2000.jsonl"

TOY = {"name": "toy", "attention": "mha", "num_layers": 1, "hidden_size": 64, "num_attention_heads": 1,
       "num_kv_heads": 1, "head_dim": 64, "intermediate_size": 128, "vocab_size": 1000, "params": 1e6,
       "max_context": 131072}


def toy_run(tmp_path, requests, *, mode="inprocess", ddr=None, nvme=None, ceph=None, prefix_caching=False,
            block_size=CHUNK, time_scale=1.0, seed=0, simulate_only=False, **lmcache):
    """Simulate `requests` = [(hash_ids, input_length, output_length), ...], 100 s apart.

    A trailing partial block gets an id of its own (unique to the request), as in Mooncake traces.
    """
    trace = tmp_path / "trace.jsonl"
    lines = []
    for i, (ids, n, out) in enumerate(requests):
        ids = ids + [1_000_000 + i] * (-(-n // block_size) - len(ids))
        lines.append(json.dumps({"timestamp": i * 100_000, "input_length": n, "output_length": out, "hash_ids": ids}))
    trace.write_text("\n".join(lines) + "\n")
    tiers = {name: tier for name, tier in (("ddr", ddr), ("nvme", nvme), ("ceph", ceph)) if tier}
    spec = {"name": "toy", "model": TOY, "simulate_only": simulate_only,
            "serving": {"gpu": "H100-SXM", "gpus_per_node": 1, "block_size": 16, "kv_cache_memory": "1MiB",
                        "max_model_len": 4096, "prefix_caching": prefix_caching},
            "lmcache": {"mode": mode, "chunk_size": CHUNK, **tiers, **lmcache},
            "workload": {"kind": "trace", "trace": {"path": str(trace), "block_size": block_size,
                                                    "time_scale": time_scale}}}
    if ceph:
        spec["ceph"] = {"hosts": 1, "osd_size": "1GiB", "failure_domain": "osd", "pool": {"size": 1, "min_size": 1, "pg_num": 8}}
    return run(resolve(from_mapping(spec)), seed=seed)


def chunks(n: int) -> int:
    return n * CHUNK_BYTES


def test_a_repeated_prompt_hits_its_full_chunks_and_recomputes_the_partial_tail(tmp_path):
    res = toy_run(tmp_path, [([1, 2, 3, 4], 3 * CHUNK + 100, 1)] * 2, ddr={"size": chunks(8)})
    first, second = res.per_request.rows()
    assert first.recomputed_tokens == 3 * CHUNK + 100
    assert (second.ddr_tokens, second.recomputed_tokens) == (3 * CHUNK, 100)   # the partial 4th chunk never hits
    assert res.tier("ddr").stored_chunks == 3                                    # ... and is never stored


def test_a_full_prompt_hit_still_recomputes_one_token(tmp_path):
    res = toy_run(tmp_path, [([1, 2], 2 * CHUNK, 1)] * 2, ddr={"size": chunks(8)})
    assert (res.per_request[1].ddr_tokens, res.per_request[1].recomputed_tokens) == (2 * CHUNK - 1, 1)


def test_lookup_stops_at_the_first_missing_chunk(tmp_path):
    reqs = [([1, 2, 3], 3 * CHUNK, 1),   # stores 1, 2, 3: ddr (3 chunks) is full
            ([1], CHUNK, 1),             # hits 1, which refreshes it: 2 is now the least recently used
            ([4], CHUNK, 1),             # stores 4, evicting 2
            ([1, 2, 3], 3 * CHUNK, 1)]   # 1 is held, 2 is not: 3, though held, is not reached
    res = toy_run(tmp_path, reqs, ddr={"size": chunks(3)})
    assert (res.per_request[3].ddr_tokens, res.per_request[3].recomputed_tokens) == (CHUNK, 2 * CHUNK)


def test_a_prefix_is_split_across_tiers_and_inprocess_promotes_into_ddr(tmp_path):
    reqs = [([1, 2, 3, 4], 4 * CHUNK + 1, 1),   # stores 1-4 everywhere; ddr (2 chunks) keeps 3, 4
            ([1, 2], 2 * CHUNK + 1, 1),          # 1, 2 come from nvme and are written back into ddr
            ([1, 2, 3, 4], 4 * CHUNK + 1, 1)]    # ddr has 1, 2 (promoted); nvme the rest
    res = toy_run(tmp_path, reqs, ddr={"size": chunks(2)}, nvme={"size": chunks(100)})
    second, third = res.per_request[1], res.per_request[2]
    assert (second.ddr_tokens, second.nvme_tokens) == (0, 2 * CHUNK)
    assert res.tier("ddr").promoted_chunks >= 2
    assert (third.ddr_tokens, third.nvme_tokens) == (2 * CHUNK, 2 * CHUNK)


def test_mp_mode_does_not_keep_l2_hits_in_l1(tmp_path):
    reqs = [([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 10 * CHUNK + 1, 1),   # L1 (10 chunks) batch-evicts as it fills
            ([1, 2], 2 * CHUNK + 1, 1), ([1, 2], 2 * CHUNK + 1, 1)]
    res = toy_run(tmp_path, reqs, mode="mp", ddr={"size": chunks(10)}, nvme={"size": chunks(100)})
    assert res.tier("ddr").promoted_chunks == 0
    assert res.per_request[1].nvme_tokens == res.per_request[2].nvme_tokens == 2 * CHUNK


def test_mp_l1_evicts_a_fifth_of_its_bytes_once_it_is_four_fifths_full(tmp_path):
    res = toy_run(tmp_path, [(list(range(1, 9)), 8 * CHUNK + 1, 1)], mode="mp", ddr={"size": chunks(10)})
    ddr = res.tier("ddr")
    assert (ddr.stored_chunks, ddr.evictions, ddr.final_used_bytes) == (8, 2, chunks(6))


def test_inprocess_l1_evicts_one_object_at_a_time_on_demand(tmp_path):
    res = toy_run(tmp_path, [(list(range(1, 9)), 8 * CHUNK + 1, 1)], ddr={"size": chunks(5)})
    ddr = res.tier("ddr")
    assert (ddr.stored_chunks, ddr.evictions, ddr.final_used_bytes) == (8, 3, chunks(5))


def test_stores_write_through_to_every_tier_and_skip_chunks_already_hit(tmp_path):
    res = toy_run(tmp_path, [([1, 2], 2 * CHUNK + 1, 1), ([1, 2, 3], 3 * CHUNK + 1, 1)],
                  ddr={"size": chunks(10)}, nvme={"size": chunks(10)}, ceph={"size": chunks(10)})
    for tier in ("ddr", "nvme", "ceph"):
        assert res.tier(tier).stored_chunks == 3          # 1, 2 from the first; only 3 from the second
        assert res.tier(tier).bytes_written == chunks(3)


def test_the_inprocess_ceph_tier_never_evicts_it_refuses_when_full(tmp_path):
    reqs = [(list(range(10 * i + 1, 10 * i + 5)), 4 * CHUNK + 1, 1) for i in range(3)]
    res = toy_run(tmp_path, reqs, ddr={"size": chunks(4)}, ceph={"size": chunks(6), "eviction": "none"})
    ceph = res.tier("ceph")
    assert (ceph.evictions, ceph.stored_chunks, ceph.refused_chunks) == (0, 6, 6)


def test_the_ceph_tier_expires_by_ttl_like_an_rgw_lifecycle_rule(tmp_path):
    reqs = [([1, 2], 2 * CHUNK + 1, 1), ([1, 2], 2 * CHUNK + 1, 1)]          # 100 s apart
    fresh = toy_run(tmp_path, reqs, ddr={"size": chunks(1)}, ceph={"size": chunks(10), "eviction": "none", "ttl": "1h"},
                    simulate_only=True)   # RGW lifecycles count whole days; an hour is for simulation only
    stale = toy_run(tmp_path, reqs, ddr={"size": chunks(1)}, ceph={"size": chunks(10), "eviction": "none", "ttl": "50s"},
                    simulate_only=True)
    assert fresh.per_request[1].ceph_tokens == 2 * CHUNK
    assert stale.per_request[1].ceph_tokens == 0 and stale.tier("ceph").expired == 2


def test_min_retrieve_tokens_skips_small_hits(tmp_path):
    reqs = [([1, 2], 2 * CHUNK + 1, 1)] * 2
    assert toy_run(tmp_path, reqs, ddr={"size": chunks(4)}).per_request[1].ddr_tokens == 2 * CHUNK
    skipped = toy_run(tmp_path, reqs, ddr={"size": chunks(4)}, min_retrieve_tokens=1000).per_request[1]
    assert (skipped.ddr_tokens, skipped.recomputed_tokens) == (0, 2 * CHUNK + 1)


def test_generated_tokens_are_stored_only_with_save_decode_cache(tmp_path):
    reqs = [([1, 2], 2 * CHUNK, 3 * CHUNK)]
    assert toy_run(tmp_path, reqs, ddr={"size": chunks(10)}).tier("ddr").stored_chunks == 2
    assert toy_run(tmp_path, reqs, ddr={"size": chunks(10)}, save_decode_cache=True).tier("ddr").stored_chunks == 5


def test_vllm_prefix_cache_serves_first_and_lmcache_only_loads_the_rest(tmp_path):
    # HBM holds 4096 tokens (1 MiB of 16-token blocks); a 3-chunk prompt fits whole.
    res = toy_run(tmp_path, [([1, 2, 3], 3 * CHUNK + 1, 1)] * 2, ddr={"size": chunks(8)}, prefix_caching=True)
    second = res.per_request[1]
    assert second.hbm_tokens == 3 * CHUNK and second.ddr_tokens == 0
    assert res.tier("ddr").hit_chunks == 3       # LMCache held them; vLLM needed none of them


# ---- properties on a slice of the real Mooncake conversation trace ----------------------------

def mooncake(tmp_path, limit=300, **tiers):
    """The first `limit` requests of the real trace, re-timed 100 s apart so none overlap."""
    trace = tmp_path / "slice.jsonl"
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()[:limit]]
    trace.write_text("".join(json.dumps({**row, "timestamp": i * 100_000}) + "\n" for i, row in enumerate(rows)))
    spec = {"name": "slice", "model": TOY,
            "serving": {"gpu": "H100-SXM", "gpus_per_node": 1, "block_size": 16, "kv_cache_memory": "64MiB",
                        "max_model_len": 131072, "prefix_caching": False},
            "lmcache": {"mode": tiers.pop("mode", "inprocess"), "chunk_size": CHUNK, **tiers},
            "workload": {"kind": "trace", "trace": {"path": str(trace)}}}
    if "ceph" in tiers:
        spec["ceph"] = {"hosts": 1, "osd_size": "10GiB", "failure_domain": "osd", "pool": {"size": 1, "min_size": 1, "pg_num": 8}}
    return run(resolve(from_mapping(spec)))


def ideal_chunk_hits(limit=300) -> int:
    """Infinite cache, straight from the trace: each request hits its longest already-seen prefix."""
    seen, hits = set(), 0
    for line in FIXTURE.read_text().splitlines()[:limit]:
        row = json.loads(line)
        keys = [(row["hash_ids"][(e - 1) // 512], e - (e - 1) // 512 * 512)
                for e in range(CHUNK, row["input_length"] + 1, CHUNK)]
        n = 0
        while n < len(keys) and keys[n] in seen:
            n += 1
        hits += n
        seen.update(keys)
    return hits


def test_infinite_capacity_gives_the_traces_ideal_reuse(tmp_path):
    res = mooncake(tmp_path, ddr={"size": "100GiB"})
    assert res.tier("ddr").hit_chunks == ideal_chunk_hits() > 0


def test_lru_hit_ratio_never_falls_as_capacity_grows(tmp_path):
    hits = [mooncake(tmp_path, ddr={"size": chunks(n), "eviction": "LRU"}).tier("ddr").hit_chunks
            for n in (8, 64, 512, 4096)]
    assert hits == sorted(hits) and hits[0] < hits[-1]


@pytest.mark.parametrize("mode, policy", [("inprocess", "LRU"), ("inprocess", "LFU"), ("inprocess", "FIFO"),
                                          ("inprocess", "MRU"), ("mp", "LRU"), ("mp", "ARC")])
def test_no_tier_exceeds_its_capacity_and_bytes_are_conserved(tmp_path, mode, policy):
    ceph = {"size": chunks(300), "eviction": "none" if mode == "inprocess" else "LRU", "ttl": "1d"}
    res = mooncake(tmp_path, mode=mode, ddr={"size": chunks(40), "eviction": policy},
                   nvme={"size": chunks(150), "eviction": policy}, ceph=ceph)
    for tier in res.tiers[1:]:
        assert tier.peak_used_bytes <= tier.capacity_bytes
        assert all(used <= tier.capacity_bytes for _, used in tier.occupancy)
        assert tier.bytes_written == tier.final_used_bytes + tier.evicted_bytes + tier.expired * CHUNK_BYTES
    shares = sum(t.served_tokens for t in res.tiers) + res.recomputed_tokens
    assert shares == res.prompt_tokens
