"""kvplan.live.tokens: the simulator's named token runs turned into token ids.

tokens.py turns the simulator's named token runs into token ids such that two prompts agree on
their first (i + 1) x unit tokens exactly when the simulator says they share cache key i, so
the real stack's block and chunk hashes hit exactly where the simulator's keys do.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from kvplan.live.tokens import FIRST_ORDINARY_TOKEN, output_identity, prompt_tokens, run_tokens
from kvplan.sim.workload import OUTPUT, Segments, TraceBlocks, requests

from live_fakes import SALT, common_prefix, local


def fake_outputs(reqs) -> dict[tuple[int, ...], list[int]]:
    """A stand-in for the model's real replies: distinct token ids for every OUTPUT segment of `reqs`."""
    outputs = {}
    for r in reqs:
        for ident, length in r.content.parts:
            if ident[0] == OUTPUT:
                outputs[ident] = run_tokens(999_999, ident, 0, length, 8000)
    return outputs


def test_a_run_is_a_fixed_function_of_salt_and_identity():
    """The same salt replays the same tokens (a rerun with --salt hits the caches); another salt shares nothing."""
    a = run_tokens(7, (3, 41), 0, 200, 8000)
    assert a == run_tokens(7, (3, 41), 0, 200, 8000)
    other_salt = run_tokens(8, (3, 41), 0, 200, 8000)
    other_run = run_tokens(7, (3, 42), 0, 200, 8000)
    assert common_prefix(a, other_salt) == 0 and sum(x == y for x, y in zip(a, other_salt)) < 10
    assert common_prefix(a, other_run) == 0 and sum(x == y for x, y in zip(a, other_run)) < 10


def test_token_ids_are_ordinary_tokens_of_the_vocabulary():
    """Ids below FIRST_ORDINARY_TOKEN are the model's special tokens (<s>, </s>, ...): a prompt never contains one."""
    for vocab in (5, 6, 100, 8000, 128_256):
        ids = run_tokens(1, (1, 0), 0, 5000, vocab)
        assert min(ids) >= FIRST_ORDINARY_TOKEN and max(ids) < vocab
        assert all(type(i) is int for i in ids)
    assert len(set(run_tokens(1, (1, 0), 0, 5000, 8000))) > 3000     # spread over the vocabulary
    with pytest.raises(ValueError, match="no ordinary token"):
        run_tokens(1, (1, 0), 0, 10, FIRST_ORDINARY_TOKEN)


def test_a_shorter_piece_of_a_run_is_a_prefix_of_a_longer_one():
    """A prompt that stops inside a segment (a cut warm-up prefix, a shortened turn) still matches its start."""
    whole = run_tokens(5, (1, 2), 0, 1000, 8000)
    for m in (0, 1, 15, 16, 17, 500, 999):
        assert whole[:m] == run_tokens(5, (1, 2), 0, m, 8000)
    assert whole[300:700] == run_tokens(5, (1, 2), 300, 700, 8000)


CHAT_KEYS = {
    "kind": "chat", "seed": 11, "requests": 140,
    "arrivals": {"process": "poisson", "session_rate": "5/s"},
    "sessions": {"turns": {"dist": "uniform", "min": 1, "max": 5}, "think_time": "3s"},
    "shared_prefixes": {"count": 4, "skew": 1.0, "tokens": {"dist": "lognormal", "mean": 300, "cv": 0.5, "max": 900}},
    "prompt": {"dist": "lognormal", "mean": 60, "cv": 0.8, "max": 400},
    "output": {"dist": "lognormal", "mean": 40, "cv": 0.5, "max": 200},
}
RAG_KEYS = {
    "kind": "rag", "seed": 5, "requests": 100,
    "arrivals": {"process": "poisson", "session_rate": "5/s"},
    "sessions": {"turns": {"dist": "uniform", "min": 1, "max": 3}, "think_time": "2s"},
    "shared_prefixes": {"count": 6, "skew": 0.8, "tokens": {"dist": "uniform", "min": 200, "max": 900}},
    "prompt": {"dist": "uniform", "min": 10, "max": 80},
    "output": 20,
}


SHARED_PREFIX_KEYS = {
    "kind": "shared_prefix", "seed": 2, "requests": 60, "arrivals": {"rate": "5/s"},
    "shared_prefix": {"num_groups": 4, "num_prompts_per_group": 5, "system_prompt_len": {"dist": "uniform", "min": 250,
                      "max": 700}, "question_len": {"dist": "uniform", "min": 20, "max": 300}, "output_len": 20},
}
REPLAY_KEYS = {"kind": "replay", "replay": {"path": str(Path(__file__).parent / "fixtures" / "workload" /
                                                     "tiny_replay.jsonl")}}


@pytest.mark.parametrize("workload, pairs", [(CHAT_KEYS, (200, 50)), (RAG_KEYS, (200, 50)),
                                             (SHARED_PREFIX_KEYS, (400, 200)), (REPLAY_KEYS, (10, 4))],
                         ids=["chat", "rag", "shared_prefix", "replay"])
