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
Which runs those are, WARMUP_SALT and the rule that makes a run's token ids (`run_tokens`) live in
kvplan.warmup, which the simulator, the deployment and this module share.
"""

from __future__ import annotations

from ..sim.workload import OUTPUT, TRACE_TAG, Segments, TraceBlocks
from ..warmup import FIRST_ORDINARY_TOKEN, WARMUP_SALT, run_tokens, warmed

__all__ = ["FIRST_ORDINARY_TOKEN", "WARMUP_SALT", "output_identity", "prompt_tokens", "run_tokens", "warmed"]


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
