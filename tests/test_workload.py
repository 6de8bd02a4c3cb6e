"""The workload: which requests arrive when, and what their contents share.

A request's content answers `keys(unit, length)`: prefix-chained keys of its full `unit`-token
pieces. vLLM asks with its block size, LMCache with its chunk size; two requests share key i
exactly when their first (i + 1) x unit tokens are the same, so the simulator's cache hits are
exact. These tests pin down that mapping for Mooncake traces and for the synthetic kinds.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.sim.workload import (SHARED_PREFIX, Content, Request, RequestList, Segments, TraceBlocks, draw,
                                 read_trace, requests, stream, warmup)
from kvplan.spec import from_mapping
from kvplan.spec.workload import Dist

from conftest import REPO, source_module, spec

FIXTURES = Path(__file__).parent / "fixtures" / "workload"
TINY = FIXTURES / "tiny_trace.jsonl"
SLICE = Path(__file__).parent / "fixtures" / "mooncake_conversation_head2000.jsonl"


def setup(workload: dict, max_model_len: int | None = None, warmup: dict | None = None, lmcache: bool = True):
    """Resolve a small spec: Llama-3.1-8B on one H100, an MP LMCache with a DDR tier, this workload."""
    data = {"name": "wl", "model": "Llama-3.1-8B", "serving": {"gpu": "H100-SXM"}, "workload": workload}
    if max_model_len:
        data["serving"]["max_model_len"] = max_model_len
    if lmcache:
        data["lmcache"] = {"mode": "mp", "ddr": {"size": "64GiB"}}
        if warmup:
            data["lmcache"]["warmup"] = warmup
    return resolve(from_mapping(data))


def shared(a: list[int], b: list[int]) -> int:
    """How many leading keys two key lists have in common."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def everything(r: Request, unit: int = 256) -> list[int]:
    """Keys of a request's whole content: prompt and output."""
    return r.content.keys(unit, r.prompt_tokens + r.output_tokens)


def prompt(r: Request, unit: int = 256) -> list[int]:
    return r.content.keys(unit, r.prompt_tokens)


CHAT = {
    "kind": "chat", "seed": 3, "requests": 3000,
    "arrivals": {"process": "poisson", "session_rate": "20/s"},
    "sessions": {"turns": {"dist": "uniform", "min": 1, "max": 6}, "think_time": "10s"},
    "shared_prefixes": {"count": 10, "skew": 1.0, "tokens": {"dist": "lognormal", "mean": 700, "cv": 0.3, "max": 2000}},
    "prompt": {"dist": "lognormal", "mean": 150, "cv": 0.8, "max": 2000},
    "output": {"dist": "lognormal", "mean": 250, "cv": 0.5, "max": 1000},
}


# ------------------------------------------------------------------ Mooncake traces

@pytest.fixture(scope="module")
def tiny():
    return read_trace(str(TINY))


def test_a_trace_line_is_a_request_in_arrival_order(tiny):
    assert [r.id for r in tiny] == [0, 1, 2, 3, 4]
    assert [r.arrival for r in tiny] == [0.0, 0.5, 1.0, 1.5, 2.0]            # timestamps are milliseconds
    assert [(r.prompt_tokens, r.output_tokens) for r in tiny][:2] == [(1024, 300), (1300, 20)]
    assert all(isinstance(r.content, Content) and r.session == -1 and not r.warmup for r in tiny)


def test_every_full_chunk_of_the_prompt_has_a_key_and_a_partial_tail_has_none(tiny):
    for r in tiny:
        assert len(prompt(r)) == r.prompt_tokens // 256
    request_1 = tiny[1]                                   # 1300 tokens: 5 chunks and a 20-token tail
    assert request_1.content.keys(256, 1300) == request_1.content.keys(256, 1280)


def test_a_shared_512_token_block_is_exactly_two_shared_256_token_chunks(tiny):
    r0, r1, r2, r3 = tiny[0], tiny[1], tiny[2], tiny[3]
    assert shared(prompt(r0), prompt(r1)) == 2            # hash_ids [1, 2] vs [1, 3, 4]
    assert shared(prompt(r0), prompt(r3)) == 4            # [1, 2] vs [1, 2, 7]
    assert shared(prompt(r0), prompt(r2)) == 0            # nothing in common


