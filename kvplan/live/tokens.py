"""Token ids for a workload's requests, so that the real stack sees exactly the reuse the simulator sees.

The simulator never materialises tokens: a request's `content` names runs of tokens (a shared
prefix, a user's text, a trace block) and two requests share a cache key exactly when their
leading tokens are the same run. The load generator turns those names into token ids with one
rule: the token at offset j of a run named `ident` is a fixed function of (salt, ident, j). Two
prompts that the simulator says agree up to token t therefore agree token for token up to t in
the real stack, and vLLM's block hashes and LMCache's chunk hashes match or differ exactly where
the simulator's keys do.

Generated tokens are the exception: the real model chooses them. A later chat turn's prompt
carries the earlier turn's *real* output (as a chat client would), passed in as `outputs`, so
that the real turn re-reads exactly the tokens vLLM cached.

The `salt` separates bench runs: a run with a new salt shares no token run with any earlier
run, so caches that survive between runs (LMCache's disk and Ceph tiers) start cold for it, as
the simulator's caches do. The same salt gives the same token ids.

Warmed content is the exception to the exception: the runs that `lmcache.warmup` prefills (the
first `system_prompts` shared prefixes and the templates) belong to the deployment, not to one
run. They take WARMUP_SALT in every run and in the deploy's warm-up play, so a bench run finds
them where the deploy left them, as the simulator, which prefills them before any traffic, does.
"""

from __future__ import annotations

import numpy as np

from ..sim.workload import OUTPUT, SHARED_PREFIX, TEMPLATE, TRACE_TAG, Segments, TraceBlocks

FIRST_ORDINARY_TOKEN = 4
"""Token ids below this are the tiny model's special tokens (<unk>, <s>, </s>, <pad>); a prompt never uses them."""

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)

WARMUP_SALT = 0x6B76706C616E5741
"""The salt of warmed content (lmcache.warmup), the same in the deploy's warm-up and in every bench run."""


def warmed(resolved) -> frozenset[tuple[int, ...]]:
    """The content runs `resolved`'s lmcache.warmup prefills: (SHARED_PREFIX, i) for the first system_prompts
    prefixes, (TEMPLATE, i) for each template."""
    lm = resolved.lmcache
    if lm is None:
        return frozenset()
    return frozenset([(SHARED_PREFIX, i) for i in range(lm.warmup_system_prompts)]
                     + [(TEMPLATE, i) for i in range(len(lm.warmup_template_tokens))])


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection on uint64 that scatters nearby inputs."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _seed(salt: int, ident: tuple[int, ...]) -> np.uint64:
    """One uint64 naming the run `ident` under `salt` (stable across processes and Python versions)."""
    with np.errstate(over="ignore"):
        h = _mix(np.array([salt & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
        for part in ident:
            h = _mix(h ^ np.array([part & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    return h[0]


def run_tokens(salt: int, ident: tuple[int, ...], start: int, end: int, vocab: int) -> list[int]:
    """Tokens [start, end) of the run named `ident`: ids in FIRST_ORDINARY_TOKEN..vocab-1."""
    if vocab <= FIRST_ORDINARY_TOKEN:
        raise ValueError(f"vocab {vocab} leaves no ordinary token ids")
    offsets = np.arange(start, end, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = _mix((offsets * np.uint64(0x9E3779B97F4A7C15)) ^ _seed(salt, ident))
    return (mixed % np.uint64(vocab - FIRST_ORDINARY_TOKEN) + np.uint64(FIRST_ORDINARY_TOKEN)).astype(np.int64).tolist()


def prompt_tokens(content, prompt_length: int, vocab: int, salt: int,
                  outputs: dict[tuple[int, ...], list[int]] | None = None,
                  warm: frozenset[tuple[int, ...]] = frozenset()) -> list[int]:
    """The first `prompt_length` token ids of `content` (a Segments or TraceBlocks).

    `outputs` maps an OUTPUT segment's identity to the tokens the model really generated for it;
    an OUTPUT segment inside the prompt that is missing there raises KeyError (its turn has not
    finished, or failed). Runs named in `warm` (`warmed()`) take WARMUP_SALT instead of `salt`."""
    if isinstance(content, TraceBlocks):
        tokens: list[int] = []
        for h in content.hash_ids:
            take = min(content.block_size, prompt_length - len(tokens))
            if take <= 0:
                break
            tokens += run_tokens(salt, (TRACE_TAG, h), 0, take, vocab)
        return tokens
    if not isinstance(content, Segments):
        raise TypeError(f"cannot materialise {type(content).__name__}")
    tokens = []
    for ident, length in content.parts:
        take = min(length, prompt_length - len(tokens))
        if take <= 0:
            break
        if ident[0] == OUTPUT:
            real = (outputs or {})[ident]
            if len(real) < take:
                raise ValueError(f"output {ident} has {len(real)} real tokens, the prompt needs {take}")
            tokens += real[:take]
        else:
            tokens += run_tokens(WARMUP_SALT if ident in warm else salt, ident, 0, take, vocab)
    return tokens


def output_identity(content, prompt_length: int) -> tuple[int, ...] | None:
    """The identity of the OUTPUT segment right after the prompt (a synthetic turn's own reply), or None."""
    if not isinstance(content, Segments):
        return None
    seen = 0
    for ident, length in content.parts:
        if seen >= prompt_length:
            return ident if ident[0] == OUTPUT else None
        seen += length
    return None
