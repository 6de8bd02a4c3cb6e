"""Content: what a request's tokens are, told only by their prefix-chained keys, so that cache reuse is exact.

A request's tokens (prompt, then generated output) are never materialised. Its `content` only
answers one question: "what are the prefix-chained keys of your full `unit`-token pieces?".
vLLM's prefix cache asks with unit = block_size and LMCache with unit = chunk_size; two requests
share key i exactly when their first (i + 1) x unit tokens are identical, so a cache hit in the
simulator is the same event as a hit in the real stack, never a probability.

Two kinds of content (`workload.Content` is what they both are; it lives there, as a runtime-checkable
Protocol cannot be compiled):

- `Segments` (synthetic workloads): a tuple of parts (segment identity, length). A segment is
  a run of tokens named by a small tuple of ints, e.g. (SHARED_PREFIX, 3) or (USER_TEXT, 812);
  the token at offset j of a segment depends only on (identity, j), so any two contents that
  agree part by part up to a token agree on every token before it.
- `TraceBlocks` (Mooncake traces): the trace's `hash_ids` are prefix-chained ids of
  `block_size`-token blocks; they are mapped onto units of any size (a 512-token block is two
  256-token chunks; a unit that does not divide the block works too).

Keys are Python `hash()` of tuples of ints only (never str or bytes), so they are the same in
every process whatever PYTHONHASHSEED is (they may differ between CPython versions, which never
matters inside one run). Both kinds' keys are hashed by `keyhash` (in C once installed).
"""

from __future__ import annotations

from typing import Any

from ..warmup import SHARED_PREFIX, TEMPLATE
from .keyhash import extend_keys, trace_keys

# Segment kinds (the first int of a segment identity). Keep them positive: CPython hashes -1 and -2
# to the same value. SHARED_PREFIX (1) and TEMPLATE (2), the kinds lmcache.warmup prefills, are
# kvplan.warmup's, which the deployment and kvplan bench read too.
USER_TEXT = 3
"""New text a user sends (a chat turn, a code request, a question, a unique document): (USER_TEXT, n)."""
OUTPUT = 4
"""Generated tokens of one request: (OUTPUT, n)."""
GROUP_PROMPT = 5
"""The system prompt of a shared_prefix group (kvplan.sim.shapes): (GROUP_PROMPT, group)."""
QUESTION = 6
"""The question of one shared_prefix prompt, after its group's system prompt: (QUESTION, prompt)."""
LOG_PREFIX = 7
"""A shared prefix of a replayed per-request log (kvplan.sim.replay): (LOG_PREFIX, prefix id)."""
LOG_PROMPT = 8
"""A replayed log's prompt text after its prefix: (LOG_PROMPT, prompt id)."""

SEGMENTS_ROOT = 0x7365676D656E7473
"""The key before key 0 in a Segments chain."""
TRACE_TAG = 0x7472616365
"""Tags a trace block key: hash((TRACE_TAG, hash_id, end offset in the block))."""
OUTPUT_TAG = 0x6F7574707574
"""Tags a trace output key: hash((previous key, OUTPUT_TAG, request, end token))."""


def _check_length(content: Any, unit: int, length: int) -> None:
    if unit < 1:
        raise ValueError(f"unit must be >= 1, got {unit}")
    if not 0 <= length <= content.length:
        raise ValueError(f"length {length} is outside this content's 0..{content.length} tokens")


Parts = tuple[tuple[tuple[int, ...], int], ...]
"""A Segments content's parts: (segment identity, tokens) runs, in order."""

_NO_KEYS: dict[int, list[int]] = {}
"""The keys of a content that holds none (shared, never written: most of a long run's contents)."""


