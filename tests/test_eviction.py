"""Eviction policies (kvplan.sim.eviction): what each one keeps and evicts, written out by hand.

Most tests replay a key sequence with the simulator's access pattern: a present key is a hit
(`touch`), an absent key is inserted. Objects are 1 byte unless a test says otherwise, so a
capacity of 3 bytes is a cache of 3 objects.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.sim.eviction import (ARC, FIFO, LFU, LRU, MRU, POLICIES, TTL, Cache, IsolatedLRU, NoEviction,
                                 make)

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "mooncake_conversation_head2000.jsonl"


def replay(cache: Cache, seq, size: int = 1, now: float = 0.0) -> tuple[list, list]:
    """Hits and victims of the access pattern 'touch if present, else insert', in order."""
    hits, victims = [], []
    for key in seq:
        if key in cache:
            cache.touch([key], now)
            hits.append(key)
        else:
            victims += cache.insert(key, size, now)
    return hits, victims


# ---------------------------------------------------------------- each policy, by hand

def test_lru_evicts_the_least_recently_used():
    # A B C fill the cache; the hit on A makes B the oldest; D evicts B, B evicts C, E evicts A.
    cache = LRU(3)
    assert replay(cache, "ABCADBE") == (["A"], ["B", "C", "A"])
    assert sorted(cache.keys()) == ["B", "D", "E"]
    assert (cache.used, cache.evictions, cache.evicted_bytes) == (3, 3, 3)


def test_fifo_ignores_hits():
    # The hit on A does not save it: D evicts A (first in), then B is hit, E evicts B.
    cache = FIFO(3)
    assert replay(cache, "ABCADBE") == (["A", "B"], ["A", "B"])
    assert sorted(cache.keys()) == ["C", "D", "E"]


def test_mru_evicts_the_most_recently_used_and_survives_a_loop():
    # A loop over 4 keys in a 3-object cache: MRU evicts C (the newest) and then hits A and B;
    # LRU evicts exactly the key needed next, every time.
    assert replay(MRU(3), "ABCDAB") == (["A", "B"], ["C"])
    assert replay(LRU(3), "ABCDAB") == ([], ["A", "B", "C"])


def test_mru_counts_a_hit_as_use():
    # After the hit on A, A is the most recently used: D evicts A, not C.
    assert replay(MRU(3), "ABCAD") == (["A"], ["A"])


def test_lfu_evicts_the_least_frequently_used():
    # A and B are used twice, C once: D evicts C; C comes back (count 1 again, no history)
    # and evicts D (count 1, older); E evicts C.
    cache = LFU(3)
    assert replay(cache, "AABBCDCE") == (["A", "B"], ["C", "D", "C"])
    assert sorted(cache.keys()) == ["A", "B", "E"]
    assert [cache.frequency(k) for k in "ABEZ"] == [2, 2, 1, 0]


def test_lfu_breaks_ties_by_least_recent_use():
    # A and C both have count 1; A was used less recently, so D evicts A, then E evicts C
    # (C and D both at count 1, C older).
    assert replay(LFU(3), "ABCBDE") == (["B"], ["A", "C"])
    # All three at count 2, reached in the order B, C, A: the tie goes to B, the least recently
    # used, not to A, the first inserted.
    assert replay(LFU(3), "ABCBCAD") == (["B", "C", "A"], ["B"])


def test_arc_keeps_a_frequent_key_through_a_scan():
    # F is used twice, so ARC moves it to T2 (frequency); the one-off keys a..e pass through T1 and
    # its ghost list B1. LRU loses F to the scan and misses it at position 6.
    arc = ARC(3)
    assert replay(arc, "FFabcFdeF") == (["F", "F", "F"], ["a", "b", "c"])
    assert (list(arc.t1), list(arc.t2), list(arc.b1), list(arc.b2), arc.p) == (["d", "e"], ["F"], ["c"], [], 0)
    assert replay(LRU(3), "FFabcFdeF") == (["F", "F"], ["F", "a", "b", "c"])


def test_arc_adapts_p_on_ghost_hits():
    arc = ARC(3)

    def step(seq):
        return replay(arc, seq)

    def state():
        return list(arc.t1), list(arc.t2), list(arc.b1), list(arc.b2), arc.p

    # a is seen twice (T2); b c d are seen once; d evicts T1's LRU b, remembered in ghost B1.
    assert step("aabcd") == (["a"], ["b"])
    assert state() == (["c", "d"], ["a"], ["b"], [], 0)
    # b again: a ghost hit in B1 means T1 was too small, so p grows to 1; b goes to T2, and REPLACE
    # evicts c from T1 (|T1| = 2 > p).
    assert step("b") == ([], ["c"])
    assert state() == (["d"], ["a", "b"], ["c"], [], 1)
    # e: |T1| = 1 is not above p = 1, so the victim comes from T2: its LRU a goes to ghost B2.
    assert step("e") == ([], ["a"])
    assert state() == (["d", "e"], ["b"], ["c"], ["a"], 1)
    # a again: a ghost hit in B2 shrinks p by max(|B1|/|B2|, 1) = 1 back to 0; T1 pays: d is evicted.
    assert step("a") == ([], ["d"])
    assert state() == (["e"], ["b", "a"], ["c", "d"], [], 0)
    assert arc.c == 3


def test_arc_counts_entries_sized_by_the_first_object():
    arc = ARC(40)
    arc.insert("x", 4)
    assert arc.c == 10                      # 40 bytes // 4 bytes per object
    assert [arc.insert(k, 4) for k in range(9)] == [[]] * 9
    assert arc.insert("y", 4) == ["x"]


def test_isolated_lru_is_one_lru_without_cache_salt():
    cache = IsolatedLRU(3)
    assert isinstance(cache, LRU) and cache.name == "IsolatedLRU"
    assert replay(cache, "ABCADBE") == replay(LRU(3), "ABCADBE")


def test_no_eviction_refuses_what_does_not_fit():
    cache = NoEviction(3)
    assert replay(cache, "ABCD") == ([], [])
    assert "D" not in cache and sorted(cache.keys()) == ["A", "B", "C"]
    assert (cache.evictions, cache.rejected, cache.used) == (0, 1, 3)
    assert cache.remove("A") and cache.insert("D", 1) == [] and "D" in cache


def test_mixed_sizes_are_counted_exactly_in_bytes():
    cache = LRU(10)
    assert cache.insert("A", 4) == [] and cache.insert("B", 4) == []
    assert cache.insert("C", 4) == ["A"]              # 12 bytes do not fit in 10: A goes
    assert (cache.used, cache.evicted_bytes) == (8, 4)
    assert cache.insert("D", 10) == ["B", "C"]        # D needs the whole cache
    assert cache.used == 10


def test_insert_of_a_present_key_is_a_hit_and_keeps_its_size():
    cache = LRU(3)
    replay(cache, "ABC")
    assert cache.insert("A", 2) == []                  # a hit: A becomes most recent, still 1 byte
    assert cache.used == 3
    assert cache.insert("D", 1) == ["B"]


def test_an_object_larger_than_the_cache_is_not_stored():
    cache = LRU(10)
    cache.insert("A", 5)
    assert cache.insert("huge", 11) == [] and "huge" not in cache
    assert ("A" in cache, cache.used, cache.rejected, cache.evictions) == (True, 5, 1, 0)
    with pytest.raises(ValueError, match="size"):
        cache.insert("empty", 0)


def test_remove_is_not_an_eviction():
    cache = LFU(3)
    replay(cache, "AB")
    assert cache.remove("A") is True and cache.remove("A") is False
    assert (len(cache), cache.used, cache.evictions, cache.evicted_bytes) == (1, 1, 0, 0)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_prefix_counts_consecutive_present_keys_without_side_effects(policy):
    cache = make(policy, 5)
    for k in (1, 2, 3, 4, 5):
        cache.insert(k, 1)
    keys = [1, 2, 3, 9, 4, 5]
    assert cache.prefix(keys) == 3
    assert cache.prefix(keys, 1) == 2
    assert cache.prefix(keys, 3) == 0
    assert cache.prefix(keys, 4) == 2
    assert cache.prefix(keys, 10) == 0 and cache.prefix([]) == 0
    assert cache.prefix(tuple(keys), 4) == 2           # any sequence
    if policy not in ("none", "ARC"):                  # lookups did not count as uses
        assert cache.insert(6, 1) == ([5] if policy == "MRU" else [1])


# ---------------------------------------------------------------- TTL (an RGW lifecycle rule)

def test_ttl_expires_entries_by_age_not_by_eviction():
    cache = TTL(LRU(10), ttl=10)
    assert cache.name == "LRU+TTL"
    public = {name for name in dir(Cache) if not name.startswith("_")}
    assert public <= set(dir(cache)), "TTL answers everything a Cache does"
    cache.insert("A", 1, now=0)
    cache.insert("B", 2, now=5)
    assert cache.expire(9.9) == []
    cache.touch(["A", "B"], now=10)                     # A was inserted at 0: expired at 10
    assert "A" not in cache and "B" in cache
    assert (cache.expired, cache.expired_bytes, cache.evictions, cache.used) == (1, 1, 0, 2)


def test_ttl_is_refreshed_by_a_reinsert_but_not_by_a_read():
    cache = TTL(LRU(10), ttl=10)
    cache.insert("A", 1, now=0)
    cache.insert("B", 1, now=0)
    cache.touch(["A"], now=5)                           # a GET: A still expires at 10
    cache.insert("B", 1, now=6)                         # a PUT overwriting B: B now expires at 16
    assert cache.expire(10) == ["A"]
    assert cache.expire(15.9) == [] and "B" in cache
    assert cache.expire(16) == ["B"]
    assert (cache.expired, len(cache), cache.used) == (2, 0, 0)


def test_lookups_see_an_expired_entry_until_expire_is_called():
    cache = TTL(LRU(10), ttl=10)
    cache.insert("A", 1, now=0)
    # prefix() and `in` have no side effects and know no time: callers call expire(now) first.
    assert "A" in cache and cache.prefix(["A"]) == 1
    assert cache.expire(20) == ["A"]
    assert "A" not in cache and cache.prefix(["A"]) == 0


def test_lfu_with_ttl_evicts_by_frequency_and_expires_by_age():
    cache = make("LFU", 3, ttl=100)
    assert isinstance(cache, TTL) and isinstance(cache.inner, LFU) and cache.name == "LFU+TTL"
    cache.insert("A", 1, now=0)
    cache.touch(["A"] * 5, now=1)                       # A: count 6
    cache.insert("B", 1, now=10)
    cache.insert("C", 1, now=20)
    assert cache.insert("D", 1, now=30) == ["B"]        # the least frequent, least recent
    assert cache.expire(100) == ["A"]                   # being popular does not stop expiry
    assert sorted(cache.keys()) == ["C", "D"]
    assert (cache.evictions, cache.expired) == (1, 1)


def test_an_evicted_then_reinserted_key_gets_a_fresh_expiry():
    cache = TTL(LRU(1), ttl=10)
    cache.insert("A", 1, now=0)
    assert cache.insert("B", 1, now=1) == ["A"]
    assert cache.insert("A", 1, now=5) == ["B"]
    assert cache.expire(10) == [] and "A" in cache      # the stale expiry of the first A is skipped
    assert cache.expire(15) == ["A"]


def test_plain_caches_expire_nothing():
    cache = LRU(3)
    cache.insert("A", 1)
    assert cache.expire(1e12) == [] and "A" in cache


# ---------------------------------------------------------------- batch (watermark) mode, LMCache MP

@pytest.mark.parametrize("policy", ["LRU", "ARC", "IsolatedLRU", "LFU", "FIFO", "MRU"])
def test_batch_mode_evicts_20_percent_at_the_80_percent_watermark(policy):
    cache = make(policy, 10, watermark=0.8, ratio=0.2)
    assert [cache.insert(k, 1) for k in range(1, 8)] == [[]] * 7    # 7 of 10: below the watermark
    victims = cache.insert(8, 1)                                      # 8 of 10: evict 2 objects
    assert len(victims) == 2 and 8 not in victims and 8 in cache
    assert (cache.used, cache.evictions) == (6, 2)
    if policy in ("LRU", "IsolatedLRU", "FIFO", "LFU", "ARC"):
        assert victims == [1, 2]
    else:
        assert victims == [7, 6]                                      # MRU; 8 is never its own victim
    for k in range(9, 100):
        cache.insert(k, 1)
        assert cache.used <= 7                                        # 8 is reached, then cut to 6


def test_batch_mode_still_evicts_on_demand_when_an_object_does_not_fit():
    cache = LRU(10, watermark=0.8, ratio=0.2)
    for k in range(7):
        cache.insert(k, 1)                                            # 7 bytes, below the watermark
    # 4 more bytes would make 11: evict 0 on demand (7 - 1 + 4 = 10 fits), then 10 >= 8 starts a
    # batch, which frees its own 2 bytes (1 and 2).
    assert cache.insert("big", 4) == [0, 1, 2]
    assert cache.used == 8 <= cache.capacity


def test_watermark_and_ratio_compare_fractions_exactly():
    # 0.55 * 100 is 55.00000000000001 in floating point, yet 55 / 100 >= 0.55, as LMCache compares
    # usage fractions: the 55th byte triggers the batch. Likewise 0.07 * 100 is 7.000000000000001,
    # and freeing 7 bytes of 100 is freeing 0.07 of the capacity.
    cache = LRU(100, watermark=0.55, ratio=0.07)
    assert [len(cache.insert(k, 1)) for k in range(55)] == [0] * 54 + [7]


def test_no_eviction_ignores_the_watermark():
    cache = make("none", 10, watermark=0.8)
    assert [cache.insert(k, 1) for k in range(12)] == [[]] * 12
    assert (len(cache), cache.rejected) == (10, 2)


# ---------------------------------------------------------------- the factory

def test_make_rejects_an_unknown_policy_and_lists_the_allowed_ones():
    with pytest.raises(ValueError) as err:
        make("CLOCK", 100)
    message = str(err.value)
    assert "CLOCK" in message
    for name in ("LRU", "LFU", "FIFO", "MRU", "ARC", "IsolatedLRU", "none"):
        assert name in message


def test_make_builds_every_policy_and_checks_its_arguments():
    for name, cls in POLICIES.items():
        cache = make(name, 100)
        assert type(cache) is cls and cache.name == name and cache.capacity == 100
    assert make("ARC", 100, watermark=0.8, ratio=0.3).watermark == 0.8
    for bad in (dict(ttl=0), dict(watermark=1.5), dict(ratio=0)):
        with pytest.raises(ValueError):
            make("LRU", 100, **bad)


# ---------------------------------------------------------------- against reference implementations on a real trace

@cache
def trace_keys() -> tuple:
    """Every block access of the first 2000 Mooncake conversation requests, in order."""
    keys = []
    with FIXTURE.open() as f:
        for line in f:
            keys.extend(json.loads(line)["hash_ids"])
    return tuple(keys)


def reference_lru_fifo(trace, capacity: int, fifo: bool) -> tuple[int, set]:
    """A list in eviction order (oldest first) and a set, one object per key."""
    order, present, hits = [], set(), 0
    for key in trace:
        if key in present:
            hits += 1
            if not fifo:
                order.remove(key)
                order.append(key)
            continue
        if len(order) == capacity:
            present.remove(order.pop(0))
        order.append(key)
        present.add(key)
    return hits, present


def reference_arc(trace, c: int) -> tuple[int, list, list, list, list, float]:
    """ARC transcribed from Megiddo & Modha (FAST 2003), Fig. 4, with plain lists (LRU end first)."""
    t1, t2, b1, b2 = [], [], [], []
    p, hits = 0, 0

    def replace(x):
        if t1 and ((x in b2 and len(t1) == p) or len(t1) > p or not t2):
            b1.append(t1.pop(0))
        else:
            b2.append(t2.pop(0))

    for x in trace:
        if x in t1 or x in t2:                                      # case I
            hits += 1
            (t1 if x in t1 else t2).remove(x)
            t2.append(x)
        elif x in b1:                                               # case II
            p = min(c, p + max(len(b2) / len(b1), 1))
            replace(x)
            b1.remove(x)
            t2.append(x)
        elif x in b2:                                               # case III
            p = max(0, p - max(len(b1) / len(b2), 1))
            replace(x)
            b2.remove(x)
            t2.append(x)
        else:                                                       # case IV
            if len(t1) + len(b1) == c:
                if len(t1) < c:
                    b1.pop(0)
                    replace(x)
                else:
                    t1.pop(0)
            elif len(t1) + len(t2) + len(b1) + len(b2) >= c:
                if len(t1) + len(t2) + len(b1) + len(b2) == 2 * c:
                    b2.pop(0)
                replace(x)
            t1.append(x)
    return hits, t1, t2, b1, b2, p


def reference_lfu(trace, capacity: int) -> tuple[int, set]:
    """Counts and last-use ticks in dicts; the victim is the minimum (count, last use) by a full scan."""
    count, last, hits = {}, {}, 0
    for tick, key in enumerate(trace):
        if key in count:
            hits += 1
            count[key] += 1
        else:
            if len(count) == capacity:
                victim = min(count, key=lambda k: (count[k], last[k]))
                del count[victim], last[victim]
            count[key] = 1
        last[key] = tick
    return hits, set(count)


@pytest.mark.parametrize("capacity", [100, 1000, 5000])
@pytest.mark.parametrize("policy", ["LRU", "FIFO"])
def test_lru_and_fifo_match_a_list_reference_on_the_mooncake_trace(policy, capacity):
    trace = trace_keys()
    assert len(trace) == 54559
    hits, victims = replay(make(policy, capacity), trace)
    ref_hits, ref_keys = reference_lru_fifo(trace, capacity, fifo=policy == "FIFO")
    cache = make(policy, capacity)
    replay(cache, trace)
    assert len(hits) == ref_hits
    assert set(cache.keys()) == ref_keys
    assert len(victims) == len(trace) - ref_hits - capacity        # every miss after the fill evicts one


@pytest.mark.parametrize("capacity", [100, 1000])
def test_arc_matches_the_paper_on_the_mooncake_trace(capacity):
    trace = trace_keys()
    cache = ARC(capacity)
    hits, _ = replay(cache, trace)
    ref_hits, t1, t2, b1, b2, p = reference_arc(trace, capacity)
    assert len(hits) == ref_hits
    assert (list(cache.t1), list(cache.t2), list(cache.b1), list(cache.b2), cache.p) == (t1, t2, b1, b2, p)


@settings(max_examples=400, deadline=None)
@given(seq=st.lists(st.integers(0, 9), max_size=80), c=st.integers(1, 6))
def test_arc_matches_the_paper_on_any_sequence(seq, c):
    """Small caches over few keys reach every case of the paper's pseudocode (ghost hits in B1 and
    B2 with either list longer, a full T1, a full directory)."""
    cache = ARC(c)
    hits, _ = replay(cache, seq)
    ref_hits, t1, t2, b1, b2, p = reference_arc(seq, c)
    assert len(hits) == ref_hits
    assert (list(cache.t1), list(cache.t2), list(cache.b1), list(cache.b2), cache.p) == (t1, t2, b1, b2, p)


@pytest.mark.parametrize("capacity", [50, 200])
def test_lfu_matches_a_scanning_reference_on_the_mooncake_trace(capacity):
    trace = trace_keys()[:20000]
    cache = LFU(capacity)
    hits, _ = replay(cache, trace)
    assert (len(hits), set(cache.keys())) == reference_lfu(trace, capacity)


# ---------------------------------------------------------------- properties

KEYS = st.integers(0, 11)
OPS = st.lists(st.one_of(
    st.tuples(st.just("insert"), KEYS, st.integers(1, 5)),
    st.tuples(st.just("touch"), st.lists(KEYS, max_size=4)),
    st.tuples(st.just("remove"), KEYS),
    st.tuples(st.just("wait"), st.sampled_from([0.5, 1, 2.5, 4])),
    st.tuples(st.just("expire"),),
    st.tuples(st.just("prefix"), st.lists(KEYS, max_size=6), st.integers(0, 3)),
), max_size=60)


@settings(max_examples=400, deadline=None)
@given(policy=st.sampled_from(sorted(POLICIES)), capacity=st.integers(1, 20),
       watermark=st.sampled_from([None, 0.5, 0.8, 1.0]), ratio=st.sampled_from([0.1, 0.2, 0.5]),
       ttl=st.sampled_from([None, 3.0]), ops=OPS)
def test_any_operations_keep_the_books_straight(policy, capacity, watermark, ratio, ttl, ops):
    """`used` is the sum of the present sizes and never exceeds capacity; every stored byte is still
    held, evicted, removed or expired; keys(), `in`, len() and prefix() agree with a model that
    tracks presence, sizes and expiry times."""
    cache = make(policy, capacity, ttl=ttl, watermark=watermark, ratio=ratio)
    size, expiry = {}, {}             # the model: present key -> size, -> expiry time (TTL only)
    now, stored, removed, evicted_count, evicted_bytes = 0.0, 0, 0, 0, 0

    def due():
        """Keys the model says expire by `now`; drops them from the model."""
        gone = {k for k, t in expiry.items() if t <= now}
        for k in gone:
            del size[k], expiry[k]
        return gone

    for op, *args in ops:
        expired_before = getattr(cache, "expired", 0)
        gone = due() if ttl is not None and op in ("insert", "touch", "expire") else set()
        if op == "insert":
            key, n = args
            was, used_before = key in size, sum(size.values())
            victims = cache.insert(key, n, now)
            assert len(set(victims)) == len(victims) and key not in victims
            assert all(v in size for v in victims)
            freed = [size.pop(v) for v in victims]
            for v in victims:
                expiry.pop(v, None)
            evicted_count += len(victims)
            evicted_bytes += sum(freed)
            if was:                   # a hit (size unchanged)
                assert victims == []
            elif key in cache:
                size[key], stored = n, stored + n
            else:                     # refused: too big, or a full cache that never evicts
                assert victims == []
                assert n > capacity or (policy == "none" and used_before + n > capacity)
            if key in size and ttl is not None:
                expiry[key] = now + ttl   # stored, or a PUT over a present key: the clock restarts
            if watermark is None and policy not in ("ARC", "none") and not was and victims:
                # on demand: evicts only when needed, and stops as soon as the object fits
                assert used_before + n > capacity
                assert used_before - sum(freed[:-1]) + n > capacity >= used_before - sum(freed) + n
        elif op == "touch":
            cache.touch(args[0], now)
        elif op == "remove":
            key = args[0]
            assert cache.remove(key) == (key in size)
            if key in size:
                removed += size.pop(key)
                expiry.pop(key, None)
        elif op == "wait":
            now += args[0]
        elif op == "expire":
            assert set(cache.expire(now)) == gone
        elif op == "prefix":
            keys, start = args
            expected = 0
            for k in keys[start:]:
                if k not in size:
                    break
                expected += 1
            assert cache.prefix(keys, start) == expected

        assert getattr(cache, "expired", 0) - expired_before == len(gone)
        assert set(cache.keys()) == set(size) and len(cache) == len(size)
        assert all((k in cache) == (k in size) for k in range(12))
        assert cache.used == sum(size.values()) <= cache.capacity
        assert (cache.evictions, cache.evicted_bytes) == (evicted_count, evicted_bytes)
        assert stored == cache.used + cache.evicted_bytes + removed + getattr(cache, "expired_bytes", 0)
        inner = getattr(cache, "inner", cache)
        if isinstance(inner, ARC) and watermark is None and inner.c:
            t1, t2, b1, b2, c = inner.t1, inner.t2, inner.b1, inner.b2, inner.c
            assert set(t1) | set(t2) == set(size) and not set(t1) & set(t2)
            assert not (set(b1) | set(b2)) & set(size) and not set(b1) & set(b2)
            assert len(t1) + len(t2) <= c and len(t1) + len(b1) <= c
            assert len(t1) + len(t2) + len(b1) + len(b2) <= 2 * c and 0 <= inner.p <= c


@settings(max_examples=300, deadline=None)
@given(policy=st.sampled_from(["LRU", "FIFO", "MRU"]), capacity=st.integers(1, 15),
       watermark=st.sampled_from([None, 0.8]),
       ops=st.lists(st.one_of(st.tuples(st.just("insert"), KEYS, st.integers(1, 5)),
                              st.tuples(st.just("hit"), KEYS),
                              st.tuples(st.just("remove"), KEYS)), max_size=60))
def test_lru_fifo_mru_evict_exactly_what_a_list_model_says(policy, capacity, watermark, ops):
    """Byte-sized objects, both modes: the victims are the ends of one list (oldest first)."""
    cache = make(policy, capacity, watermark=watermark, ratio=0.2)
    order, size = [], {}              # eviction order: LRU/FIFO evict order[0], MRU order[-1]

    def victim():
        key = order.pop(-1 if policy == "MRU" else 0)
        return key, size.pop(key)

    for op, key, *n in ops:
        if op == "insert" and key not in size and n[0] <= capacity:
            need, expected = n[0], []
            while sum(size.values()) + need > capacity:
                expected.append(victim()[0])
            if watermark is not None and sum(size.values()) + need >= 0.8 * capacity - 1e-9:
                freed = 0
                while freed < 0.2 * capacity - 1e-9 and order:
                    k, s = victim()
                    expected.append(k)
                    freed += s
            assert cache.insert(key, need) == expected
            order.append(key)
            size[key] = need
        elif op == "insert" or op == "hit":
            if op == "insert":
                cache.insert(key, n[0])
            else:
                cache.touch([key])
            if key in size and policy != "FIFO":
                order.remove(key)
                order.append(key)
        else:
            cache.remove(key)
            if key in size:
                order.remove(key)
                del size[key]
        assert cache.keys() == order


@settings(max_examples=300, deadline=None)
@given(seq=st.lists(st.integers(0, 15), max_size=80), small=st.integers(1, 10), extra=st.integers(1, 8))
def test_lru_is_a_stack_algorithm(seq, small, extra):
    """A bigger LRU cache always holds what a smaller one holds, so its hit ratio never falls."""
    a, b = LRU(small), LRU(small + extra)
    hits_a = hits_b = 0
    for key in seq:
        hits_a += len(replay(a, [key])[0])
        hits_b += len(replay(b, [key])[0])
        assert set(a.keys()) <= set(b.keys())
        assert hits_a <= hits_b


# ---------------------------------------------------------------- store: a batch of touch-or-insert

def state(cache) -> tuple:
    """What a cache holds and has counted, in its own order where it keeps one."""
    inner = getattr(cache, "inner", cache)
    return (list(inner._sizes.items()), inner.used, inner.evictions, inner.evicted_bytes, inner.rejected,
            getattr(cache, "expired", 0), sorted(getattr(cache, "_live", {}).items()))


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("mode", [{}, {"watermark": 0.8, "ratio": 0.2}, {"ttl": 5.0}])
@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.tuples(st.lists(st.integers(0, 30), max_size=12), st.sampled_from([1, 2, 3, 50])),
                        max_size=12))
def test_store_is_touch_or_insert_key_by_key(policy, mode, batches):
    """Stores of one size or of several (a cache of equal sizes counts its capacity in keys)."""
    one, bulk = make(policy, 20, **mode), make(policy, 20, **mode)
    for t, (keys, size) in enumerate(batches):
        now = float(t)
        one.expire(now)
        stored = refused = 0
        for key in keys:
            if key in one:
                one.touch([key], now)
                continue
            one.insert(key, size, now)
            if key in one:
                stored += 1
            else:
                refused += 1
        bulk.expire(now)
        absent = [k for k in keys if k not in bulk]
        assert bulk.absent(keys) == absent
        assert bulk.store(keys, size, now) == (stored, refused)
        assert state(bulk) == state(one)