def test_prompts_agree_token_for_token_exactly_where_the_simulator_keys_agree(workload, pairs):
    """The claim the bench rests on: for every pair of requests of a real workload and unit in (vLLM-ish 16,
    LMCache's 256), the materialised prompts agree on their first (i+1)*unit tokens iff keys(unit)[i] agree.
    Generated tokens come from `outputs` (here fake replies keyed by OUTPUT identity). `pairs`: how many pairs at
    least share a first key, and how many share some keys but not all (so the claim is not vacuous)."""
    r = local(workload)
    reqs = requests(r)
    outputs = fake_outputs(reqs)
    prompts = [prompt_tokens(q.content, q.prompt_tokens, r.model.vocab_size, SALT, outputs) for q in reqs]
    assert [len(p) for p in prompts] == [q.prompt_tokens for q in reqs]
    shared_pairs = partial_pairs = 0
    for unit in (16, 256):
        keys = [q.content.keys(unit, q.prompt_tokens) for q in reqs]
        for a, b in itertools.combinations(range(len(reqs)), 2):
            n = min(len(keys[a]), len(keys[b]))
            if n == 0:
                continue
            same_tokens = common_prefix(prompts[a], prompts[b])
            by_keys = [keys[a][i] == keys[b][i] for i in range(n)]
            by_tokens = [(i + 1) * unit <= same_tokens for i in range(n)]
            assert by_keys == by_tokens, (unit, reqs[a], reqs[b])
            shared_pairs += by_keys[0]
            partial_pairs += by_keys[0] and not by_keys[-1]
    # not vacuous: many pairs share a prefix, and many share only part of it
    assert shared_pairs > pairs[0] and partial_pairs > pairs[1], (shared_pairs, partial_pairs)


def test_a_later_chat_turn_carries_the_earlier_turns_real_reply():
    """Turn k+1's prompt is turn k's prompt, then the tokens the model really generated for turn k
    (output_identity names them), then new text."""
    r = local(CHAT_KEYS)
    reqs = requests(r)
    outputs = fake_outputs(reqs)                                           # replies of the turns before
    by_session: dict[int, list] = {}
    for q in reqs:
        by_session.setdefault(q.session, []).append(q)
    pairs = [(t[k], t[k + 1]) for t in by_session.values() for k in range(len(t) - 1)]
    assert len(pairs) > 20
    for earlier, later in pairs:
        ident = output_identity(earlier.content, earlier.prompt_tokens)
        assert ident is not None and ident[0] == OUTPUT
        reply = [7000 + i for i in range(earlier.output_tokens)]       # whatever the model said
        first = prompt_tokens(earlier.content, earlier.prompt_tokens, 8000, SALT, outputs)
        second = prompt_tokens(later.content, later.prompt_tokens, 8000, SALT, {**outputs, ident: reply})
        assert second[:len(first) + len(reply)] == first + reply
        assert len(second) > len(first) + len(reply)


def test_a_prompt_whose_earlier_reply_is_unknown_cannot_be_built():
    """A later turn needs its earlier turn's reply: without it (turn not finished, or failed) KeyError;
    with a reply shorter than the turn's output, ValueError naming both lengths."""
    reqs = requests(local(CHAT_KEYS))
    later = next(q for q in reqs if q.turn == 1)
    with pytest.raises(KeyError):
        prompt_tokens(later.content, later.prompt_tokens, 8000, SALT)
    ident = next(i for i, _ in later.content.parts if i[0] == OUTPUT)
    with pytest.raises(ValueError, match="has 1 real tokens"):
        prompt_tokens(later.content, later.prompt_tokens, 8000, SALT, {ident: [42]})
    first = next(q for q in reqs if q.turn == 0)
    assert prompt_tokens(first.content, first.prompt_tokens, 8000, SALT) is not None     # a first turn needs none


def test_output_identity_is_none_for_contents_without_a_reply_segment():
    assert output_identity(Segments(((((1, 0)), 50),)), 50) is None
    assert output_identity(TraceBlocks([1, 2], 20, 5, 16, 0), 20) is None
    assert output_identity(Segments((((3, 0), 10), ((4, 9), 5))), 10) == (4, 9)


def test_trace_blocks_with_the_same_hash_id_materialise_to_the_same_tokens():
    """Mooncake hash ids are prefix-chained names of blocks: equal ids, equal tokens; the prompt stops at
    input_length even inside a block; the keys claim holds for units that do not divide the block too."""
    a = TraceBlocks([10, 11, 12], 40, 5, 16, 0)
    b = TraceBlocks([10, 11, 99, 100], 60, 5, 16, 1)
    c = TraceBlocks([10, 11, 12], 48, 5, 16, 2)          # a's blocks, its last one full
    ta, tb, tc = (prompt_tokens(x, x.input_length, 8000, SALT) for x in (a, b, c))
    assert (len(ta), len(tb), len(tc)) == (40, 60, 48)
    assert ta[:32] == tb[:32] and ta[32] != tb[32]
    assert tc[:40] == ta
    assert prompt_tokens(a, 20, 8000, SALT) == ta[:20]
    assert prompt_tokens(a, 40, 8000, SALT + 1)[:32] != ta[:32]
    for unit in (5, 8, 16, 32):
        for x, y, tx, ty in ((a, b, ta, tb), (a, c, ta, tc), (b, c, tb, tc)):
            kx, ky = x.keys(unit, x.input_length), y.keys(unit, y.input_length)
            same = common_prefix(tx, ty)
            n = min(len(kx), len(ky))
            assert [kx[i] == ky[i] for i in range(n)] == [(i + 1) * unit <= same for i in range(n)], (unit, x, y)


def test_only_segments_and_trace_blocks_can_be_materialised():
    with pytest.raises(TypeError, match="cannot materialise list"):
        prompt_tokens([1, 2, 3], 3, 8000, SALT)
