"""Block keys of a content: the prefix-chained hash of each full unit of tokens.

`extend_keys` is a Segments content's (synthetic workloads), `trace_keys` a trace request's.

Key i is hash((key i-1, pieces)), where pieces is the tuple of (segment identity, start, end) runs
inside unit i (start and end are offsets within the segment) and key -1 is the chain's root. Each
unit's key names everything before it, so two contents share key i exactly when their first
(i + 1) x unit tokens are the same (content.py says why that makes a cache hit exact).

This is the readable definition. The wheel ships a C twin of this module (keyhash.c, built by
hatch_build.py) that computes the same keys with CPython's own tuple and int hash arithmetic
instead of building three tuples per key: it shadows this file once installed, as the mypyc-compiled
modules shadow theirs, and tests/test_keyhash.py holds the two to the same keys, key for key.
"""

from __future__ import annotations

def extend_keys(parts: tuple[tuple[tuple[int, ...], int], ...], n_keys: int, unit: int, keys: list[int], root: int) -> None:
    """Append to `keys` (the first keys of `parts`, a Segments content's (identity, tokens) runs, in `unit`-token
    units, already known) the ones after them, up to the first `n_keys`; `root` is the key before key 0. In place:
    a conversation's next turn takes over the keys of the turn it follows rather than copying them."""
    if len(keys) >= n_keys:
        return
    pi, po = 0, len(keys) * unit                     # part index and offset inside it
    while po >= parts[pi][1]:
        po -= parts[pi][1]
        pi += 1
    prev = keys[-1] if keys else root
    for _ in range(n_keys - len(keys)):
        ident, plen = parts[pi]
        if plen - po > unit:                         # the common case: the unit lies inside one part
            prev = hash((prev, ((ident, po, po + unit),)))
            po += unit
        else:
            need, pieces = unit, []
            while need:
                ident, plen = parts[pi]
                take = min(need, plen - po)
                pieces.append((ident, po, po + take))
                po += take
                need -= take
                if po == plen:
                    pi, po = pi + 1, 0
            prev = hash((prev, tuple(pieces)))
        keys.append(prev)


def trace_keys(hash_ids: list[int], input_length: int, length: int, unit: int, block_size: int, request: int,
               trace_tag: int, output_tag: int) -> list[int]:
    """The keys of a trace request's `length` tokens in `unit`-token units (content.TraceBlocks says why
    they are these). A unit ending at token e of the `input_length` input lies in trace block
    b = (e-1) // block_size: its key is hash((trace_tag, hash_ids[b], e - b*block_size)). A unit ending
    after the input chains on the key before it: hash((prev, output_tag, request, e))."""
    n_in = input_length // unit
    keys = []
    for e in range(unit, n_in * unit + 1, unit):
        b = (e - 1) // block_size
        keys.append(hash((trace_tag, hash_ids[b], e - b * block_size)))
    prev = keys[-1] if keys else trace_tag
    for e in range((n_in + 1) * unit, length + 1, unit):
        prev = hash((prev, output_tag, request, e))
        keys.append(prev)
    return keys
