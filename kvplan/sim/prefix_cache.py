"""vLLM's HBM prefix cache: the block pool of one instance, with finished requests' blocks kept.

As vLLM v1 does it (vllm/v1/core/block_pool.py, kv_cache_utils.py `FreeKVCacheBlockQueue`;
reference/lmcache-vllm.md §2):

- The pool has `num_blocks` blocks. A running request holds its blocks (reference counted, so
  requests sharing a prefix share its blocks).
- A full block is identified by the prefix-chained hash of its tokens; when a request finishes,
  its blocks return to the free queue but keep their hash, so a later request with the same
  prefix hits them without recomputation.
- Allocation takes blocks from the head of the free queue; a hashed block taken there is evicted
  from the cache. Freed blocks join the tail in reverse order (the last block of a request
  first), so among blocks freed together the one at the end of the longer chain goes first:
  LRU, ties broken toward the tail of the chain.
- A hit on a cached free block takes it out of the free queue until its users finish.

Never-used blocks sit at the head of the queue at start-up; they are counted, not listed.
Blocks without a hash that were freed together (a request's partial tail, its duplicates) are
one entry of the queue holding their count, so a long output costs one entry, not one per block.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence


class PrefixCache:
    __slots__ = ("num_blocks", "_free", "_free_count", "_pristine", "_refs", "_anon_free", "evictions")

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self._free: OrderedDict = OrderedDict()   # head = next reused; hashed key -> None, anonymous run -> count
        self._free_count = 0                      # blocks in _free
        self._pristine = num_blocks               # never-used blocks, logically at the head
        self._refs: dict = {}                     # hashed blocks in use -> number of holders
        self._anon_free = 0                       # free blocks without a hash (partial tails, duplicates)
        self.evictions = 0                        # cached blocks reused for other content

    # ---- queries
    def match(self, keys: Sequence[int]) -> int:
        """Leading blocks of `keys` that are cached (free or in use)."""
        free, refs, n = self._free, self._refs, 0
        for key in keys:
            if key in free or key in refs:
                n += 1
            else:
                break
        return n

    @property
    def free_blocks(self) -> int:
        return self._pristine + self._free_count

    @property
    def cached_blocks(self) -> int:
        """Blocks holding a reusable hash (in use or free)."""
        return len(self._refs) + self._free_count - self._anon_free

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    # ---- a request's life
    def allocate(self, keys: Sequence[int], hit: int, total_blocks: int) -> "Holding | None":
        """Give a request `total_blocks` blocks: the first `hit` are the cached `keys[:hit]`, the rest new.

        Returns None (and changes nothing) when the pool cannot supply them.
        """
        fresh = total_blocks - hit
        free, refs = self._free, self._refs
        hits = keys[:hit]
        if fresh > self.free_blocks - sum(map(free.__contains__, hits)):
            return None
        for key in hits:
            if key in refs:
                refs[key] += 1
            else:
                del free[key]
                self._free_count -= 1
                refs[key] = 1
        self._take(fresh)
        return Holding(list(keys[:hit]), fresh, hit)

    def grow(self, holding: "Holding", blocks: int) -> bool:
        """Give a running request `blocks` more new blocks (decode); False when the pool is out."""
        if blocks > self.free_blocks:
            return False
        self._take(blocks)
        holding.anon += blocks
        return True

    def _take(self, n: int) -> None:
        """Reuse `n` free blocks from the head of the queue (never-used ones first)."""
        pristine = min(n, self._pristine)
        self._pristine -= pristine
        n -= pristine
        free = self._free
        while n:
            key, run = free.popitem(last=False)
            if run is None:                    # a cached block: its content is evicted
                self.evictions += 1
                self._free_count -= 1
                n -= 1
            else:                              # a run of anonymous blocks
                used = min(n, run)
                n -= used
                self._anon_free -= used
                self._free_count -= used
                if run > used:
                    free[key] = run - used
                    free.move_to_end(key, last=False)

    def commit(self, holding: "Holding", keys: Sequence[int], upto: int) -> None:
        """The request has computed its full blocks up to `upto`: they become cached (hashed).

        A block whose hash another block already carries stays anonymous (vLLM keeps one copy
        findable; kvplan counts the duplicate as plain used memory).
        """
        refs, free = self._refs, self._free
        new = [key for key in keys[holding.next:upto] if key not in refs and key not in free]
        refs.update(dict.fromkeys(new, 1))
        holding.keys.extend(new)
        holding.anon -= len(new)
        holding.next = max(holding.next, upto)

    def release(self, holding: "Holding") -> None:
        """The request finished: its blocks join the free queue's tail, last block first.

        Hashed blocks another request still holds stay in use.
        """
        free, refs = self._free, self._refs
        if holding.anon:                       # the unhashed tail goes first
            free[object()] = holding.anon
            self._anon_free += holding.anon
            self._free_count += holding.anon
        freed = 0
        for key in reversed(holding.keys):
            held = refs[key]
            if held == 1:
                del refs[key]
                free[key] = None
                freed += 1
            else:
                refs[key] = held - 1
        self._free_count += freed
        holding.keys, holding.anon = [], 0


class Holding:
    """The blocks one request holds: hashed ones (by key, in chain order) and anonymous ones."""

    __slots__ = ("keys", "anon", "next")

    def __init__(self, keys: list, anon: int, next_index: int):
        self.keys = keys
        self.anon = anon
        self.next = next_index

    @property
    def blocks(self) -> int:
        return len(self.keys) + self.anon