class Segments:
    """Content made of named token runs: `parts` is a tuple of (segment identity, length).

    Its keys are `keyhash.extend_keys`' chain: key i is hash((key i-1, pieces)), pieces the
    (identity, start, end) runs inside unit i, and key -1 is SEGMENTS_ROOT. `parent`, when
    given, must be a content whose parts begin ours (the previous turn of a session): its keys are
    reused instead of recomputed (a pure speed-up, the keys are the same either way).

    A finished request forgets its keys (`forget`), except those its next turn has not computed
    yet: they are handed on rather than hashed again from the conversation's start. `heir` says
    that a next turn will be built on this one, perhaps only after this one has finished (the
    workload stream builds a turn when it arrives): its keys are then kept for it from the start.
    """

    __slots__ = ("_tail", "length", "_parent", "_keys", "_heir", "_handed", "_done")

    def __init__(self, parts: Parts, parent: "Segments | None" = None,
                 heir: bool = False, *, after: bool = False):
        if parent is not None and not after:         # only the parts after the parent's are new
            before = parent.parts
            if parts[:len(before)] != before:
                raise ValueError("parent's parts must begin this content's parts")
            parts = parts[len(before):]
        self._init(_nonempty(parts), parent, heir)

    @staticmethod
    def after(parent: "Segments", parts: tuple, heir: bool = False) -> "Segments":
        """The content that is `parent`'s parts then `parts` (the next turn of a session)."""
        return Segments(parts, parent, heir, after=True)

    def _init(self, tail: Parts, parent: "Segments | None", heir: bool) -> None:
        # A turn holds only its own parts and its parent: a million turns, not a million copies of their
        # conversations.
        self._tail = tail
        length = parent.length if parent is not None else 0
        for _, n in tail:
            length += n
        self.length: int = length
        self._parent = parent
        self._keys: dict[int, list[int]] = _NO_KEYS
        # Whether a next turn builds on this one (a flag, not a reference to it: a cycle would outlive a run,
        # which pauses the collector), the units that next turn has built on, and whether this turn has finished.
        self._heir = heir
        self._handed: tuple[int, ...] = ()
        self._done = False
        if parent is not None:
            parent._heir = True

    @property
    def parts(self) -> Parts:
        """Every part, from the conversation's start."""
        return self._tail if self._parent is None else self._parent.parts + self._tail

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"Segments({self.parts!r})"

    def keys(self, unit: int, length: int) -> list[int]:
        _check_length(self, unit, length)
        keys = self._all_keys(unit)
        n = length // unit
        return keys if n == len(keys) else keys[:n]   # all of them: this content's own list (read, never change)

    def _all_keys(self, unit: int) -> list[int]:
        done = self._keys.get(unit)
        if done is not None:
            return done
        chain: list[Segments] = []
        node: Segments | None = self                 # walk up to the nearest ancestor that has them
        while node is not None and unit not in node._keys:
            chain.append(node)
            node = node._parent
        parent = self._parent
        if node is None:
            keys = _opening_keys(chain[-1]._tail, unit)
        elif node is parent and node._done:          # the finished turn's keys, handed on as they are: not
            keys = node._keys.pop(unit)              # copied (touching every key object of the conversation)
        else:
            keys = list(node._keys[unit])
        for turn in reversed(chain):                 # only this content keeps them (see forget)
            extend_keys(turn.parts, turn.length // unit, unit, keys, SEGMENTS_ROOT)
        if self._keys is _NO_KEYS:
            self._keys = {}
        self._keys[unit] = keys
        if parent is not None:
            if parent._done:                         # handed on: the finished turn needs them no more
                parent._keys.pop(unit, None)
            else:
                parent._handed += (unit,)
        return keys

    def forget(self) -> None:
        """Drop the cached keys (they are recomputed if asked for again): a finished request's
        keys would otherwise stay in memory for the rest of a long run. Keys the next turn has
        not yet built on are kept until it has."""
        self._done = True
        kept = {unit: keys for unit, keys in self._keys.items() if self._heir and unit not in self._handed}
        self._keys = kept or _NO_KEYS
        self._handed = ()


_SHARED_KEYS: dict[tuple[tuple[int, ...], int], list[int]] = {}
"""(identity, unit) -> the keys of the units inside a shared segment (a shared prefix, a warm-up
template) that begins a conversation. Every session that opens with it has the same ones (a
token depends only on its segment and offset), so they are hashed once per process, not once
per session: a third of a chat's keys."""


def _opening_keys(parts: Parts, unit: int) -> list[int]:
    """The keys of the units inside `parts`' first part, when it is a shared segment, as a new list; [] otherwise."""
    if not parts:
        return []
    ident, length = parts[0]
    if ident[0] != SHARED_PREFIX and ident[0] != TEMPLATE:
        return []
    n = length // unit
    known = _SHARED_KEYS.setdefault((ident, unit), [])
    if len(known) < n:
        extend_keys(((ident, length),), n, unit, known, SEGMENTS_ROOT)
    return known[:n]


def _nonempty(parts) -> Parts:
    """The parts with tokens, each an (identity, int length) pair (the pair given, when it already is one;
    the tuple given, when every part already is one)."""
    if type(parts) is tuple and all(type(p[1]) is int and p[1] > 0 for p in parts):
        return parts
    return tuple(p if type(p[1]) is int else (p[0], int(p[1])) for p in parts if p[1] > 0)


class TraceBlocks:
    """Content of one Mooncake trace request: `hash_ids` name its `block_size`-token blocks.

    A unit ending at token e <= input_length lies in block b = (e-1)//block_size and its key is
    hash((TRACE_TAG, hash_ids[b], e - b*block_size)): the hash ids are prefix-chained, so the id of
    the block holding a unit's last token names everything before it. Units ending after the input
    (generated tokens) chain on the previous key and `request` (the request's line index in the
    trace): hash((prev, OUTPUT_TAG, request, e)), so outputs are never shared between requests.
    """

    __slots__ = ("hash_ids", "input_length", "length", "block_size", "request", "_keys")

    def __init__(self, hash_ids: list[int], input_length: int, output_length: int, block_size: int, request: int):
        if len(hash_ids) * block_size < input_length:
            raise ValueError(f"{len(hash_ids)} blocks of {block_size} tokens cannot hold {input_length} tokens")
        self.hash_ids = hash_ids
        self.input_length = input_length
        self.length = input_length + output_length
        self.block_size = block_size
        self.request = request
        self._keys: dict[int, list[int]] | None = None

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"TraceBlocks(request={self.request}, input={self.input_length}, blocks={len(self.hash_ids)})"

    def keys(self, unit: int, length: int) -> list[int]:
        _check_length(self, unit, length)
        if self._keys is None:
            self._keys = {}
        done = self._keys.get(unit)
        if done is None:
            done = self._keys[unit] = self._compute(unit)
        return done[: length // unit]

    def forget(self) -> None:
        """Drop the cached keys (recomputed if asked for again)."""
        self._keys = None

    def _compute(self, unit: int) -> list[int]:
        return trace_keys(self.hash_ids, self.input_length, self.length, unit, self.block_size, self.request,
                          TRACE_TAG, OUTPUT_TAG)
