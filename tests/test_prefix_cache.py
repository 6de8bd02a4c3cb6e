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


# ---- the run-based cache against a per-block model of the same rules

class BlockModel:
    """The rules of the module docstring block by block: hashed key -> holders, an ordered free queue."""

    def __init__(self, num_blocks):
        from collections import OrderedDict
        self.free, self.refs, self.pristine, self.evictions = OrderedDict(), {}, num_blocks, 0

    def free_blocks(self):
        return self.pristine + sum(1 if v is None else v for v in self.free.values())

    def match(self, keys):
        n = 0
        while n < len(keys) and (keys[n] in self.free or keys[n] in self.refs):
            n += 1
        return n

    def take(self, n):
        used = min(n, self.pristine)
        self.pristine -= used
        n -= used
        while n:
            key, run = self.free.popitem(last=False)
            if run is None:
                self.evictions += 1
                n -= 1
            else:
                used = min(n, run)
                n -= used
                if run > used:
                    self.free[key] = run - used
                    self.free.move_to_end(key, last=False)

    def allocate(self, keys, hit, total):
        hits = keys[:hit]
        if total - hit > self.free_blocks() - sum(k in self.free for k in hits):
            return None
        for key in hits:
            if key in self.refs:
                self.refs[key] += 1
            else:
                del self.free[key]
                self.refs[key] = 1
        self.take(total - hit)
        return {"keys": list(hits), "anon": total - hit, "next": hit}

    def grow(self, h, n):
        if n > self.free_blocks():
            return False
        self.take(n)
        h["anon"] += n
        return True

    def commit(self, h, keys, upto):
        new = [k for k in keys[h["next"]:upto] if k not in self.refs and k not in self.free]
        self.refs.update(dict.fromkeys(new, 1))
        h["keys"] += new
        h["anon"] -= len(new)
        h["next"] = max(h["next"], upto)

    def release(self, h):
        if h["anon"]:
            self.free[object()] = h["anon"]
        for key in reversed(h["keys"]):
            if self.refs[key] == 1:
                del self.refs[key]
                self.free[key] = None
            else:
                self.refs[key] -= 1


def random_chain(rng, roots):
    """A chain of prefix-chained keys: follows an existing chain for a while, then its own keys."""
    base = rng.choice(roots)
    keep = rng.randrange(len(base) + 1)
    chain = base[:keep] + [hash((tuple(base[:keep][-1:]), rng.random(), i)) for i in range(rng.randrange(1, 12))]
    roots.append(chain)
    return chain


def test_runs_behave_exactly_like_blocks():
    import random

    for seed in range(40):
        rng = random.Random(seed)
        size = rng.randrange(4, 40)
        cache, model = PrefixCache(size), BlockModel(size)
        roots = [[1000 + i for i in range(8)], [2000 + i for i in range(5)]]
        running = []                                   # (keys, holding, model holding)
        for _ in range(300):
            op = rng.random()
            if op < 0.35:
                keys = random_chain(rng, roots)
                hit = cache.match(keys)
                assert hit == model.match(keys)
                hit = min(hit, rng.randrange(hit + 1))
                total = hit + rng.randrange(0, len(keys) - hit + 3)
                h, m = cache.allocate(keys, hit, total), model.allocate(keys, hit, total)
                assert (h is None) == (m is None)
                if h is not None:
                    running.append((keys, h, m))
            elif op < 0.6 and running:
                keys, h, m = rng.choice(running)
                upto = min(len(keys), h.blocks, h.next + rng.randrange(0, 6))
                cache.commit(h, keys, upto)
                model.commit(m, keys, upto)
            elif op < 0.7 and running:
                _, h, m = rng.choice(running)
                n = rng.randrange(1, 4)
                assert cache.grow(h, n) == model.grow(m, n)
            elif running:
                keys, h, m = running.pop(rng.randrange(len(running)))
                cache.release(h)
                model.release(m)
            assert cache.free_blocks == model.free_blocks()
            assert cache.cached_blocks == len(model.refs) + sum(v is None for v in model.free.values())
            assert cache.evictions == model.evictions
            for chain in rng.sample(roots, min(5, len(roots))):
                assert cache.match(chain) == model.match(chain)
