"""Exact LRU stack distances (Mattson et al., 1970) of a request stream, in one pass, vectorised.

A *stream* is every key a cache is asked to refresh, in the order its LRU list is updated,
grouped into requests. Each request also names its *lookup*: the keys, in prefix order, whose
hit counts (LMCache and vLLM both answer a lookup with the longest prefix held, so a key after
the first miss is not a hit even when it is resident).

For a key looked up by a request starting at stream position `a`, its *depth* D is the number
of distinct keys referenced since its last reference before `a`: an LRU cache of C keys holds it
exactly when D < C (LRU's inclusion property: every capacity's contents are the top of one
stack). The request hits its i-th lookup key at capacity C when all keys 0..i hit, so that key's
*need* (the least capacity at which it is a hit) is the running maximum of D + 1 along the
lookup; a key never referenced before has no need (it never hits). Since every capacity's answer
is a comparison with the same needs, one pass gives the hit count at every capacity.

The computation, for n positions of which R start a run (see below):

- `previous`: prev[t], the last position before t with the same key, from one sort of the keys
  packed with their positions (O(n log n) in numpy's sort).
- The depth at request start `a` of the key last referenced at q is
  D = #{j < a : prev[j] <= q} - (q + 1): the distinct keys in (q, a) are the positions there
  whose key was not seen since q. That is a two-dimensional dominance count.
- Runs: consecutive positions j, j+1 of one request with prev[j+1] = prev[j] + 1 repeat what the
  stream did before (a prefix is mostly re-read the way it was last read). Their points
  (j, prev[j]) form one diagonal segment, and because prev values are distinct and the query
  value q is itself the prev of a position at or after `a`, a segment before `a` lies entirely
  below q or entirely above it: the count over n points is a weighted count over the R segments.
  Along a lookup the same holds for the queries: keys whose q values step by one in the
  request's own order share one count. The dominance counts then cost O(R log R), done by a
  top-down stable partition (a merge sort run backwards) in numpy.

Everything is integer arithmetic on arrays, so the result is exact and deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Stream", "Needs", "needs", "hits_at", "least_capacity", "previous", "needs_brute_force"]

NEVER = np.iinfo(np.int64).max
"""The need of a lookup that never hits (its key was not referenced before, or an earlier one was not)."""


@dataclass
class Stream:
    """A reference stream grouped into requests.

    keys         -- int64, every reference in LRU update order (a block that has no key, such as
                    vLLM's partial last block, is given one no other reference has).
    offsets      -- int64, len(requests) + 1: request r occupies positions offsets[r]:offsets[r+1].
    lookups      -- int64, the stream positions of every request's lookup keys, request after
                    request, each in prefix order (a lookup may be empty: a warm-up request).
    lookup_offsets -- int64, len(requests) + 1: request r's lookup is lookups[lookup_offsets[r]:...].
    """

    keys: np.ndarray
    offsets: np.ndarray
    lookups: np.ndarray
    lookup_offsets: np.ndarray

    @property
    def references(self) -> int:
        return len(self.keys)


def previous(keys: np.ndarray) -> np.ndarray:
    """prev[t]: the last position before t that holds keys[t], or -1.

    One sort of (key's high bits, position) packed into one unsigned 64-bit word; keys whose high
    bits collide (rare) are put in order by their full value afterwards, so the result is exact.
    """
    n = len(keys)
    prev = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return prev
    bits = np.uint64(max(1, (n - 1).bit_length()))
    packed = keys.view(np.uint64) >> bits
    packed <<= bits
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    where = (packed & np.uint64((1 << int(bits)) - 1)).view(np.int64)
    full = keys[where]
    same = full[1:] == full[:-1]
    packed >>= bits
    same_top = packed[1:] == packed[:-1]
    clash = np.flatnonzero(same_top & ~same)
    if len(clash):                       # different keys share their high bits: order those groups exactly
        bounds = np.concatenate(([0], np.flatnonzero(~same_top) + 1, [n]))   # runs of equal high bits
        lo = bounds[np.searchsorted(bounds, clash, side="right") - 1]
        hi = bounds[np.searchsorted(bounds, clash + 1, side="right")]
        for start, stop in sorted(set(zip(lo.tolist(), hi.tolist()))):
            part = where[start:stop]
            where[start:stop] = part[np.lexsort((part, keys[part]))]
        full = keys[where]
        same = full[1:] == full[:-1]
    t = np.flatnonzero(same)
    prev[where[t + 1]] = where[t]
    return prev


def _earlier_smaller(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """For each i: the sum of weights[j] over j < i with values[j] < values[i] (values distinct).

    Top-down: the whole sequence, ordered by value, is split in halves by position again and
    again; at each split every element of the right half adds the weights of the left-half
    elements before it in value order, then both halves keep their value order (a stable
    partition). Each pair j < i meets at exactly one split.
    """
    n = len(values)
    out = np.zeros(n, dtype=np.int64)
    if n < 2:
        return out
    order = np.argsort(values, kind="stable")          # positions by value
    where = np.arange(n, dtype=np.int64)                # index of each slot of `order`
    w = weights.astype(np.int64)
    for s in range((n - 1).bit_length(), 0, -1):       # blocks of 2^s positions split into halves
        half = 1 << (s - 1)
        right = ((order >> (s - 1)) & 1).astype(bool)
        start = (order >> s) << s                       # each block's first slot (blocks are contiguous)
        left_w = np.where(right, 0, w[order])
        acc = np.concatenate(([0], np.cumsum(left_w)))
        out[order[right]] += (acc[:-1] - acc[start])[right]
        left_n = np.concatenate(([0], np.cumsum(~right)))
        lb = left_n[:-1] - left_n[start]                # left elements before each slot in its block
        slot = np.where(right, start + half + (where - start) - lb, start + lb)
        new = np.empty_like(order)
        new[slot] = order
        order = new
    return out


@dataclass
class Needs:
    need: np.ndarray
    """Per lookup (in `Stream.lookups` order): the least LRU capacity, in keys, at which it is a hit
    under the prefix rule, or NEVER."""
    distinct: int
    """Distinct keys referenced: the working set."""


def needs(stream: Stream) -> Needs:
    """Every lookup's need and the stream's working set (see the module docstring)."""
    keys, offsets, look = stream.keys, stream.offsets, stream.lookups
    n = len(keys)
    prev = previous(keys)
    has = prev >= 0
    distinct = n - int(np.count_nonzero(has))
    if not len(look):
        return Needs(np.full(0, NEVER, dtype=np.int64), distinct)

    # each lookup's last reference before its request began (chasing repeats inside the request)
    look_req = np.repeat(np.arange(len(offsets) - 1), np.diff(stream.lookup_offsets))
    a = offsets[:-1][look_req]
    q = prev[look]
    inside = np.flatnonzero(q >= a)
    while len(inside):
        q[inside] = prev[q[inside]]
        inside = inside[q[inside] >= a[inside]]

    # points: runs of positions of one request whose prev steps by one, weighted by their length
    step = np.zeros(n, dtype=bool)
    if n > 1:
        np.equal(prev[1:], prev[:-1] + 1, out=step[1:])
        step[1:] &= has[:-1]
        step[offsets[1:-1][offsets[1:-1] < n]] = False          # a run never crosses into the next request
    point_x = np.flatnonzero(has & ~step)
    last = has.copy()
    last[:-1] &= ~step[1:]
    point_w = np.flatnonzero(last) - point_x + 1
    point_y = prev[point_x]
    firsts = np.flatnonzero(~has)                                # first references of their keys
    del step, last, has

    # queries: runs of consecutive lookups of one request whose q steps by +1 or -1 share one count
    lq = np.flatnonzero(q >= 0)
    qv, qr, a = q[lq], look_req[lq], a[lq]
    del q, prev
    brk = np.ones(len(lq), dtype=bool)
    if len(lq) > 1:
        brk[1:] = ~((qr[1:] == qr[:-1]) & (lq[1:] == lq[:-1] + 1) & (np.abs(np.diff(qv)) == 1))
    head_of = np.cumsum(brk) - 1
    qx, qy = a[brk], qv[brk]
    del a, qr

    # W(a, q) = the weight of the point runs with x < a and y < q. In x order (queries first at
    # equal x: a run at x == a is the request's own), each query sums the earlier points below it.
    xs = np.concatenate((point_x, qx))
    ys = np.concatenate((point_y, qy))
    kind = np.concatenate((np.ones(len(point_x), dtype=np.int64), np.zeros(len(qx), dtype=np.int64)))
    ws = np.concatenate((point_w, np.zeros(len(qx), dtype=np.int64)))
    order = np.lexsort((kind, xs))
    rank = np.empty(len(xs), dtype=np.int64)
    rank[np.lexsort((kind[order], ys[order]))] = np.arange(len(xs))    # equal y: the query ranks lower
    summed = np.empty(len(xs), dtype=np.int64)
    summed[order] = _earlier_smaller(rank, ws[order])
    w_head = summed[len(point_x):]

    # D = (first references before a) + W - q - 1, constant minus q along a query run
    depth = np.searchsorted(firsts, qx)[head_of] + w_head[head_of] - qv - 1
    need = np.full(len(look), NEVER, dtype=np.int64)
    need[lq] = depth + 1
    del depth, qv, lq, head_of
    # the prefix rule: the running maximum along each request's lookup (NEVER absorbs)
    finite = need != NEVER
    span = int(need[finite].max()) + 2 if finite.any() else 2
    shift = look_req * span
    del look_req
    need[~finite] = span - 1
    need += shift
    np.maximum.accumulate(need, out=need)
    need -= shift
    need[need >= span - 1] = NEVER
    return Needs(need, distinct)


def hits_at(need: np.ndarray, capacity: int) -> int:
    """Lookups that hit at `capacity` keys: those whose need is at most it (`need` sorted ascending)."""
    return int(np.searchsorted(need, capacity, side="right"))


def least_capacity(need: np.ndarray, share: int) -> int:
    """The least capacity at which the hits reach `share` percent of the hits at unbounded capacity
    (`need` sorted ascending; NEVER entries never hit). Exact: integer arithmetic only."""
    reusable = int(np.searchsorted(need, NEVER, side="left"))
    wanted = (reusable * share + 99) // 100
    return int(need[wanted - 1]) if wanted else 0


def needs_brute_force(stream: Stream) -> np.ndarray:
    """`needs` by walking an explicit LRU list (a Python list, O(n x distinct)): for tests."""
    stack: list = []                     # most recent last
    out = np.full(len(stream.lookups), NEVER, dtype=np.int64)
    keys = stream.keys.tolist()
    for r in range(len(stream.offsets) - 1):
        a, b = int(stream.offsets[r]), int(stream.offsets[r + 1])
        depth = {}
        for i in range(int(stream.lookup_offsets[r]), int(stream.lookup_offsets[r + 1])):
            k = keys[int(stream.lookups[i])]
            if k in stack:
                depth[i] = len(stack) - 1 - stack.index(k)
        best = 0
        for i in range(int(stream.lookup_offsets[r]), int(stream.lookup_offsets[r + 1])):
            if i not in depth or best == NEVER:
                best = NEVER
            else:
                best = max(best, depth[i] + 1)
            out[i] = best
        for t in range(a, b):
            k = keys[t]
            if k in stack:
                stack.remove(k)
            stack.append(k)
    return out
