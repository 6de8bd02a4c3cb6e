"""Eviction policies behind one small interface, usable stand-alone and by every tier, capacity in bytes.

A `Cache` holds opaque hashable keys (chunk hashes), each with a size in bytes, up to `capacity`
bytes. When a new key does not fit, the cache's *eviction policy* picks the victims to drop. Every
tier of the simulated hierarchy (LMCache's DRAM, NVMe and Ceph tiers) owns one or more of these; they
are also usable on their own, e.g. to replay a trace against a policy.

Which policies LMCache really has (reference/lmcache-vllm.md §2):

- in-process mode (LocalCPU and LocalDisk backends): LRU, LFU, FIFO and MRU, evicting *on demand*,
  one object at a time, until the new object fits. Remote storage (S3/Ceph) never evicts.
- MP mode (L1 and the L2 adapters with a capacity): LRU, ARC, IsolatedLRU and noop, evicting in
  *batches* triggered by a watermark: when usage >= 80% of capacity it evicts 20% of capacity
  worth of bytes (`trigger_watermark=0.8`, `eviction_ratio=0.2`).
- expiry by age exists only outside LMCache, as an RGW lifecycle rule on the Ceph bucket; here it is
  the `TTL` wrapper around any policy.

On-demand mode is `watermark=None`; batch mode is `watermark=w` (and `ratio`). In batch mode the key
being inserted is never a victim of its own batch (kvplan's choice: LMCache MP holds an object being
written under a lock, `--l1-write-ttl-seconds` in §2), and an insert that would not fit at all still evicts on demand first, so `used` never
exceeds `capacity` in either mode.

The policies are in policies.py (compiled: every chunk a tier stores or looks up goes through them);
see `POLICIES`, and build one with `make(policy, capacity, ttl=..., watermark=..., ratio=...)`.
"""

from __future__ import annotations

from collections import deque
from typing import Hashable, Iterable, Sequence

from .policies import ARC, FIFO, LFU, LRU, MRU, Cache, IsolatedLRU, NoEviction

__all__ = ["Cache", "LRU", "LFU", "FIFO", "MRU", "ARC", "IsolatedLRU", "NoEviction", "TTL", "POLICIES", "make"]


_OWN = ("inner", "ttl", "name", "expired", "expired_bytes", "_queue", "_live", "_seq")
"""TTL's own attributes (everything else is the inner cache's)."""


