"""The warm-up prefills (lmcache.warmup): which runs of tokens they are, how long, and their token ids.

lmcache.warmup prefills the `system_prompts` most popular shared prefixes and each template through
every vLLM instance before any traffic. Three parts of kvplan send or model them, and they must agree
token for token:

- the simulator prefills them before its requests (kvplan.sim.workload.warmup makes `prompts` requests);
- the deployment's warm-up play sends them as token ids (kvplan.deploy.stack: `prompts`, `token_ids`);
- kvplan bench sends the same ids in every run (kvplan.live: the `warmed` runs take WARMUP_SALT, in its
  warm-up and inside every prompt that starts with one), so a run finds them where the deploy left them.

All three read this module, which sits in the spine, below them, because none may import another for it
(the deployment neither the simulator nor the load generator). What it needs lies here or lower too: the
two kinds of run it prefills (SHARED_PREFIX and TEMPLATE, by which kvplan.sim.content names content), the
rule that makes a named run into token ids (`run_tokens`, which kvplan bench uses for every prompt), and the
shared prefixes' lengths, a synthetic workload's first draws (kvplan.spec.workload.prefix_lengths).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .spec.workload import generator, prefix_lengths

if TYPE_CHECKING:
    from .resolve import Resolved

# Kinds of content run (the first int of a run's identity) that the warm-up prefills; kvplan.sim.content
# names the others (3 and up). Keep them positive: CPython hashes -1 and -2 to the same value.
SHARED_PREFIX = 1
"""A shared prefix: (SHARED_PREFIX, index); index 0 is the most popular (system prompt, repository, document)."""
TEMPLATE = 2
"""A warm-up template: (TEMPLATE, i) for lmcache.warmup.templates[i]."""

WARMUP_SALT = 0x6B76706C616E5741
"""The salt of warmed content (lmcache.warmup), the same in the deploy's warm-up and in every bench run."""

FIRST_ORDINARY_TOKEN = 4
"""Token ids below this are the tiny model's special tokens (<unk>, <s>, </s>, <pad>); a prompt never uses them."""


class WarmPrompt(NamedTuple):
    """One warm-up prefill."""

    name: str
    """What the deploy's warm-up play calls it: `system prompt i`, or the template's name."""
    ident: tuple[int, int]
    """The run of tokens it is: (SHARED_PREFIX, i) or (TEMPLATE, i)."""
    tokens: int
    """Its length in tokens, cut to max_model_len."""


def prompts(resolved: Resolved, seed: int | None = None) -> list[WarmPrompt]:
    """The warm-up prefills, in order: the `warmup_system_prompts` most popular shared prefixes (indices 0..,
    the same runs the workload's requests start with, so they hit; none when the workload has no shared
    prefixes), then each template (a run no request shares). A prompt longer than max_model_len is cut to it.
    Empty when lmcache or warm-up is off. `seed` must be the one the workload's requests are drawn with
    (the prefix lengths are its first draws); None is workload.seed."""
    lm = resolved.lmcache
    if lm is None:
        return []
    w, limit = resolved.workload, resolved.max_model_len
    out: list[WarmPrompt] = []
    if lm.warmup_system_prompts and w.shared_prefixes is not None:
        lengths = prefix_lengths(w, generator(w.seed if seed is None else seed))
        for i in range(min(lm.warmup_system_prompts, len(lengths))):
            out.append(WarmPrompt(f"system prompt {i}", (SHARED_PREFIX, i), min(int(lengths[i]), limit)))
    for i, (name, tokens) in enumerate(zip(lm.warmup_template_names, lm.warmup_template_tokens, strict=True)):
        out.append(WarmPrompt(name, (TEMPLATE, i), min(tokens, limit)))
    return out


def warmed(resolved: Resolved) -> frozenset[tuple[int, ...]]:
    """The runs `resolved`'s lmcache.warmup prefills (for any seed): (SHARED_PREFIX, i) for the first
    system_prompts prefixes, (TEMPLATE, i) for each template."""
    lm = resolved.lmcache
    if lm is None:
        return frozenset()
    return frozenset([(SHARED_PREFIX, i) for i in range(lm.warmup_system_prompts)]
                     + [(TEMPLATE, i) for i in range(len(lm.warmup_template_tokens))])


def token_ids(prompt: WarmPrompt, vocab: int) -> list[int]:
    """The token ids of a warm-up prefill, as the deploy's play and every bench run send them."""
    return run_tokens(WARMUP_SALT, prompt.ident, 0, prompt.tokens, vocab)


# --------------------------------------------------------------------------- token ids of a named run

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
    """Tokens [start, end) of the run named `ident`: ids in FIRST_ORDINARY_TOKEN..vocab-1, a fixed function of
    (salt, ident, offset), so two prompts agree token for token exactly where they share a run."""
    if vocab <= FIRST_ORDINARY_TOKEN:
        raise ValueError(f"vocab {vocab} leaves no ordinary token ids")
    offsets = np.arange(start, end, dtype=np.uint64)
    with np.errstate(over="ignore"):
        mixed = _mix((offsets * np.uint64(0x9E3779B97F4A7C15)) ^ _seed(salt, ident))
    return (mixed % np.uint64(vocab - FIRST_ORDINARY_TOKEN) + np.uint64(FIRST_ORDINARY_TOKEN)).astype(np.int64).tolist()
