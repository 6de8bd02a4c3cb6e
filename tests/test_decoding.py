"""DecodeSet: decoding requests advanced by one clock agree with counting every token of each."""

from __future__ import annotations

import random
from kvplan.sim.decoding import DecodeSet
from kvplan.sim.prefix_cache import Holding
from kvplan.sim.seq import Seq
from kvplan.sim.workload import Request, Segments


def member(prompt: int, generated: int, output: int, blocks: int, computed: int) -> Seq:
    """An engine's request with the fields DecodeSet reads and writes set as given."""
    seq = Seq(Request(id=0, arrival=0.0, prompt_tokens=prompt, output_tokens=output, content=Segments((((0,), prompt + output),))), True)
    seq.generated, seq.computed, seq.holding = generated, computed, Holding([], blocks, 0)
    return seq


def test_members_advance_together_and_report_boundaries_and_ends():
    bs = 4
    d = DecodeSet(bs)
    a = member(prompt=10, generated=1, output=4, blocks=3, computed=10)   # 2 tokens of room, 3 left to emit
    b = member(prompt=8, generated=1, output=10, blocks=2, computed=8)    # full: needs a block at once
    d.join(a)
    d.join(b)
    assert d.members == 2 and d.context == 11 + 9
    assert d.due(d.clock) == [b]
    b.holding.blocks += 1
    d.grew(b)
    assert d.advance() == []
    assert d.context == 12 + 10
    assert d.advance() == []
    assert d.due(d.clock) == [a]                     # 10 + 2 computed fill its 3 blocks
    a.holding.blocks += 1
    d.grew(a)
    assert d.advance() == [a]                        # its 4th token
    assert (a.generated, a.computed, a.since) == (4, 13, -1)
    assert d.members == 1 and d.context == 8 + 4
    d.sync(b)
    assert (b.generated, b.computed) == (4, 11)


def test_a_former_membership_leaves_no_live_entries():
    d = DecodeSet(16)
    a = member(prompt=16, generated=1, output=100, blocks=1, computed=16)
    keep = member(prompt=40, generated=1, output=100, blocks=3, computed=40)
    d.join(keep)
    d.join(a)
    d.leave(a)                                       # preempted before its growth was due
    assert d.due(d.clock) == []                      # its entry from before is stale
    a.holding.blocks, a.computed = 2, 20
    d.join(a)                                        # back again, elsewhere on the clock
    assert d.due(d.clock + 7) == []
    assert d.due(d.clock + 8) == [keep]              # 48 - 40 tokens of room
    assert d.due(d.clock + 1000) == [a]              # 32 - 20 tokens of room


def test_random_operations_match_counting_each_token():
    rng = random.Random(7)
    bs = 4
    d = DecodeSet(bs)
    members: list = []
    for _ in range(3000):
        op = rng.random()
        if op < 0.2 or not members:
            prompt = rng.randint(1, 30)
            s = member(prompt, 1, rng.randint(2, 40), -(-prompt // bs), prompt)
            d.join(s)
            members.append(s)
        elif op < 0.25:
            s = members.pop(rng.randrange(len(members)))
            d.leave(s)
            assert s.computed == s.prompt + s.generated - 1
        elif op < 0.4:
            # a run of steps at once, as the engine fast-forwards: each member is given the blocks those
            # steps need and the set is not told (no due, no grew); up to the first member's last token
            steps = min(rng.randint(1, 3 * bs), d.next_end())
            for s in members:
                d.sync(s)
                room = s.holding.blocks * bs - s.computed
                if steps > room:
                    s.holding.blocks += -(-(steps - room) // bs)
            ended = d.advance(steps)
            assert sorted(map(id, ended)) == sorted(map(id, [s for s in members if s.since < 0]))
            for s in ended:
                assert s.generated == s.output
                members.remove(s)
        else:
            # the scheduler: members whose next token needs a block get one
            due = d.due(d.clock)
            want = [s for s in members if s.prompt + s.generated - 1 + d.clock - s.since == s.holding.blocks * bs]
            assert sorted(map(id, due)) == sorted(map(id, want))
            for s in due:
                s.holding.blocks += 1
                d.grew(s)
            expect = sum(s.prompt + s.generated + d.clock - s.since for s in members)
            assert d.context == expect
            ended = d.advance()
            finished = [s for s in members if s.since < 0]
            assert sorted(map(id, ended)) == sorted(map(id, finished))
            for s in ended:
                assert s.generated == s.output
                members.remove(s)
        assert d.members == len(members)
