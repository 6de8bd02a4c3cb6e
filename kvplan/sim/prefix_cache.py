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

Representation (the behaviour above is per block; the bookkeeping is per run of blocks): block
keys are prefix-chained, so the cached blocks form a tree of chains, kept here as a radix tree of
`_Node`s. A node is a run of consecutive blocks of one chain that are all in the same state:
held by the same number of requests, or free (then the whole run is one entry of the free queue,
its deepest block first), or a ghost (not cached: evicted blocks that still have cached blocks
deeper in their chain, which later requests can find again once the gap is recomputed). Nodes
split where states diverge and are never merged. A request touching 750 blocks thus costs a
walk over a few nodes, not 750 dictionary operations; eviction takes whole or partial runs from
the head of the queue. Where a request's chain meets a run, comparing the last key they share
tells whether it follows the whole run: chained keys that differ once differ from there on, so
where they part is found by a binary search (`_parting`), not by comparing every key. Trace
replay holds a trace's hash_ids to that rule (trace.read_trace).
"""

from __future__ import annotations


class _Entry:
    """A link of the free queue (a doubly linked list with a sentinel). An entry out of the queue
    links to `_OUT` (not to itself: a run pauses the cycle collector, so a cycle would stay)."""

    __slots__ = ("prev", "next")

    def __init__(self) -> None:
        self.prev: _Entry = _OUT
        self.next: _Entry = _OUT


class _Out(_Entry):
    """What entries out of the queue link to."""

    __slots__ = ()

    def __init__(self) -> None:
        self.prev = self.next = self


_OUT = _Out()


class _Anon(_Entry):
    """Free blocks without a hash, freed together: one queue entry holding their count."""

    __slots__ = ("count",)

    def __init__(self, count: int):
        super().__init__()
        self.count = count


class _Node(_Entry):
    """Consecutive blocks `keys` of one chain, starting at block position `lo`, in one state.

    refs > 0: held by that many requests; refs == 0 and not ghost: free, in the queue; ghost: not
    cached (kept only as the parent of cached descendants). `children` maps the first key of each
    deeper run to its node.
    """

    __slots__ = ("keys", "lo", "refs", "ghost", "parent", "children")

    def __init__(self, keys: list[int], lo: int, parent: "_Node | None", refs: int = 0, ghost: bool = True):
        super().__init__()
        self.keys, self.lo, self.parent = keys, lo, parent
        self.refs, self.ghost = refs, ghost
        self.children: dict[int, _Node] = {}


class PrefixCache:
    __slots__ = ("num_blocks", "_root", "_queue", "_free_count", "_pristine", "_anon_free", "_cached", "evictions")

    def __init__(self, num_blocks: int):
        self.num_blocks = num_blocks
        self._root = _Node([], 0, None, refs=1, ghost=False)   # the empty prefix, parent of every chain
        self._queue = _Entry()                    # sentinel: next = head (reused first), prev = tail
        self._queue.prev = self._queue.next = self._queue
        self._free_count = 0                      # blocks in the queue
        self._pristine = num_blocks               # never-used blocks, logically at the head
        self._anon_free = 0                       # free blocks without a hash (partial tails, duplicates)
        self._cached = 0                          # blocks holding a hash (in use or free)
        self.evictions = 0                        # cached blocks reused for other content

    # ---- queries
    def match(self, keys: list[int]) -> int:
        """Leading blocks of `keys` that are cached (free or in use)."""
        node, p, n = self._root, 0, len(keys)
        while p < n:
            child = node.children.get(keys[p])
            if child is None or child.ghost:
                return p
            run = child.keys
            stop = min(p + len(run), n)
            if run[stop - 1 - p] != keys[stop - 1]:
                return _parting(run, p, keys, p, stop - 1)
            node, p = child, stop
        return p

    @property
    def free_blocks(self) -> int:
        return self._pristine + self._free_count

    @property
    def cached_blocks(self) -> int:
        """Blocks holding a reusable hash (in use or free)."""
        return self._cached

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    # ---- a request's life
    def allocate(self, keys: list[int], hit: int, total_blocks: int) -> "Holding | None":
        """Give a request `total_blocks` blocks: the first `hit` are the cached `keys[:hit]` (as `match` found
        them just before), the rest new.

        Returns None (and changes nothing but how runs are split) when the pool cannot supply them.
        """
        fresh = total_blocks - hit
        nodes = self._path(keys, 0, hit, known=hit)
        revived = sum(len(node.keys) for node in nodes if node.refs == 0)   # free cached blocks taken back
        if fresh > self.free_blocks - revived:
            return None
        for node in nodes:
            if node.refs == 0:
                _unlink(node)
            node.refs += 1
        self._free_count -= revived
        self._take(fresh)
        holding = Holding(keys, fresh, hit)
        if hit:
            holding.ranges.append([0, hit])
        return holding

    def grow(self, holding: "Holding", blocks: int) -> bool:
        """Give a running request `blocks` more new blocks (decode); False when the pool is out."""
        if blocks > self.free_blocks:
            return False
        self._take(blocks)
        holding.anon += blocks
        holding.blocks += blocks
        return True

    def _take(self, n: int) -> None:
        """Reuse `n` free blocks from the head of the queue (never-used ones first)."""
        pristine = min(n, self._pristine)
        self._pristine -= pristine
        n -= pristine
        queue = self._queue
        while n:
            entry = queue.next
            if isinstance(entry, _Anon):       # a run of anonymous blocks
                used = min(n, entry.count)
                entry.count -= used
                self._anon_free -= used
                if not entry.count:
                    _unlink(entry)
            else:                              # cached blocks, deepest first: their contents are evicted
                assert isinstance(entry, _Node)
                size = len(entry.keys)
                used = min(n, size)
                if used < size and not entry.children:
                    # the deepest `used` blocks lead nowhere: split off as a ghost they would be
                    # pruned at once, so they are just cut off (a decode takes one block at a time)
                    del entry.keys[size - used:]
                else:
                    if used < size:            # the deepest `used` blocks split off, ahead of the rest
                        self._split(entry, entry.lo + size - used)
                        entry = queue.next
                        assert isinstance(entry, _Node)
                    _unlink(entry)
                    entry.ghost = True
                    self._prune(entry)
                self._cached -= used
                self.evictions += used
            self._free_count -= used
            n -= used

    def commit(self, holding: "Holding", keys: list[int], upto: int) -> None:
        """The request has computed its full blocks up to `upto`: they become cached (hashed).

        A block whose hash another block already carries stays anonymous (vLLM keeps one copy
        findable; kvplan counts the duplicate as plain used memory).
        """
        if upto <= holding.next:
            return
        new, ranges = 0, holding.ranges
        held = ranges[0][1] if ranges and ranges[0][0] == 0 else 0     # blocks [0, held) are this request's
        for node in self._path(keys, holding.next, upto, known=held):
            if node.ghost:                     # not cached: this request's copy becomes the cached one
                node.ghost, node.refs = False, 1
                size = len(node.keys)
                new += size
                if ranges and ranges[-1][1] == node.lo:
                    ranges[-1][1] += size
                else:
                    ranges.append([node.lo, node.lo + size])
        self._cached += new
        holding.anon -= new                    # computed blocks stop being anonymous: holding.blocks stays
        holding.next = upto

    def release(self, holding: "Holding") -> None:
        """The request finished: its blocks join the free queue's tail, last block first.

        Hashed blocks another request still holds stay in use.
        """
        if holding.anon:                       # the unhashed tail goes first
            self._append(_Anon(holding.anon))
            self._anon_free += holding.anon
            self._free_count += holding.anon
        if holding.ranges:
            freed: list[_Node] = []
            keys, ranges, r = holding.chain, holding.ranges, 0
            node, p, end = self._root, 0, holding.ranges[-1][1]
            while p < end:
                node = node.children[keys[p]]
                if ranges[r][1] <= p:
                    r += 1
                if ranges[r][0] <= p:          # runs are split at the edges of what a request holds
                    node.refs -= 1
                    if not node.refs:
                        freed.append(node)
                p += len(node.keys)
            for node in reversed(freed):
                self._append(node)
                self._free_count += len(node.keys)
        holding.ranges, holding.blocks, holding.anon = [], 0, 0

    # ---- the tree and the queue
    def _path(self, keys: list[int], start: int, end: int, known: int = 0) -> list[_Node]:
        """The nodes holding blocks [start, end) of chain `keys`, split at start and end; absent
        blocks on the way get ghost nodes. The caller may vouch that the first `known` blocks are
        in the tree as `keys` has them (cached, or held by the caller: neither can have been
        evicted), so only the blocks after them are compared."""
        out: list[_Node] = []
        node, p = self._root, 0
        while p < end:
            child = node.children.get(keys[p])
            if child is None:
                child = node.children[keys[p]] = _Node(list(keys[p:end]), p, node)
            run = child.keys
            stop = min(p + len(run), end)
            lo = known if known > p else p         # compared from here
            if lo < stop and run[stop - 1 - p] != keys[stop - 1]:    # the chains part inside this run
                self._split(child, _parting(run, p, keys, lo, stop - 1))
            elif stop < p + len(run):
                self._split(child, stop)
            if p < start < p + len(child.keys):
                self._split(child, start)
            if p >= start:
                out.append(child)
            node, p = child, p + len(child.keys)
        return out

    def _split(self, node: _Node, at: int) -> None:
        """Cut `node` at block position `at`: the deeper part becomes its only child, same state
        (ahead of it in the free queue when free: deeper blocks go first)."""
        cut = at - node.lo
        tail = _Node(node.keys[cut:], at, node, node.refs, node.ghost)
        tail.children = node.children
        for child in tail.children.values():
            child.parent = tail
        node.keys = node.keys[:cut]
        node.children = {tail.keys[0]: tail}
        if node.prev is not _OUT:              # free: in the queue
            tail.prev, tail.next = node.prev, node
            node.prev.next = tail
            node.prev = tail

    def _prune(self, node: _Node) -> None:
        """Drop ghost nodes that no longer lead to anything cached."""
        while node.ghost and not node.children:
            parent = node.parent
            assert parent is not None             # the root is never a ghost
            del parent.children[node.keys[0]]
            node = parent

    def _append(self, entry: _Entry) -> None:
        tail = self._queue.prev
        entry.prev, entry.next = tail, self._queue
        tail.next = self._queue.prev = entry


def _parting(run: list[int], p: int, keys: list[int], lo: int, hi: int) -> int:
    """Where chain `keys` parts from `run` (a node's keys, the first of them at block position `p`): the first
    position in [lo, hi] whose key differs, given that keys before `lo` agree and key `hi` differs.

    Keys are prefix-chained (a key names every token before it), so two chains that differ once differ from
    there on: the agreeing positions are a prefix, and a binary search finds where it ends."""
    while lo < hi:
        mid = (lo + hi) // 2
        if run[mid - p] == keys[mid]:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _unlink(entry: _Entry) -> None:
    entry.prev.next = entry.next
    entry.next.prev = entry.prev
    entry.prev = entry.next = _OUT


class Holding:
    """The blocks one request holds: hashed ones (block position ranges of its chain) and anonymous ones."""

    __slots__ = ("chain", "ranges", "blocks", "anon", "next")

    def __init__(self, chain: list[int], anon: int, next_index: int):
        self.chain = chain                     # the request's block keys
        self.ranges: list[list[int]] = []      # [start, end) positions it holds hashed, in order
        self.blocks = next_index + anon        # all it holds, hashed and anonymous
        self.anon = anon
        self.next = next_index                 # blocks below this are hit or committed
