"""vLLM's HBM prefix cache: finished requests' blocks stay cached and are reused LRU."""

from __future__ import annotations

from kvplan.sim.prefix_cache import PrefixCache


def run_request(cache, keys, total=None):
    """Look up, allocate, compute and finish one request whose full blocks are `keys`."""
    total = len(keys) if total is None else total
    hit = cache.match(keys)
    holding = cache.allocate(keys, hit, total)
    assert holding is not None
    cache.commit(holding, keys, len(keys))
    cache.release(holding)
    return hit


def test_a_finished_requests_blocks_are_hit_by_the_next():
    cache = PrefixCache(10)
    assert run_request(cache, [1, 2, 3]) == 0
    assert run_request(cache, [1, 2, 3, 4]) == 3
    assert cache.cached_blocks == 4 and cache.used_blocks == 0


def test_eviction_is_lru_and_the_tail_of_a_chain_goes_first():
    cache = PrefixCache(4)
    run_request(cache, [1, 2])          # free queue: 2, 1
    run_request(cache, [7, 8])          # free queue: 2, 1, 8, 7
    run_request(cache, [5])             # needs one block: evicts 2 (oldest, tail of its chain)
    assert cache.match([1, 2]) == 1 and cache.match([7, 8]) == 2
    assert cache.evictions == 1
    run_request(cache, [6])             # next victim is 1
    assert cache.match([1]) == 0 and cache.match([7, 8]) == 2


def test_a_hit_refreshes_recency():
    cache = PrefixCache(4)
    run_request(cache, [1, 2])
    run_request(cache, [7, 8])
    run_request(cache, [1, 2])          # 1, 2 move to the tail
    run_request(cache, [5, 6])          # evicts 8, 7
    assert cache.match([1, 2]) == 2 and cache.match([7]) == 0


def test_blocks_of_running_requests_are_not_evicted_and_are_shared():
    cache = PrefixCache(4)
    a = cache.allocate([1, 2], 0, 2)
    cache.commit(a, [1, 2], 2)
    b = cache.allocate([1, 2, 3], cache.match([1, 2, 3]), 3)   # shares 1, 2; one new block
    assert b is not None and cache.used_blocks == 3
    assert cache.allocate([9, 10], 0, 2) is None               # only one block left
    cache.release(a)
    assert cache.used_blocks == 3                               # b still holds 1 and 2
    cache.release(b)
    assert cache.used_blocks == 0


def test_unhashed_tail_blocks_are_reused_first():
    cache = PrefixCache(3)
    run_request(cache, [1, 2], total=3)  # a partial third block has no hash
    run_request(cache, [5])              # takes the anonymous block, evicts nothing
    assert cache.evictions == 0 and cache.match([1, 2]) == 2