def test_a_chunk_that_does_not_divide_the_block_works_too(tiny):
    r0, r1, r3 = tiny[0], tiny[1], tiny[3]
    # 384-token chunks: the first ends inside block 0, the second inside block 1, the third in block 2.
    assert shared(prompt(r0, 384), prompt(r1, 384)) == 1  # 512 shared tokens hold one 384 chunk
    assert shared(prompt(r0, 384), prompt(r3, 384)) == 2  # 1024 shared tokens hold two
    assert len(prompt(r1, 384)) == 1300 // 384


@pytest.mark.parametrize("unit", [16, 64, 128, 256, 384, 512, 1000])
def test_every_unit_sees_the_same_shared_tokens(tiny, unit):
    """vLLM's 16-token blocks and LMCache's chunks agree on what is shared: whole shared blocks."""
    shared_tokens = {(0, 1): 512, (0, 3): 1024, (0, 2): 0, (1, 3): 512, (0, 4): 1024}
    for (a, b), tokens in shared_tokens.items():
        assert shared(prompt(tiny[a], unit), prompt(tiny[b], unit)) == tokens // unit


def test_identical_prompts_share_their_prompt_but_never_their_output(tiny):
    r0, r4 = tiny[0], tiny[4]                             # same hash_ids, same input_length
    assert prompt(r0) == prompt(r4)
    assert len(everything(r0)) == (1024 + 300) // 256 == 5
    assert everything(r0)[:4] == everything(r4)[:4]
    assert everything(r0)[4] != everything(r4)[4]         # the fifth chunk holds generated tokens


def test_a_request_needs_enough_blocks_for_its_input():
    assert len(TraceBlocks([4, 8], 1024, 0, 512, request=0).keys(256, 1024)) == 4
    with pytest.raises(ValueError):
        TraceBlocks([4, 8], 1100, 0, 512, request=0)      # two 512-token blocks hold 1024 tokens


def test_keys_are_a_prefix_of_the_longer_keys(tiny):
    r = tiny[1]
    assert r.content.keys(256, 700) == everything(r)[:2]
    assert r.content.keys(256, 0) == []
    with pytest.raises(ValueError):
        r.content.keys(256, r.prompt_tokens + r.output_tokens + 1)


