"""The eviction policies: a byte-capacity cache of opaque keys and how each policy picks its victims.

`Cache` is the interface every tier's cache has (eviction.py says which policies LMCache has and
how its two modes evict); `LRU`, `LFU`, `FIFO`, `MRU`, `ARC`, `IsolatedLRU` and `NoEviction`
implement it. A cache replay and every LMCache tier of a run go through these on every chunk they
store or look up, so the module is compiled (pyproject.toml); expiry by age wraps any of them
(`eviction.TTL`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Hashable, Iterable, Sequence

__all__ = ["Cache", "LRU", "LFU", "FIFO", "MRU", "ARC", "IsolatedLRU", "NoEviction"]


def _at_least(fraction: float, capacity: int) -> int:
    """The smallest whole number of bytes n with n / capacity >= fraction.

    LMCache compares usage *fractions* (used / capacity >= watermark); computing the byte threshold
    this way keeps e.g. 7 of 10 bytes at watermark 0.7 a trigger, where 0.7 * 10 == 7.000000000000001.
    """
    if capacity <= 0:
        return 0
    n = math.ceil(fraction * capacity)
    while n > 0 and (n - 1) / capacity >= fraction:
        n -= 1
    while n / capacity < fraction:
        n += 1
    return n


class Cache:
    """A byte-capacity cache of opaque hashable keys with an eviction policy.

    Counters: `used` bytes held; `evictions` / `evicted_bytes` dropped by the policy (explicit
    `remove()` is not an eviction); `rejected` inserts that stored nothing (object larger than the
    whole cache, or a full cache that never evicts).

    Each policy is a subclass that implements four hooks over its own bookkeeping: `_add` (store a
    new key), `_hit` (an access to a present key), `_pop_victim` (drop and return the policy's next victim)
    and `_discard` (drop a given key). `_sizes` (key -> bytes) holds exactly the present keys.
    """

    __slots__ = ("capacity", "used", "evictions", "evicted_bytes", "rejected", "watermark", "ratio",
                 "_sizes", "_high", "_batch")
    name: str = "?"

    def __init__(self, capacity: int, *, watermark: float | None = None, ratio: float = 0.2):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 bytes, got {capacity}")
        if watermark is not None and not 0 < watermark <= 1:
            raise ValueError(f"watermark must be in (0, 1] (a fraction of capacity), got {watermark}")
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1] (a fraction of capacity), got {ratio}")
        self.capacity = capacity
        self.watermark = watermark
        self.ratio = ratio
        self.used = 0
        self.evictions = 0
        self.evicted_bytes = 0
        self.rejected = 0
        self._sizes: dict = {}
        # batch mode: evict when used >= _high, at least _batch bytes per batch
        self._high = _at_least(watermark, capacity) if watermark is not None else 0
        self._batch = max(1, _at_least(ratio, capacity))

    # ---- queries (no side effects)
    def __contains__(self, key) -> bool:
        return key in self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def __repr__(self) -> str:
        mode = f", watermark={self.watermark}, ratio={self.ratio}" if self.watermark is not None else ""
        return f"{type(self).__name__}(capacity={self.capacity}{mode}; {len(self)} keys, {self.used} bytes)"

    def keys(self) -> list:
        """The present keys, in no particular order."""
        return list(self._sizes)

    def prefix(self, keys: Sequence, start: int = 0) -> int:
        """Number of consecutive keys from keys[start] that are present (no side effects). HOT PATH."""
        d = self._sizes
        n, end = start, len(keys)
        while n < end and keys[n] in d:
            n += 1
        return n - start

    def absent(self, keys: Iterable) -> list:
        """The keys that are not present, in order (no side effects)."""
        d = self._sizes
        return [k for k in keys if k not in d]

    # ---- updates
    def touch(self, keys: Iterable, now: float = 0.0) -> None:
        """Record an access (hit) to each present key, in order (updates recency/frequency). Absent keys are ignored."""
        d = self._sizes
        for k in keys:
            if k in d:
                self._hit(k)

    def store(self, keys: Iterable, size: int, now: float = 0.0) -> tuple[int, int]:
        """Write `keys` (each `size` bytes) in order, as a cache tier takes a store: a present key is
        touched (`touch`), an absent one inserted (`insert`). Returns (keys newly stored, keys refused)."""
        d = self._sizes
        stored = refused = 0
        for k in keys:
            if k in d:
                self._hit(k)
                continue
            self.insert(k, size, now)
            if k in d:
                stored += 1
            else:
                refused += 1
        return stored, refused

    def insert(self, key: Hashable, size: int, now: float = 0.0) -> list:
        """Store key (size bytes). If already present: counts as an access (touch), size unchanged, returns [].
        If size > capacity: nothing stored, returns []. Otherwise evicts as the mode says and returns the
        evicted keys (in eviction order)."""
        if key in self._sizes:
            self._hit(key)
            return []
        if size > self.capacity:
            self.rejected += 1
            return []
        if size <= 0:
            raise ValueError(f"object size must be > 0 bytes, got {size}")
        evicted = self._make_room(key, size)
        self._add(key, size)
        self.used += size
        return evicted

    def remove(self, key) -> bool:
        """Delete key if present (not counted as an eviction). True if it was present."""
        if key not in self._sizes:
            return False
        self.used -= self._discard(key)
        return True

    def expire(self, now: float) -> list:
        """Drop what has expired by `now`: nothing here (see `TTL`); every tier can be asked the same."""
        return []

    # ---- eviction machinery
    def _evict(self, incoming, out: list) -> int:
        """Evict the policy's next victim into `out`; return its size."""
        k, s = self._pop_victim(incoming)
        self.used -= s
        self.evictions += 1
        self.evicted_bytes += s
        out.append(k)
        return s

    def _make_room(self, key, size: int) -> list:
        """Evict for an insert of `key` (not yet stored, so never its own victim). Returns the victims."""
        evicted: list = []
        cap = self.capacity
        while self.used + size > cap:               # on demand: until the new object fits
            self._evict(key, evicted)
        if self.watermark is not None and self.used + size >= self._high:
            freed, sizes = 0, self._sizes           # batch: at least ratio * capacity bytes
            while freed < self._batch and sizes:
                freed += self._evict(key, evicted)
        return evicted

    def _add(self, key, size: int) -> None:
        """Record a new key (not present, room already made) in `_sizes` and the policy's order."""
        raise NotImplementedError

    def _hit(self, key) -> None:
        """Record an access to a present key."""
        raise NotImplementedError

    def _pop_victim(self, incoming) -> tuple:
        """Remove the policy's next victim from every structure; return (key, size). `incoming` is the
        key being inserted (ARC's REPLACE looks at it)."""
        raise NotImplementedError

    def _discard(self, key) -> int:
        """Remove a present key from every structure (explicit delete, no ghost); return its size."""
        raise NotImplementedError


class LRU(Cache):
    """Least recently used: an OrderedDict (key -> size) in recency order; a hit moves the key to the end,
    the victim is the first. LMCache's default in both modes (reference/lmcache-vllm.md §2)."""

    __slots__ = ("_d", "_unit")
    name = "LRU"

    def __init__(self, capacity: int, *, watermark: float | None = None, ratio: float = 0.2):
        super().__init__(capacity, watermark=watermark, ratio=ratio)
        self._d: OrderedDict[Hashable, int] = OrderedDict()
        self._sizes = self._d
        self._unit = 0                  # the size of every key held, when they all have one (0: mixed)

    def _sized(self, size: int) -> None:
        """Note a key of `size` bytes about to be added."""
        if not self._d:
            self._unit = size
        elif size != self._unit:
            self._unit = 0

    # prefix(): Cache.prefix over self._sizes, which is this OrderedDict

    def touch(self, keys: Iterable, now: float = 0.0) -> None:
        d = self._d
        move = d.move_to_end
        for k in keys:
            if k in d:
                move(k)

    def store(self, keys: Iterable, size: int, now: float = 0.0) -> tuple[int, int]:
        """`Cache.store` with `insert` written out: eviction runs only when the new key needs room."""
        if size > self.capacity or size <= 0:
            return Cache.store(self, keys, size, now)
        if self.watermark is None and self._plain:
            self._sized(size)
            if self._unit == size:      # every key is `size` bytes: the capacity is a number of keys
                return self._store_uniform(keys, size)
        d, cap = self._d, self.capacity
        high = self._high if self.watermark is not None else None
        stored = 0
        for k in keys:
            if k in d:
                self._hit(k)
                continue
            after = self.used + size
            if after > cap or (high is not None and after >= high):
                self._make_room(k, size)
            self._sized(size)
            d[k] = size
            self.used += size
            stored += 1
        return stored, 0

    _plain = True
    """Hits move a key to the end and the victim is the first key (not so in FIFO and MRU)."""

    def _store_uniform(self, keys: Iterable, size: int) -> tuple[int, int]:
        """`store` of a plain LRU evicting on demand whose keys all have one size, the hot loop of a cache
        replay: the plain OrderedDict loop (insert, evict the first when over); the same victims in the
        same order as key-by-key inserts."""
        d, most = self._d, self.capacity // size
        move, pop = d.move_to_end, d.popitem
        keys = keys if isinstance(keys, list) else list(keys)
        before, hits = len(d), 0
        for k in keys:
            if k in d:
                move(k)
                hits += 1
                continue
            d[k] = size                 # the victim is the first key: never k, which is last
            if len(d) > most:
                pop(False)
        stored = len(keys) - hits
        evicted = before + stored - len(d)
        self.used = len(d) * size
        self.evictions += evicted
        self.evicted_bytes += evicted * size
        return stored, 0

    def _add(self, key, size: int) -> None:
        self._sized(size)
        self._d[key] = size

    def _hit(self, key) -> None:
        self._d.move_to_end(key)

    def _pop_victim(self, incoming) -> tuple:
        return self._d.popitem(last=False)

    def _discard(self, key) -> int:
        return self._d.pop(key)


class IsolatedLRU(LRU):
    """LMCache MP's IsolatedLRU keeps one LRU per `cache_salt` (to enforce per-tenant quotas).

    kvplan's workloads carry no cache_salt, so every key falls in the one default group and it behaves
    exactly as a single LRU; only the name differs."""

    __slots__ = ()
    name = "IsolatedLRU"


class FIFO(LRU):
    """First in, first out: insertion order; hits do not change the order; the victim is the oldest insert."""

    __slots__ = ()
    name = "FIFO"
    _plain = False

    def touch(self, keys: Iterable, now: float = 0.0) -> None:
        return None

    def _hit(self, key) -> None:
        return None


class MRU(LRU):
    """Most recently used: the victim is the key accessed or inserted last (good for cyclic scans larger
    than the cache, where LRU always evicts the key about to be needed)."""

    __slots__ = ()
    name = "MRU"
    _plain = False

    def _pop_victim(self, incoming) -> tuple:
        return self._d.popitem(last=True)


class LFU(Cache):
    """Least frequently used; ties broken LRU (the least recently used among the lowest count).

    A new key starts at frequency 1, each hit adds 1; nothing is remembered after a key leaves. O(1) per
    operation: one OrderedDict bucket per frequency (keys in the order they reached that frequency, i.e.
    by last access) and a doubly linked list of the non-empty frequencies in increasing order, so the
    lowest is always the list's head (LMCache uses a SortedDict of buckets for the same order)."""

    __slots__ = ("_freq", "_buckets", "_next", "_prev")
    name = "LFU"

    def __init__(self, capacity: int, *, watermark: float | None = None, ratio: float = 0.2):
        super().__init__(capacity, watermark=watermark, ratio=ratio)
        self._freq: dict = {}                         # key -> access count
        self._buckets: dict[int, OrderedDict] = {}    # count -> keys with that count, LRU first
        self._next = {0: 0}                           # linked list of counts; 0 is the sentinel
        self._prev = {0: 0}

    def frequency(self, key) -> int:
        """Access count of a present key (0 if absent)."""
        return self._freq.get(key, 0)

    def _link_after(self, a: int, f: int) -> None:
        nxt, prv = self._next, self._prev
        n = nxt[a]
        nxt[a], prv[f], nxt[f], prv[n] = f, a, n, f

    def _unlink(self, f: int) -> None:
        nxt, prv = self._next, self._prev
        a, n = prv.pop(f), nxt.pop(f)
        nxt[a], prv[n] = n, a

    def _add(self, key, size: int) -> None:
        self._sizes[key] = size
        self._freq[key] = 1
        b = self._buckets.get(1)
        if b is None:
            b = self._buckets[1] = OrderedDict()
            self._link_after(0, 1)                    # 1 is the lowest possible count: the head
        b[key] = None

    def _hit(self, key) -> None:
        freq, buckets = self._freq, self._buckets
        f = freq[key]
        nf = f + 1
        b = buckets[f]
        del b[key]
        nb = buckets.get(nf)
        if nb is None:
            nb = buckets[nf] = OrderedDict()
            self._link_after(f, nf)
        nb[key] = None
        freq[key] = nf
        if not b:
            del buckets[f]
            self._unlink(f)

    def _pop_victim(self, incoming) -> tuple:
        f = self._next[0]
        b = self._buckets[f]
        key, _ = b.popitem(last=False)
        if not b:
            del self._buckets[f]
            self._unlink(f)
        del self._freq[key]
        return key, self._sizes.pop(key)

    def _discard(self, key) -> int:
        f = self._freq.pop(key)
        b = self._buckets[f]
        del b[key]
        if not b:
            del self._buckets[f]
            self._unlink(f)
        return self._sizes.pop(key)


class ARC(Cache):
    """Adaptive Replacement Cache (Megiddo & Modha, FAST 2003), LMCache MP's `ARC` (`arc.py`).

    T1 holds keys seen once recently, T2 keys seen at least twice; the ghost lists B1 and B2 remember
    (keys only, no bytes) what was recently evicted from T1 and T2. A miss that hits ghost B1 means T1
    was too small, so the target size `p` of T1 grows (by max(|B2|/|B1|, 1)); a ghost hit in B2 shrinks
    it. REPLACE evicts T1's LRU key when |T1| > p (or == p and the incoming key is in B2), else T2's,
    and moves the victim to the matching ghost list. p starts at 0.

    ARC counts ENTRIES, not bytes: its size is c = capacity // (size of the first object inserted),
    because all objects in one tier are chunks of the same size. The ghost directory is kept within
    |T1|+|B1| <= c and |T1|+|T2|+|B1|+|B2| <= 2c. In on-demand mode it evicts while the cache holds c
    entries or the object does not fit in bytes (the same thing when sizes are uniform); in batch mode
    the watermark decides and REPLACE picks every victim of the batch.
    `t1`, `t2`, `b1`, `b2` (OrderedDicts, LRU first), `p` and `c` are readable for inspection.
    """

    __slots__ = ("c", "p", "t1", "t2", "b1", "b2")
    name = "ARC"

    def __init__(self, capacity: int, *, watermark: float | None = None, ratio: float = 0.2):
        super().__init__(capacity, watermark=watermark, ratio=ratio)
        self.c = 0            # entries; fixed by the first insert
        self.p = 0.0          # target size of T1
        self.t1: OrderedDict = OrderedDict()
        self.t2: OrderedDict = OrderedDict()
        self.b1: OrderedDict = OrderedDict()
        self.b2: OrderedDict = OrderedDict()

    def _make_room(self, key, size: int) -> list:
        if not self.c:
            self.c = max(1, self.capacity // size)
        c, b1, b2 = self.c, self.b1, self.b2
        if key in b1:                                 # ghost hit: T1 was too small
            self.p = min(c, self.p + max(len(b2) / len(b1), 1))
        elif key in b2:                               # ghost hit: T2 was too small
            self.p = max(0, self.p - max(len(b1) / len(b2), 1))
        if self.watermark is not None:
            return super()._make_room(key, size)
        evicted: list = []
        t1, t2, cap = self.t1, self.t2, self.capacity
        while len(t1) + len(t2) >= c or self.used + size > cap:
            self._evict(key, evicted)
        return evicted

    def _add(self, key, size: int) -> None:
        self._sizes[key] = size
        t1, t2, b1, b2, c = self.t1, self.t2, self.b1, self.b2, self.c
        if key in b1:
            del b1[key]
            t2[key] = None
        elif key in b2:
            del b2[key]
            t2[key] = None
        else:
            t1[key] = None
        # keep the ghost directory in bounds (drops ghosts' LRU ends, as ARC's case IV does)
        while len(t1) + len(b1) > c and b1:
            b1.popitem(last=False)
        while len(t1) + len(t2) + len(b1) + len(b2) > 2 * c and (b1 or b2):
            (b2 or b1).popitem(last=False)

    def _hit(self, key) -> None:
        t1 = self.t1
        if key in t1:
            del t1[key]
            self.t2[key] = None
        else:
            self.t2.move_to_end(key)

    def _pop_victim(self, incoming) -> tuple:
        t1, t2 = self.t1, self.t2
        n1 = len(t1)
        if n1 and (not t2 or n1 > self.p or (n1 == self.p and incoming in self.b2)):
            key, _ = t1.popitem(last=False)
            self.b1[key] = None
        else:
            key, _ = t2.popitem(last=False)
            self.b2[key] = None
        return key, self._sizes.pop(key)

    def _discard(self, key) -> int:
        if key in self.t1:
            del self.t1[key]
        else:
            del self.t2[key]
        return self._sizes.pop(key)


class NoEviction(Cache):
    """Never evicts: an insert that does not fit is refused (stores nothing, returns []).

    LMCache's MP `noop` policy, and what its remote connectors do (they never evict; capacity is managed
    outside LMCache, e.g. by an RGW lifecycle rule: wrap this in `TTL`). The watermark has no effect."""

    __slots__ = ()
    name = "none"

    def touch(self, keys: Iterable, now: float = 0.0) -> None:
        return None

    def insert(self, key: Hashable, size: int, now: float = 0.0) -> list:
        if key in self._sizes:
            return []
        if size <= 0:
            raise ValueError(f"object size must be > 0 bytes, got {size}")
        if self.used + size > self.capacity:
            self.rejected += 1
            return []
        self._sizes[key] = size
        self.used += size
        return []

    def _add(self, key, size: int) -> None:
        self._sizes[key] = size

    def _hit(self, key) -> None:
        return None

    def _pop_victim(self, incoming) -> tuple:
        raise RuntimeError("NoEviction never evicts")

    def _discard(self, key) -> int:
        return self._sizes.pop(key)