class TTL:
    """Expiry by age around any policy: an entry expires `ttl` seconds after it was (last) inserted.

    Like an RGW lifecycle rule on the Ceph bucket: a re-insert of a present key (an S3 PUT overwriting
    the object) refreshes its expiry; reads (`touch`) do not. At time `now` an entry inserted at `t` is
    expired when `t + ttl <= now`. Expiry is lazy: `expire(now)` removes everything expired by `now`
    and returns those keys; `insert` and `touch` call it first. `prefix()`, `in`, `len()` and `keys()`
    have no side effects, so they still see an entry whose time has passed until `expire(now)` runs:
    callers call `expire(now)` before looking up (the hierarchy does).

    Expired entries are counted in `expired` / `expired_bytes`, not in `evictions`. `now` must not go
    backwards: since ttl is constant, entries expire in insertion order, so a deque of
    (expiry, sequence, key) gives O(1) amortised expiry (refreshed or evicted keys leave stale entries
    that are skipped, and the deque is compacted when stale entries dominate).
    Has `Cache`'s public interface without being a `Cache` (the policies are compiled classes, which
    cannot take a wrapper as a virtual subclass); everything else is the inner cache's (`.inner`).
    """

    __slots__ = _OWN

    def __init__(self, inner: Cache, ttl: float):
        if not ttl > 0:
            raise ValueError(f"ttl must be > 0 seconds, got {ttl}")
        self.inner = inner
        self.ttl = ttl
        self.name = f"{inner.name}+TTL"
        self.expired = 0
        self.expired_bytes = 0
        self._queue: deque[tuple[float, int, Hashable]] = deque()   # (expiry time, sequence, key), in expiry order
        self._live: dict[Hashable, int] = {}   # key -> sequence of its current queue entry
        self._seq = 0

    # ---- the inner cache's state
    @property
    def capacity(self) -> int:
        return self.inner.capacity

    @property
    def used(self) -> int:
        return self.inner.used

    @property
    def evictions(self) -> int:
        return self.inner.evictions

    @property
    def evicted_bytes(self) -> int:
        return self.inner.evicted_bytes

    @property
    def rejected(self) -> int:
        return self.inner.rejected

    @property
    def watermark(self) -> float | None:
        return self.inner.watermark

    @property
    def ratio(self) -> float:
        return self.inner.ratio

    def __getattr__(self, attr: str) -> object:
        if attr.startswith("__") or attr in _OWN:
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def __repr__(self) -> str:
        return f"TTL({self.inner!r}, ttl={self.ttl})"

    def __contains__(self, key) -> bool:
        return key in self.inner

    def __len__(self) -> int:
        return len(self.inner)

    def keys(self) -> list:
        return self.inner.keys()

    def prefix(self, keys: Sequence, start: int = 0) -> int:
        return self.inner.prefix(keys, start)

    def absent(self, keys: Iterable) -> list:
        return self.inner.absent(keys)

    def expire(self, now: float) -> list:
        """Remove every entry expired by `now` (expiry <= now); return their keys, oldest first."""
        q = self._queue
        if not q or q[0][0] > now:
            return []
        live, inner, out = self._live, self.inner, []
        while q and q[0][0] <= now:
            _, seq, key = q.popleft()
            if live.get(key) != seq:
                continue                 # stale: refreshed, evicted or removed since
            del live[key]
            before = inner.used
            if inner.remove(key):
                self.expired += 1
                self.expired_bytes += before - inner.used
                out.append(key)
        return out

    def touch(self, keys: Iterable, now: float = 0.0) -> None:
        if self._queue and self._queue[0][0] <= now:
            self.expire(now)
        self.inner.touch(keys, now)

    def insert(self, key: Hashable, size: int, now: float = 0.0) -> list:
        if self._queue and self._queue[0][0] <= now:
            self.expire(now)
        inner = self.inner
        evicted = inner.insert(key, size, now)
        live = self._live
        for k in evicted:
            live.pop(k, None)
        if key in inner:                 # stored, or already present: (re)start its clock
            self._seq += 1
            live[key] = self._seq
            q = self._queue
            q.append((now + self.ttl, self._seq, key))
            if len(q) > 2 * len(live) + 64:
                self._queue = deque(e for e in q if live.get(e[2]) == e[1])
        return evicted

    def store(self, keys: Iterable, size: int, now: float = 0.0) -> tuple[int, int]:
        """`Cache.store`: a present key is touched (its clock not restarted), an absent one inserted."""
        if self._queue and self._queue[0][0] <= now:
            self.expire(now)
        inner, live, expiry = self.inner, self._live, now + self.ttl
        sizes = inner._sizes
        stored = refused = 0
        for k in keys:                   # `insert` written out: nothing expires at `now` any more
            if k in sizes:
                inner._hit(k)
                continue
            for gone in inner.insert(k, size, now):
                live.pop(gone, None)
            if k in sizes:
                stored += 1
                self._seq += 1
                live[k] = self._seq
                q = self._queue
                q.append((expiry, self._seq, k))
                if len(q) > 2 * len(live) + 64:
                    self._queue = deque(e for e in q if live.get(e[2]) == e[1])
            else:
                refused += 1
        return stored, refused

    def remove(self, key) -> bool:
        self._live.pop(key, None)
        return self.inner.remove(key)


POLICIES: dict[str, type[Cache]] = {
    "LRU": LRU, "LFU": LFU, "FIFO": FIFO, "MRU": MRU, "ARC": ARC, "IsolatedLRU": IsolatedLRU, "none": NoEviction,
}


def make(policy: str, capacity: int, *, ttl: float | None = None, watermark: float | None = None,
         ratio: float = 0.2) -> Cache | TTL:
    """A cache of `capacity` bytes with `policy` (a key of POLICIES, exact spelling), wrapped in TTL if
    `ttl` (seconds) is given; `watermark`/`ratio` select LMCache MP's batch eviction.
    `make("LFU", cap, ttl=3600)` is `TTL(LFU(cap), 3600)`."""
    cls = POLICIES.get(policy)
    if cls is None:
        raise ValueError(f"unknown eviction policy {policy!r}; allowed: {', '.join(POLICIES)}")
    cache = cls(capacity, watermark=watermark, ratio=ratio)
    return TTL(cache, ttl) if ttl is not None else cache