def test_one_trace_block_is_one_key_at_the_block_size():
    """On the shipped Mooncake slice, 512-token keys are the full blocks' hash_ids, one for one."""
    trace = read_trace(str(REPO / "examples/traces/mooncake-conversation-first1000.jsonl"))
    keys = {k for r in trace for k in prompt(r, 512)}
    blocks = {h for r in trace for h in r.content.hash_ids[: r.prompt_tokens // 512]}
    assert len(trace) == 1000
    assert len(keys) == len(blocks)


def test_time_scale_and_limit():
    fast = read_trace(str(TINY), time_scale=0.5)
    assert [r.arrival for r in fast] == [0.0, 0.25, 0.5, 0.75, 1.0]
    first2 = read_trace(str(TINY), limit=2)
    assert [(r.id, r.prompt_tokens) for r in first2] == [(0, 1024), (1, 1300)]


def test_a_trace_workload_drops_requests_longer_than_max_model_len_and_counts_them():
    r = setup({"kind": "trace", "trace": {"path": str(TINY)}}, max_model_len=1300)
    reqs = requests(r)
    # request 1 (1300 + 20) and request 0 and 4 (1024 + 300 = 1324) do not fit in 1300 tokens
    assert isinstance(reqs, RequestList)
    assert [x.prompt_tokens for x in reqs] == [600, 1200]
    assert reqs.rejected == 3
    assert [x.id for x in reqs] == [0, 1]                 # ids stay 0..n-1 in arrival order
    assert all(x.prompt_tokens + x.output_tokens <= 1300 for x in reqs)


def test_the_mooncake_example_replays_its_1000_requests():
    reqs = requests(resolve(spec("mooncake-replay")))
    assert len(reqs) + reqs.rejected == 1000
    assert all(a.arrival <= b.arrival for a, b in zip(reqs, reqs[1:]))


def test_a_real_trace_slice_loads_whole():
    """The 2,000-line slice of the Mooncake conversation trace in tests/fixtures (speed is the
    benchmarks' business: benchmarks/cache_replay.py reads the whole trace)."""
    trace = read_trace(str(SLICE))
    last = json.loads(SLICE.read_text().splitlines()[-1])
    assert len(trace) == 2000
    assert trace[-1].arrival == pytest.approx(last["timestamp"] / 1000)


# ------------------------------------------------------------------ bad traces

def write(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


GOOD = '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [0]}'


@pytest.mark.parametrize("line, says", [
    ('{"timestamp": 0, "input_length": 100', "not JSON"),
    ('{"timestamp": 0, "input_length": 100, "output_length": 10}', "missing field hash_ids"),
    ('{"timestamp": 0, "input_length": "100", "output_length": 10, "hash_ids": [0]}', "input_length must be an integer"),
    ('{"timestamp": 1.5, "input_length": 100, "output_length": 10, "hash_ids": [0]}', "timestamp must be an integer"),
    ('{"timestamp": 0, "input_length": 100, "output_length": true, "hash_ids": [0]}', "output_length must be an integer"),
    ('{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": ["a"]}', "hash_ids must be a list"),
    ('{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0]}', "need 2"),
    ('[1, 2, 3]', "expected a JSON object"),
])
def test_a_bad_line_is_a_spec_error_naming_file_and_line(tmp_path, line, says):
    path = write(tmp_path, GOOD, line, GOOD)
    with pytest.raises(SpecError) as err:
        read_trace(path)
    [problem] = err.value.problems
    assert problem.path == f"{path}:2"
    assert says in problem.message
    assert problem.fix


def test_hash_ids_must_be_prefix_chained(tmp_path):
    """An id names its block and every block before it: the same id after a different one is refused, as is
    an id that starts one request and follows another id in the next. Sharing a prefix is what ids are for."""
    line = '{{"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": {}}}'.format
    read_trace(write(tmp_path, line([1, 2, 3]), line([1, 2, 4]), line([1, 5, 6])))
    for second, says in (([1, 9, 3], "hash id 3 follows 9 here but follows 2"),
                         ([2, 7, 8], "hash id 2 starts the request here but follows 1"),
                         ([7, 1, 8], "hash id 1 follows 7 here but starts a request")):
        with pytest.raises(SpecError) as err:
            read_trace(write(tmp_path, line([1, 2, 3]), line(second)))
        [problem] = err.value.problems
        assert problem.path.endswith(":2") and says in problem.message and "prefix-chained" in problem.message
        assert problem.fix


def test_every_bad_line_is_reported_at_once_up_to_ten(tmp_path):
    path = write(tmp_path, GOOD, "oops", GOOD, "{}", *["nope"] * 20)
    with pytest.raises(SpecError) as err:
        read_trace(path, limit=1)                         # the whole file is checked, even past the limit
    problems = err.value.problems
    assert [p.path for p in problems[:2]] == [f"{path}:2", f"{path}:4"]
    assert len(problems) == 11 and "12 more bad lines" in problems[-1].message


def test_a_missing_or_empty_trace_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="not found"):
        read_trace(str(tmp_path / "nope.jsonl"))
    with pytest.raises(SpecError, match="no requests"):
        read_trace(write(tmp_path, "", "  "))


# ------------------------------------------------------------------ determinism

def fingerprint(reqs) -> list:
    return [(r.id, r.arrival, r.prompt_tokens, r.output_tokens, r.session, r.turn, tuple(everything(r, 64)))
            for r in reqs]


def test_the_same_seed_gives_the_same_workload_and_another_seed_another():
    r = setup(CHAT)
    first = fingerprint(requests(r))
    assert fingerprint(requests(r)) == first
    assert fingerprint(requests(r, seed=3)) == first      # the spec's seed is 3
    assert fingerprint(requests(r, seed=4)) != first


def test_more_requests_extend_the_same_stream():
    short = fingerprint(requests(setup(CHAT | {"requests": 500})))
    long = fingerprint(requests(setup(CHAT | {"requests": 1000})))
    assert long[:500] == short


KEYS_SCRIPT = """
from kvplan.sim.workload import Segments, TraceBlocks
s = Segments((((1, 0), 700), ((3, 5), 300), ((4, 5), 100)))
t = TraceBlocks([4, 8, 15], 1300, 300, 512, 7)
print(s.keys(16, 1100)[-3:], t.keys(256, 1600))
"""


def test_keys_do_not_depend_on_pythonhashseed():
    outputs = {subprocess.run([sys.executable, "-c", KEYS_SCRIPT], capture_output=True, text=True, check=True, cwd=REPO,
                              env=os.environ | {"PYTHONHASHSEED": seed}).stdout for seed in ("0", "1", "12345")}
    assert len(outputs) == 1


# ------------------------------------------------------------------ segments

def test_segments_share_exactly_the_units_whose_tokens_agree():
    system = ((SHARED_PREFIX, 0), 600)
    a = Segments((system, ((3, 1), 300)))
    b = Segments((system, ((3, 2), 300)))
    assert shared(a.keys(256, 900), b.keys(256, 900)) == 2          # 600 shared tokens: two 256 chunks
    assert shared(a.keys(16, 900), b.keys(16, 900)) == 600 // 16
    # the same user text, shorter: a prefix of the longer one
    c = Segments((system, ((3, 1), 100)))
    assert c.keys(16, 700) == a.keys(16, 700)


def test_a_parent_only_speeds_things_up():
    turn0 = Segments((((1, 0), 500), ((3, 0), 77), ((4, 0), 200)))
    parts = turn0.parts + (((3, 1), 90), ((4, 1), 300))
    with_parent, alone = Segments(parts, turn0), Segments(parts)
    for unit in (16, 256, 384):
        assert with_parent.keys(unit, len(alone)) == alone.keys(unit, len(alone))
    with pytest.raises(ValueError):
        Segments((((1, 1), 500),), turn0)                 # a parent must begin the content


def source_content():
    """kvplan/sim/content.py run from its source: the installed module is compiled (hatch_build.py), and a compiled
    module's calls to its own functions cannot be patched to watch them."""
    return source_module("kvplan/sim/content.py", "kvplan.sim.content_source")


def test_a_finished_turn_hands_its_keys_to_the_next_instead_of_rehashing_the_conversation(monkeypatch):
    content = source_content()
    Segments = content.Segments
    turn0 = Segments((((1, 0), 500), ((3, 0), 77), ((4, 0), 200)))
    turn1 = Segments(turn0.parts + (((3, 1), 90), ((4, 1), 300)), turn0)
    expected = Segments(turn1.parts).keys(16, len(turn1))
    turn0.keys(16, len(turn0))
    turn0.forget()                                  # finished before the next turn asked for its keys
    started_from = []
    extend = content.extend_keys
    monkeypatch.setattr(content, "extend_keys", lambda parts, n, unit, base, root: started_from.append(len(base))
                        or extend(parts, n, unit, base, root))
    assert turn1.keys(16, len(turn1)) == expected
    assert started_from == [len(turn0) // 16]       # only the new tokens were hashed
    assert turn0._keys == {}                        # and the finished turn keeps nothing once handed on


def test_the_next_turn_takes_over_the_finished_turns_keys_without_copying_them():
    """Copying a conversation's keys touches every key object of it, on every turn; a finished turn's list
    is extended instead. A turn still running keeps its own (the next one copies it)."""
    Segments = source_content().Segments
    turn0 = Segments((((1, 0), 500), ((3, 0), 77), ((4, 0), 200)))
    turn1 = Segments(turn0.parts + (((3, 1), 90), ((4, 1), 300)), turn0)
    turn2 = Segments(turn1.parts + (((3, 2), 60), ((4, 2), 100)), turn1)
    own = turn0.keys(16, len(turn0))                # all of a content's keys: its own list
    turn0.forget()
    assert turn1.keys(16, len(turn1)) is own
    assert turn2.keys(16, len(turn2)) is not own    # turn1 has not finished: it keeps its list
    assert turn1.keys(16, len(turn1)) is own and own == Segments(turn1.parts).keys(16, len(turn1))
    assert turn2.keys(16, len(turn2)) == Segments(turn2.parts).keys(16, len(turn2))


def test_a_turn_built_after_its_predecessor_finished_still_hashes_only_its_new_tokens(monkeypatch):
    """The workload stream builds a turn when it arrives, which may be after the previous turn has
    finished: that turn was built as an heir's parent (`heir=True`), so it kept its keys for it."""
    content = source_content()
    Segments = content.Segments

    turn0 = Segments((((1, 0), 500), ((3, 0), 77), ((4, 0), 200)), heir=True)
    turn0.keys(16, len(turn0))
    turn0.forget()                                  # finished: the next turn does not exist yet
    turn1 = Segments.after(turn0, (((3, 1), 90), ((4, 1), 300)))
    assert turn1.parts == turn0.parts + (((3, 1), 90), ((4, 1), 300))
    started_from = []
    extend = content.extend_keys
    monkeypatch.setattr(content, "extend_keys", lambda parts, n, unit, base, root: started_from.append(len(base))
                        or extend(parts, n, unit, base, root))
    assert turn1.keys(16, len(turn1)) == Segments(turn1.parts).keys(16, len(turn1))
    assert started_from[0] == len(turn0) // 16      # the new tokens only (the check above hashed all of them)
    assert turn0._keys == {}


def test_sessions_that_open_with_the_same_shared_prefix_hash_its_keys_once(monkeypatch):
    """Every session opening with a shared prefix has the same keys for the units inside it: the
    first one to need them hashes them, the others start after them."""
    content = source_content()
    Segments = content.Segments
    system = ((content.SHARED_PREFIX, 7), 500)
    first = Segments((system, ((content.USER_TEXT, 1), 90)))
    first_keys = first.keys(16, len(first))
    started_from = []
    extend = content.extend_keys
    monkeypatch.setattr(content, "extend_keys", lambda parts, n, unit, base, root: started_from.append(len(base))
                        or extend(parts, n, unit, base, root))
    second = Segments((system, ((content.USER_TEXT, 2), 90)))
    keys = second.keys(16, len(second))
    assert started_from == [500 // 16]              # only the tokens after the prefix's last full unit
    prev, inside = content.SEGMENTS_ROOT, []        # the documented chain, from the conversation's start
    for i in range(500 // 16):
        prev = hash((prev, (((content.SHARED_PREFIX, 7), 16 * i, 16 * i + 16),)))
        inside.append(prev)
    assert keys[:31] == first_keys[:31] == inside
    assert keys[31:] != first_keys[31:]             # the unit that crosses into the user's text differs
    Segments((((content.USER_TEXT, 3), 500),)).keys(16, 500)
    assert all(ident[0] == content.SHARED_PREFIX for ident, _ in content._SHARED_KEYS)   # unique text is not kept


# ------------------------------------------------------------------ chat

@pytest.fixture(scope="module")
def chat():
    return requests(setup(CHAT))


def test_requests_are_sorted_by_arrival_with_ids_in_that_order(chat):
    assert [r.id for r in chat] == list(range(len(chat)))
    assert all(a.arrival <= b.arrival for a, b in zip(chat, chat[1:]))
    assert len(chat) + chat.rejected == 3000


@pytest.mark.parametrize("unit", [16, 256, 384])
def test_each_turn_starts_with_the_whole_previous_turn(chat, unit):
    """History reuse is exact: turn k+1's prompt begins with every full unit of turn k's prompt and output."""
    sessions: dict[int, list[Request]] = {}
    for r in chat:
        sessions.setdefault(r.session, []).append(r)
    pairs = 0
    for turns in sessions.values():
        assert [r.turn for r in turns] == list(range(len(turns)))
        for before, after in zip(turns, turns[1:]):
            history = everything(before, unit)
            assert prompt(after, unit)[: len(history)] == history
            assert after.prompt_tokens > before.prompt_tokens + before.output_tokens
            pairs += 1
    assert pairs > 1000


def test_system_prompts_are_shared_across_sessions(chat):
    first_turns = [r for r in chat if r.turn == 0]
    by_prefix: dict[int, list[Request]] = {}
    for r in first_turns:
        by_prefix.setdefault(r.content.parts[0][0][1], []).append(r)
    assert len(by_prefix) == 10
    for index, group in by_prefix.items():
        a, b = group[0], group[-1]
        length = a.content.parts[0][1]
        assert shared(prompt(a, 16), prompt(b, 16)) >= length // 16
    other = next(g for i, g in by_prefix.items() if i != 0)[0]
    assert prompt(by_prefix[0][0], 16)[0] != prompt(other, 16)[0]


def prefix_counts(skew: float) -> Counter:
    reqs = requests(setup(CHAT | {"sessions": None, "requests": 4000, "arrivals": {"rate": "20/s"},
                                  "shared_prefixes": {"count": 10, "skew": skew, "tokens": 512}}))
    return Counter(r.content.parts[0][0][1] for r in reqs)


def test_zipf_skew_concentrates_traffic_on_the_top_prefix():
    flat, steep = prefix_counts(0.0), prefix_counts(2.0)
    # skew 0: each of 10 prefixes gets ~10 %; skew 2: rank 1 gets 1/sum(1/r^2, r=1..10) = 64.5 %
    assert 0.08 < flat[0] / 4000 < 0.12
    assert 0.60 < steep[0] / 4000 < 0.69
    assert steep.most_common(3) == sorted(steep.items(), key=lambda kv: -kv[1])[:3]
    assert [i for i, _ in steep.most_common(2)] == [0, 1]


def test_sessions_end_when_the_history_no_longer_fits():
    reqs = requests(resolve(spec("chat-llama2-13b")))     # Llama-2-13B: 4096 tokens
    assert reqs.sessions_ended_early > 0
    assert max(r.prompt_tokens + r.output_tokens for r in reqs) <= 4096


# ------------------------------------------------------------------ arrivals

def gaps(process: dict, n: int = 20000) -> np.ndarray:
    reqs = requests(setup({"kind": "rag", "requests": n, "arrivals": process, "prompt": 100, "output": 10}))
    return np.diff([0.0] + [r.arrival for r in reqs])


def test_poisson_arrivals_have_the_configured_rate():
    g = gaps({"process": "poisson", "rate": "100/s"})
    assert len(g) / g.sum() == pytest.approx(100, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.05)


def test_gamma_arrivals_have_the_configured_burstiness():
    g = gaps({"process": "gamma", "rate": "100/s", "cv": 2.0})
    assert len(g) / g.sum() == pytest.approx(100, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.1)


def test_constant_arrivals_are_evenly_spaced():
    g = gaps({"process": "constant", "rate": "4/s"}, n=100)
    assert np.allclose(g, 0.25)


def test_duration_ends_the_arrivals():
    reqs = requests(setup(CHAT | {"requests": None, "duration": "60s"}))
    assert reqs[-1].arrival <= 60 < reqs[-1].arrival + 5
    capped = requests(setup(CHAT | {"requests": 100, "duration": "60s"}))
    assert len(capped) + capped.rejected == 100


# ------------------------------------------------------------------ lengths

def test_distributions():
    rng = np.random.Generator(np.random.PCG64(0))
    assert set(draw(Dist(mean=32), rng, 5)) == {32}
    uniform = draw(Dist(dist="uniform", min=64, max=512), rng, 10000)
    assert uniform.min() == 64 and uniform.max() == 512
    logn = draw(Dist(dist="lognormal", mean=500, cv=0.5), rng, 100000)
    assert logn.mean() == pytest.approx(500, rel=0.02)
    assert logn.std() / logn.mean() == pytest.approx(0.5, rel=0.05)
    normal = draw(Dist(dist="normal", mean=10, cv=2.0, max=40), rng, 10000)
    assert normal.min() >= 1 and normal.max() <= 40      # clipped to >= 1 and to max


def test_nothing_exceeds_max_model_len_and_the_rejected_are_counted():
    r = setup({"kind": "rag", "seed": 1, "requests": 2000,
               "prompt": {"dist": "lognormal", "mean": 1500, "cv": 1.0},
               "output": {"dist": "uniform", "min": 1, "max": 3000}}, max_model_len=2048)
    reqs = requests(r)
    assert all(x.prompt_tokens + x.output_tokens <= 2048 for x in reqs)
    assert reqs.rejected > 0                              # an output of 2048+ tokens can never fit
    assert reqs.rejected == 2000 - len(reqs)
    assert reqs.shortened > 0                             # long documents were cut to fit
    assert all(x.prompt_tokens >= 1 for x in reqs)


# ------------------------------------------------------------------ rag and codegen

def test_rag_documents_are_shared_prefixes_when_given_and_unique_otherwise():
    base = {"kind": "rag", "requests": 2000, "prompt": 50, "output": 20}
    popular = requests(setup(base | {"shared_prefixes": {"count": 10, "skew": 1.5, "tokens": 4096}}))
    assert all(r.prompt_tokens == 4096 + 50 for r in popular)  # a document, then a 50-token question
    assert len({prompt(r)[0] for r in popular}) == 10
    many = requests(setup(base | {"shared_prefixes": {"count": 100000, "skew": 0.0, "tokens": 4096}}))
    assert len({prompt(r)[0] for r in many}) > 1950       # mostly distinct documents
    unique = requests(setup(base | {"prompt": 3000}))
    assert len({prompt(r)[0] for r in unique}) == 2000


def test_codegen_requests_start_with_repository_context():
    reqs = requests(resolve(spec("codegen-70b", workload__duration="2min")))
    assert reqs and all(r.content.parts[0][0][0] == SHARED_PREFIX for r in reqs)
    assert all(r.session == -1 for r in reqs)             # no sessions: single requests


# ------------------------------------------------------------------ warm-up

def test_warmup_prefills_the_most_popular_prefixes_and_the_templates():
    r = setup(CHAT, warmup={"system_prompts": 2, "templates": [{"name": "tools", "tokens": 1000}]})
    warm, reqs = warmup(r), requests(r)
    assert [w.id for w in warm] == [-1, -2, -3]
    assert all(w.warmup and w.arrival == 0 and w.output_tokens == 0 for w in warm)
    popularity = Counter(r.content.parts[0][0][1] for r in reqs if r.turn == 0)
    top = [index for index, _ in popularity.most_common(2)]
    assert top == [0, 1]                                  # prefix 0 is the rank-1 prefix
    for w, index in zip(warm, top):                       # the two most used prefixes, in order
        user = next(x for x in reqs if x.content.parts[0][0] == (SHARED_PREFIX, index))
        keys = prompt(w, 16)
        assert keys and prompt(user, 16)[: len(keys)] == keys   # the real requests hit them
    template = warm[2]
    assert template.prompt_tokens == 1000
    assert not {k for x in reqs for k in prompt(x)} & set(prompt(template))


def test_no_warmup_without_lmcache_or_without_a_warmup_section():
    assert warmup(setup(CHAT)) == []
    assert warmup(setup(CHAT, lmcache=False)) == []


# ------------------------------------------------------------------ examples and speed

@pytest.mark.parametrize("example", [p.stem for p in sorted((REPO / "examples").glob("*.yaml"))])
def test_every_example_generates_its_workload(example):
    r = resolve(spec(example))
    reqs = requests(r)
    assert reqs and [x.id for x in reqs] == list(range(len(reqs)))
    assert all(x.prompt_tokens + x.output_tokens <= r.max_model_len for x in reqs)
    assert all(x.id < 0 and x.warmup for x in warmup(r))


def test_a_hundred_thousand_chat_requests_are_all_generated():
    """(How fast is the benchmarks' business: benchmarks/simulate_trace.py runs a million.)"""
    r = setup(CHAT | {"requests": 100_000, "arrivals": {"session_rate": "50/s"}})
    reqs = requests(r)
    assert len(reqs) + reqs.rejected == 100_000
    assert math.isfinite(reqs[-1].arrival)


# ------------------------------------------------------------------ the stream a run takes

@pytest.mark.parametrize("max_model_len", [None, 1200])
def test_the_stream_a_run_takes_is_the_list_and_says_its_counts_before_the_first_request(max_model_len):
    """A run takes the workload as a stream (kvplan.sim.workload.stream); listed, it is `requests`,
    and what a run needs up front (how many, the last arrival, how many decode) is known before any
    request is built. With a short max_model_len some first turns are shortened, some rejected."""
    r = setup(CHAT, max_model_len=max_model_len)
    listed = requests(r)
    taken = stream(r)
    assert (len(taken), taken.last_arrival, taken.decoding) == \
           (len(listed), listed[-1].arrival, sum(1 for q in listed if q.output_tokens > 1))
    assert (taken.rejected, taken.shortened, taken.sessions_ended_early) == \
           (listed.rejected, listed.shortened, listed.sessions_ended_early)
    if max_model_len:
        assert listed.rejected and listed.shortened and listed.sessions_ended_early
    again = list(taken)
    assert [(q.id, q.arrival, q.prompt_tokens, q.output_tokens, q.session, q.turn, q.content.parts) for q in again] == \
           [(q.id, q.arrival, q.prompt_tokens, q.output_tokens, q.session, q.turn, q.content.parts) for q in listed]


def test_a_stream_holds_numbers_until_a_request_is_reached():
    """Drawing a 20,000-request chat workload as a stream allocates a fraction of what the built list
    holds: the requests and their contents are made as the run reaches them."""
    import tracemalloc

    r = setup({**CHAT, "requests": 20000})
    tracemalloc.start()
    taken = stream(r)
    drawn = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    tracemalloc.start()
    listed = requests(r)
    built = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(taken) == len(listed)
    assert drawn < built / 4, (drawn, built)


# ------------------------------------------------------------------ one rate: requests, or new sessions by name

def test_a_session_workload_gives_its_new_sessions_per_second_as_session_rate():
    r = setup(CHAT | {"requests": 600, "arrivals": {"session_rate": "2sessions/s"}})
    assert r.workload.arrivals.session_rate == r.workload.arrivals.starts_per_s == 2.0
    reqs = requests(r)
    sessions = len({q.session for q in reqs})
    offered = len(reqs) / reqs[-1].arrival
    assert offered > 2.0 * 1.5, "each session brings several requests: requests/s is well above sessions/s"
    assert sessions / reqs[-1].arrival == pytest.approx(2.0, rel=0.25)


def test_a_rate_on_a_session_workload_is_refused_naming_session_rate():
    with pytest.raises(SpecError) as exc:
        setup(CHAT | {"arrivals": {"rate": "20/s"}})
    [problem] = exc.value.problems
    assert problem.path == "workload.arrivals.rate" and "this workload has sessions" in problem.message
    assert problem.fix.startswith("write arrivals.session_rate: 20sessions/s") and "kvplan plan --rate" in problem.fix


def test_a_request_unit_on_session_rate_is_refused_with_the_sessions_unit():
    for text in ("20req/s", "20rps", "1200req/min"):
        with pytest.raises(SpecError) as exc:
            setup(CHAT | {"arrivals": {"session_rate": text}})
        [problem] = exc.value.problems
        assert problem.path == "workload.arrivals.session_rate" and "counts requests" in problem.message
        assert problem.fix.endswith("sessions/s'")


def test_session_rate_without_sessions_is_refused_naming_rate():
    with pytest.raises(SpecError) as exc:
        setup(CHAT | {"sessions": None, "arrivals": {"session_rate": "3/s"}})
    [problem] = exc.value.problems
    assert problem.path == "workload.arrivals.session_rate" and problem.fix.startswith("write arrivals.rate: 3/s")
