"""A vLLM instance: iteration-level continuous batching over the HBM block pool, as vLLM v1 does it.

Each engine step (vllm/v1/core/sched/scheduler.py, simplified to what decides timing):

1. Running requests first, in admission order: a decoding request needs one token, a request
   still prefilling needs the rest of its prompt, cut to the step's token budget
   (max_num_batched_tokens) when chunked prefill is on. When the pool cannot give a request the
   blocks it needs, the most recently admitted running request is preempted (recompute: its
   blocks go back to the free queue, hashes kept, and it rejoins the front of the waiting queue;
   its next admission asks LMCache again, a re-lookup counted apart from first lookups)
   until the allocation succeeds.
2. If nothing was preempted, waiting requests are admitted first come first served while fewer
   than max_num_seqs run and budget remains: vLLM's prefix cache gives the local hit (whole
   blocks, at most prompt - 1 tokens), LMCache the external hit beyond it (loaded
   synchronously before the step's forward pass; nothing below min_retrieve_tokens); the
   request is admitted only if the pool can hold its computed tokens plus this step's chunk.
   With async scheduling (vllm/v1/engine/core.py `step_with_batch_queue`) the step after the one
   under way is already scheduled, so a request that arrived during a step is admitted one step
   later than without it (`admission_lag`); one that finds the engine idle, at once.
3. The step takes load time (the synchronous retrieves of newly admitted requests, concurrent)
   + forward time (the step-time model) + the GPU -> DRAM copy of chunks completed in the step
   (LMCache's wait_for_save); NVMe and Ceph writes continue asynchronously.

With vLLM's native offloading instead of LMCache (native.py), admission asks its CPU tier after the
prefix cache; a request with chunks there gets its blocks, leaves the waiting queue while they load
(WAITING_FOR_REMOTE_KVS: it takes no budget and no max_num_seqs slot, and the step does not wait for
it) and returns to the front of the queue when the load completes, schedulable like an arrival at
that moment (`admission_lag`), with the loaded tokens computed. Its stores are copies started after
the step that completes a chunk, which the step does not wait for either.
Disaggregated (kvplan.sim.disagg), a prefill instance keeps a finished request's blocks until its KV has been sent
(`hold_finished`, `release`), and a decode instance receives a request's prompt KV from elsewhere (`remote`):
admission gives the request blocks for it and the request waits apart while it comes in, as a native load does.
4. A request whose prompt completes in the step emits its first token then (TTFT); decoding
   requests emit one token per step; a finished request's blocks return to the free queue with
   their hashes, last block first.

Decoding requests are not visited one by one each step: they are members of a `DecodeSet`
(decoding.py), which advances them all with one clock and tells the scheduler which of them
need a new block, and the step which of them emitted their last token. The scheduler visits
only the requests still prefilling and those members, in the running order, so a step costs
O(changes) rather than O(running). Should the step's token budget run out inside the batch (some
requests then not scheduled at all), it falls back to visiting every request; the scheduler
never lets that happen (a request is admitted only while budget is left, and a prefill cut to
the budget is always the last running request), but the fallback keeps the rule exact.

Decode fast-forward: while every running request is decoding and nothing can be admitted, the
batch does not change until a request finishes, a block boundary needs memory that is not there,
or (with a free slot) a new request arrives. The engine then advances many decode steps in one
event, their times summed by `StepTime.decode_run` (no scheduling per step); an arrival
brings its wake-up forward to the end of the step under way, where the request can join. With a
free slot the steps are timed as the run reaches them (PLAN_FIRST, then as many again), since an
arrival cuts most such runs short.

A test holds the fast-forward to stepping one iteration at a time, and another the scheduler's
visits to `_schedule_each` run for every step; a `Probe`, which only tests give an engine,
switches it to those definitions (kvplan/sim/__init__.py lists every fast form and its test).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from operator import itemgetter
from typing import TYPE_CHECKING, Callable, Protocol


from .clock import AllOf, Environment, Event, Process, Steps, sooner, succeed_at
from .decoding import DecodeSet
from .prefix_cache import Holding, PrefixCache
from .seq import Seq
from .steptime import StepTime

if TYPE_CHECKING:
    from ..resolve import Resolved
    from .lmcache import LMCacheModel, Span
    from .native import NativeOffload
    from .workload import Request


PLAN_FIRST = 32
"""Decode steps a run times before it starts (engine._fast_forward); it times more as it reaches them."""

Batch = tuple[list[tuple[Seq, int]], int, list[Process]]
"""One step's batch: prefills as (seq, new tokens), the decoding members that take a token, the loads to wait for."""


class Probe:
    """What a test changes in an engine (`Engine.probe`) to hold a fast form to the definition it stands
    for (kvplan/sim/__init__.py lists them); a production engine has none."""

    def __init__(self, fast_forward: bool = True, visit_each: bool = False,
                 on_step: Callable[[Engine, int], object] | None = None,
                 on_prefills: Callable[[Engine, list[tuple[int, int]]], object] | None = None):
        self.fast_forward = fast_forward         # False: decode runs are stepped one iteration at a time
        self.visit_each = visit_each             # True: every step goes through vLLM's whole loop (_schedule_each)
        self.on_step = on_step                   # on_step(engine, tokens scheduled), after each step is scheduled
        self.on_prefills = on_prefills           # on_prefills(engine, [(new tokens, computed before)]), likewise


OnFinish = Callable[[int, Seq, float], None]
"""Told (instance, seq, now) when a request has emitted its last token (the simulation's `finished`)."""


class RemoteKV(Protocol):
    """Where a decode instance of a disaggregated deployment gets a request's prompt KV (kvplan.sim.disagg)."""

    def claim(self, seq: Seq) -> int:
        """The prompt tokens [0, end) whose KV is elsewhere for `seq`, as end; -1 when it has none there."""
        ...

    def receive(self, seq: Seq, instance: int, first_token: int, last_token: int) -> Steps:
        """A process: the KV of tokens [first_token, last_token) into the instance's blocks."""
        ...

    def skip(self, seq: Seq) -> None:
        """The instance holds the KV itself (its prefix cache): nothing is received."""
        ...


class Engine:
    """vLLM instance `index` of the resolved deployment `r` (see the module docstring), handed its parts:
    the clock it runs on, its own HBM prefix cache, the LMCache model all instances share (None:
    no LMCache), its step-time model, and whom to tell when a request finishes. It reads only its
    serving settings from `r`; `offset`, when traffic starts, is set by the simulation after the
    warm-up."""

    def __init__(self, r: Resolved, index: int, env: Environment, hbm: PrefixCache, lm: LMCacheModel | None,
                 steptime: StepTime, on_finish: OnFinish, native: NativeOffload | None = None):
        self.index, self.env = index, env
        self.hbm = hbm
        self.steptime = steptime
        self.on_finish = on_finish
        self.offset = 0.0                        # when traffic starts (request merging's window is from an arrival)
        self.bs = r.block_size
        self.max_seqs = r.max_num_seqs
        self.budget = r.max_num_batched_tokens
        self.chunked = r.chunked_prefill
        # Steps after the one under way before an arriving request can be scheduled: vLLM schedules the next
        # step at the end of the one under way, or, with async scheduling, the one after it (the next is
        # already scheduled; Resolved.async_scheduling).
        self.admission_lag = 2 if r.async_scheduling else 1
        self.prefix_caching = r.prefix_caching
        self.keyed = r.prefix_caching or r.lmcache is not None or native is not None   # HBM blocks need their keys
                                                 # (Seq.blocks): the prefix cache looks them up, loaded blocks are
                                                 # committed under them
        self.lm = lm
        self.native = native                     # vLLM's native offloading (None: off); never beside lm
        self.loading = 0                         # its requests whose blocks are loading or landed (out of waiting)
        self.landed: list[Seq] = []              # loaded, waiting for the schedule point that sees it (_admit_waiting)
        lmc = r.lmcache                          # request merging (_merge_hold): resolve sets both or neither
        self.merge_window = (lmc.merging_window_s or 0.0) if lmc is not None else 0.0
        self.merge_tokens = (lmc.merging_max_tokens or 0) if lmc is not None else 0
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.prefilling: list[Seq] = []          # the running requests still prefilling, in running order
        self.decoding = DecodeSet(self.bs)       # the running requests decoding (all others, but `idle`)
        self.idle: list[Seq] = []                # decoding requests a step left out: they rejoin after it
        self.wakeup: Event | None = None         # what the loop waits on
        self.asleep = False                      # the wake-up is a timer that a change can bring forward
        self.run_start = 0.0                     # a decode run's start and its steps' end times (seconds from
        self.run_ends: list[float] = []          # the start) while an arrival may cut it short; [] otherwise
        self.run_steps = 0                       # the decode steps it will have run when it wakes
        self.steps = 0
        self.preemptions = 0
        self.busy = 0.0
        self.occupied = 0.0                      # seconds of steps weighted by how full the batch was (_fullness)
        self.blocked = False                     # the step under way left requests waiting (a limit or the lag held them)
        self.waited = 0.0                        # seconds of such steps
        self.waited_full = 0.0                   # the same, weighted by how full their batches were
        self.probe: Probe | None = None          # only tests set one
        self.remote: RemoteKV | None = None      # a disaggregated decode instance's KV source (kvplan.sim.disagg)
        self.hold_finished = False               # a disaggregated prefill instance: a finished request keeps its
                                                 # blocks until `release` (its KV is read from them)

    # ---- arrivals
    def submit(self, req: "Request", record: bool = True) -> None:
        seq = Seq(req, record)
        seq.ready = self._next_schedule()
        self.waiting.append(seq)
        self._wake()

    def _next_schedule(self) -> int:
        """The step count from which a request that turns up now can be scheduled."""
        if self.running:                         # a step is under way: the request waits for a schedule point
            done = self.steps
            if self.run_ends:                    # inside a run of decode steps: those already completed
                done += bisect_right(self.run_ends, self.env.now - self.run_start)
            return done + self.admission_lag
        return self.steps                        # an idle engine schedules it at once

    def _loaded(self, seq: Seq) -> None:
        """Native offloading: `seq`'s blocks are in HBM. vLLM caches them, and the finished load, reported in a
        step's output, makes the request schedulable at the next schedule point that sees that output; until
        then the scheduler skips it and schedules the others (`_admit_waiting` puts it back at the front)."""
        if self.prefix_caching:
            self.hbm.commit(seq.holding, seq.blocks, seq.computed // self.bs)
        seq.loaded = True
        seq.ready = self._next_schedule()
        self.landed.append(seq)
        self._wake()

    def _wake(self) -> None:
        """Something changed (an arrival, a completion): the waiting engine looks at it now; a sleeping
        one now too, or, in a decode run, at the end of the step under way (a request joins a batch at
        a step boundary)."""
        wakeup = self.wakeup
        if wakeup is None or wakeup.processed:
            return
        if not wakeup.triggered:
            wakeup.succeed()
            return
        if not self.asleep:                      # brought forward already, or due at the boundary anyway
            return
        self.asleep = False
        now, ends = self.env.now, self.run_ends
        when = now
        if ends:
            start = self.run_start
            steps = min(bisect_right(ends, now - start) + 1, len(ends))   # the step under way is the `steps`-th
            if steps == len(ends):               # the last timed: the timer rings at its end
                return
            self.run_steps = steps
            when = max(now, start + ends[steps - 1])
        self.wakeup = sooner(self.env, wakeup, when)

    def _sleep(self, seconds: float) -> Event:
        """An event `seconds` from now that the next arrival or completion brings forward (`_wake`)."""
        return self._sleep_until(self.env.now + seconds)   # where env.timeout(seconds) lands

    def _sleep_until(self, when: float) -> Event:
        """An event at simulated time `when` that the next arrival or completion brings forward (`_wake`);
        `asleep` stays True until one does."""
        wakeup = self.wakeup = self.env.event()
        succeed_at(self.env, wakeup, when)
        self.asleep = True
        return wakeup

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running) + self.loading

    @property
    def waiting_count(self) -> int:
        """Requests waiting to be admitted: vLLM's num_requests_waiting metric."""
        return len(self.waiting)

    def gpu_prefix_blocks(self, req: "Request") -> int:
        """Leading blocks of `req`'s prompt this instance's HBM prefix cache holds (in use or free, until evicted:
        what vLLM's KV events report); 0 without prefix caching, whose blocks vLLM never reuses."""
        if not self.prefix_caching:
            return 0
        return self.hbm.match(req.content.keys(self.bs, req.prompt_tokens))

    def cpu_prefix_tokens(self, req: "Request") -> int:
        """Leading tokens of `req`'s prompt this instance holds in its CPU tier: vLLM's native tier or LMCache's ddr
        tier, whichever offload engine the spec has (0 without one). A query a router asks of every instance
        (kvplan.sim.llmd)."""
        if self.native is not None:              # vLLM's native CPU tier, the other offload engine
            return self.native.cpu_prefix_tokens(self.index, req.content, req.prompt_tokens)
        return self.lm.cpu_prefix_tokens(self.index, req.content, req.prompt_tokens) if self.lm is not None else 0

    # ---- the loop
    def loop(self) -> Steps:
        env = self.env
        while True:
            if not self.running and not self.waiting and not self.landed:
                self.wakeup = env.event()
                yield self.wakeup
                continue
            hold = self._merge_hold()
            if hold > 0 and not self.running:
                yield self._sleep(hold)
                continue
            prefills, decodes, loads = self._schedule(admit=hold <= 0)
            if not prefills and not decodes:            # nothing fits: wait for a change
                self.wakeup = env.event()
                yield self.wakeup
                continue
            probe = self.probe
            if probe is not None:
                if probe.on_step is not None:
                    probe.on_step(self, sum(new for _, new in prefills) + decodes)
                if probe.on_prefills is not None:
                    probe.on_prefills(self, [(new, seq.computed) for seq, new in prefills])
            self.blocked = bool(self.waiting)
            if not prefills and not loads and (probe is None or probe.fast_forward) and self._can_fast_forward():
                yield from self._fast_forward()
                continue
            yield from self._step(prefills, loads)

    def _merge_hold(self) -> float:
        """Seconds to keep holding waiting requests for the design note's request merging (0 = go)."""
        window = self.merge_window
        if not window or not self.waiting:
            return 0.0
        tokens = sum(s.target for s in self.waiting)
        if tokens >= self.merge_tokens:
            return 0.0
        return self.waiting[0].req.arrival + self.offset + window - self.env.now

    # ---- scheduling
    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def _schedule(self, admit: bool) -> Batch:
        """One step's batch: (prefills as (seq, new tokens), how many members of `decoding` decode, loads).

        vLLM's loop visits the running requests in order; here only those that do something
        besides taking one token are visited (the prefilling ones and the decoding ones at a block
        boundary), in the same order, which is the same as long as the budget lasts for all of them.
        """
        probe = self.probe
        if probe is not None and probe.visit_each:
            return self._schedule_each(admit)
        running, decoding = self.running, self.decoding
        if self.idle:                            # left out of the last step: decoding again from now
            for seq in self.idle:
                decoding.join(seq)
            self.idle.clear()
        budget, bs, chunked = self.budget, self.bs, self.chunked
        plan = []                                # (position in running, seq, new tokens) of prefilling ones
        done = 0                                 # running requests before this one accounted for
        for seq in self.prefilling:
            pos = running.index(seq)
            budget -= pos - done                 # the decoding requests before it take a token each
            if budget <= 0:
                return self._schedule_each(admit)
            remaining = seq.target - seq.computed
            new = remaining if remaining < budget else budget
            if new < remaining and not chunked:
                return self._schedule_each(admit)
            budget -= new
            plan.append((pos, seq, new))
            done = pos + 1
        tail = len(running) - done               # decoding requests after the last prefilling one
        if tail > budget:
            return self._schedule_each(admit)
        budget -= tail
        # the budget lasts for every running request: what remains is growth (and preemption) in running order
        grow = [(pos, seq, -(-(seq.computed + new) // bs) - seq.holding.blocks)
                for pos, seq, new in plan if seq.computed + new > seq.holding.blocks * bs]
        due = decoding.due(decoding.clock)
        if due:
            grow += [(running.index(seq), seq, 1) for seq in due]
            grow.sort(key=itemgetter(0))
        preempted = False
        if grow:
            for pos, seq, need in grow:
                if pos >= len(running):          # preempted, with everything after it
                    break
                grown, hit = self._grow(seq, need)
                preempted = preempted or hit
                if not grown:
                    break
                if seq.since >= 0:
                    decoding.grew(seq)
        if preempted:                            # no admissions; the victims' tokens are not scheduled
            kept = len(running)
            prefills = [(seq, new) for pos, seq, new in plan if pos < kept]
            self._cache_scheduled(prefills)
            return prefills, decoding.members, []
        prefills = [(seq, new) for _, seq, new in plan]
        self._cache_scheduled(prefills)
        loads = self._admit_waiting(admit, budget, prefills)
        return prefills, decoding.members, loads

    def _cache_scheduled(self, prefills: list[tuple[Seq, int]]) -> None:
        """vLLM caches a block when the step that computes it is scheduled (allocate_slots caches every
        token scheduled in the step), so a request admitted later in the same step already hits it."""
        if self.prefix_caching:
            for seq, new in prefills:
                self.hbm.commit(seq.holding, seq.blocks, min(seq.computed + new, len(seq.blocks) * self.bs) // self.bs)

    def _grow(self, seq: Seq, need: int) -> tuple[bool, bool]:
        """Give `seq` `need` more HBM blocks, preempting from the back of the running queue until they
        fit (vLLM's recompute preemption). Returns (whether it got them, whether anyone was preempted)."""
        holding, running = seq.holding, self.running
        preempted = False
        while not self.hbm.grow(holding, need):
            victim = running[-1]
            self._preempt(victim)
            preempted = True
            if victim is seq:                    # it had to preempt itself
                return False, True
        return True, preempted

    def _schedule_each(self, admit: bool) -> Batch:
        """vLLM's loop over every running request, for steps whose budget runs out inside the batch."""
        decoding = self.decoding
        for seq in self.running:                 # every decoding request's counters written out
            if seq.since >= 0:
                decoding.leave(seq)
        budget, bs, running = self.budget, self.bs, self.running
        prefills: list[tuple[Seq, int]] = []
        decodes: list[Seq] = []
        preempted = False
        chunked = self.chunked
        for seq in running:                      # a preemption pops from the end: the loop then stops short of it
            if budget <= 0:
                break
            remaining = seq.target - seq.computed
            if remaining > 0:
                new = remaining if remaining < budget else budget
                if new < remaining and not chunked:
                    break
            else:
                new = 1
            holding = seq.holding
            end = seq.computed + new
            if end > holding.blocks * bs:        # its tokens spill past its blocks: grow
                grown, hit = self._grow(seq, -(-end // bs) - holding.blocks)
                preempted = preempted or hit
                if not grown:
                    break
            budget -= new
            if remaining > 0:
                prefills.append((seq, new))
            else:
                decodes.append(seq)
        for seq in decodes:
            decoding.join(seq)
        self.idle = [seq for seq in running if seq.since < 0 and seq.computed >= seq.target]
        self._cache_scheduled(prefills)
        loads = [] if preempted else self._admit_waiting(admit, budget, prefills)
        return prefills, decoding.members, loads

    def _admit_waiting(self, admit: bool, budget: int, prefills: list) -> list[Process]:
        """Admit waiting requests first come first served while they fit; returns their loads."""
        loads: list[Process] = []
        if self.landed:                          # loads seen by this schedule point rejoin the front of the queue
            due = [seq for seq in self.landed if seq.ready <= self.steps or not self.running]
            for seq in reversed(due):
                self.landed.remove(seq)
                self.waiting.appendleft(seq)
                self.loading -= 1
        if admit:
            while self.waiting and len(self.running) < self.max_seqs and budget > 0:
                seq = self.waiting[0]
                if seq.ready > self.steps and self.running:   # not yet seen by the scheduler (submit); with
                    break                                       # nothing running, nothing delays it
                new = self._admit(seq, budget)
                if new == 0:
                    break
                self.waiting.popleft()
                if new < 0:                      # its blocks load from the native CPU tier: it waits apart
                    self.loading += 1
                    continue
                self.running.append(seq)
                self.prefilling.append(seq)
                budget -= new
                prefills.append((seq, new))
                if seq.pending_load is not None:
                    loads.append(seq.pending_load)
                    seq.pending_load = None
        return loads

    def _admit(self, seq: Seq, budget: int) -> int:
        """Try to give `seq` its blocks; returns the tokens it prefills this step (0 = not admitted, -1 = its
        blocks load from the native CPU tier first)."""
        req, bs = seq.req, self.bs
        if seq.loaded:
            return self._admit_loaded(seq, budget)
        if not seq.blocks and self.keyed:
            seq.blocks = req.content.keys(bs, req.prompt_tokens + req.output_tokens)
        hit = 0
        if self.prefix_caching:
            hit = min(self.hbm.match(seq.blocks[: seq.target // bs]), (seq.target - 1) // bs)
        local = hit * bs
        remote = self.remote
        if remote is not None:                   # disaggregated decode: the prompt's KV comes from a prefill instance
            end = remote.claim(seq)
            if end > local:
                return self._remote_load(seq, hit, end)
            if end >= 0:
                remote.skip(seq)
        external = local
        spans: list[Span] = []
        counts: list[tuple[str, int, int]] = []
        if self.lm is not None:
            lm = self.lm
            if not seq.chunks:
                seq.chunks = req.content.keys(lm.chunk_size, req.prompt_tokens)
            spans, counts = lm.probe(self.index, seq.chunks)
            held = (spans[-1].end if spans else 0) * lm.chunk_size
            usable = min(held, seq.target - 1)
            if usable > local and usable - local >= lm.min_retrieve_tokens:
                external = usable
        native_probe = None
        if self.native is not None:
            native_probe = self._native_probe(seq, local)
            if native_probe[2] > local:
                return self._native_load(seq, hit, local, native_probe)
        computed = external
        new = seq.target - computed
        if self.chunked:
            new = min(new, budget)
        elif new > budget:
            return 0
        holding = self.hbm.allocate(seq.blocks, hit, self._blocks_for(computed + new))
        if holding is None:
            return 0
        seq.holding, seq.computed = holding, computed
        seq.admitted = self.env.now if seq.admitted < 0 else seq.admitted
        first = seq.preemptions == 0          # where the prompt's KV came from is recorded at first admission
        if first:
            seq.hbm_tokens = local
        if native_probe is not None and self.native is not None:
            self.native.count_lookup(native_probe[0], native_probe[1], seq.target, relookup=not first)
        if self.lm is not None:
            self.lm.count_lookup(counts, seq.target, relookup=not first)
            self.lm.touch(self.index, seq.chunks, spans)
            seq.saved = max(seq.saved, spans[-1].end if spans else 0)
            if external > local:
                if first:
                    for tier, _, _, tokens in self.lm.portions(spans, local, external):
                        seq.tiers[tier] += tokens
                seq.pending_load = self.env.process(self.lm.retrieve(self.index, seq.chunks, spans, local, external))
        self.hbm.commit(holding, seq.blocks, computed // bs)
        self._cache_scheduled([(seq, new)])
        return new

    def _native_probe(self, seq: Seq, local: int) -> tuple[int, int, int]:
        """Native offloading: what the CPU tier holds after the HBM hit of `local` tokens, as (chunks asked,
        chunks held, the token up to which the request's blocks can load: whole blocks, one token left to
        compute, as vLLM's scheduler leaves it)."""
        native, req = self.native, seq.req
        assert native is not None
        size = native.chunk_tokens
        if not seq.chunks:
            seq.chunks = req.content.keys(size, req.prompt_tokens)
        start = local // size
        held = native.lookup(self.index, seq.chunks, start)
        end = min((start + held) * size, seq.target - 1) // self.bs * self.bs
        return len(seq.chunks) - start, held, end

    def _native_load(self, seq: Seq, hit: int, local: int, probe: tuple[int, int, int]) -> int:
        """Give `seq` the blocks the CPU tier fills and start their load: it waits apart until they are in
        (`_loaded`). Returns -1, or 0 when the pool cannot give it the blocks."""
        native = self.native
        assert native is not None
        asked, held, end = probe
        holding = self.hbm.allocate(seq.blocks, hit, self._blocks_for(end))
        if holding is None:
            return 0
        first = seq.preemptions == 0
        native.count_lookup(asked, held, seq.target, relookup=not first)
        seq.holding, seq.computed = holding, end
        seq.admitted = self.env.now if seq.admitted < 0 else seq.admitted
        if first:
            seq.hbm_tokens = local
            seq.tiers["ddr"] += end - local
        self.hbm.commit(holding, seq.blocks, hit)
        self.env.process(self._fetch(seq, native.load(self.index, seq.chunks, local, end)))
        return -1

    def _remote_load(self, seq: Seq, hit: int, end: int) -> int:
        """Disaggregated decode: give `seq` blocks for its prompt's first `end` tokens and receive their KV into them
        (`remote`); it waits apart like a native load (`_loaded`), all but its last prompt token computed after it.
        Returns -1, or 0 when the pool cannot give it the blocks."""
        remote = self.remote
        assert remote is not None
        holding = self.hbm.allocate(seq.blocks, hit, self._blocks_for(end))
        if holding is None:
            return 0
        seq.holding, seq.computed = holding, min(end, seq.target - 1)
        seq.admitted = self.env.now if seq.admitted < 0 else seq.admitted
        self.hbm.commit(holding, seq.blocks, hit)
        self.env.process(self._fetch(seq, remote.receive(seq, self.index, hit * self.bs, end)))
        return -1

    def _fetch(self, seq: Seq, load: Steps) -> Steps:
        """A process: the load of `seq`'s blocks, then `_loaded`."""
        yield from load
        self._loaded(seq)

    def _admit_loaded(self, seq: Seq, budget: int) -> int:
        """Schedule a request whose blocks the native CPU tier loaded: its loaded tokens are computed, it needs
        blocks for this step's chunk of the rest."""
        new = seq.target - seq.computed
        if self.chunked:
            new = min(new, budget)
        elif new > budget:
            return 0
        need = self._blocks_for(seq.computed + new) - seq.holding.blocks
        if need > 0 and not self.hbm.grow(seq.holding, need):
            return 0
        seq.loaded = False
        self._cache_scheduled([(seq, new)])
        return new

    def _preempt(self, seq: Seq) -> None:
        """vLLM's recompute preemption: free the blocks (hashes stay cached), back to the front of the queue."""
        if self.running[-1] is seq:
            self.running.pop()
        else:
            self.running.remove(seq)
        if seq.since >= 0:
            self.decoding.leave(seq)
        elif seq.computed < seq.target:
            self.prefilling.remove(seq)
        elif seq in self.idle:
            self.idle.remove(seq)
        self.hbm.release(seq.holding)
        seq.holding = Holding([], 0, 0)
        seq.preemptions += 1
        self.preemptions += 1
        seq.target = seq.length                 # prompt and what was generated so far are recomputed
        seq.computed = 0
        self.waiting.appendleft(seq)

    def _can_fast_forward(self) -> bool:
        if not self.waiting and not self.landed:
            return True
        return len(self.running) >= self.max_seqs

    def _fullness(self, tokens: int) -> float:
        """How full a step's batch is: the fullest of its three limits (batch slots max_num_seqs, the token
        budget max_num_batched_tokens with `tokens` scheduled, the HBM KV blocks). A waiting request is
        admitted unless one of them is full, so near 1 arrivals queue; the time in steps alone (`busy`) is
        near 1 whenever any request runs, however small the batch."""
        return max(len(self.running) / self.max_seqs, tokens / self.budget,
                   self.hbm.used_blocks / self.hbm.num_blocks)

    # ---- one step
    def _step(self, prefills: list[tuple[Seq, int]], loads: list[Process]) -> Steps:
        env, decoding = self.env, self.decoding
        start = env.now
        fullness = self._fullness(sum(new for _, new in prefills) + decoding.members)
        if loads:
            yield AllOf(env, loads)
            waited = env.now - start
            for seq, _ in prefills:
                seq.load_wait += waited
        yield env.timeout(self.steptime.step([(new, s.computed) for s, new in prefills], decoding.members,
                                             decoding.context))
        stores = []
        native = self.native
        for seq, new in prefills:
            seq.computed += new
            if native is not None:           # the chunks this step completed are copied off after it
                full = min(seq.computed, seq.prompt) // native.chunk_tokens
                if full > seq.saved:
                    native.store(self.index, seq.chunks[seq.saved:full])
                    seq.saved = full
            elif self.lm is not None:
                full = min(seq.computed, seq.req.prompt_tokens) // self.lm.chunk_size
                if full > seq.saved:
                    stores += seq.chunks[seq.saved:full]
                    seq.saved = full
        finished, started = [], []
        for seq, _ in prefills:
            if not seq.prefilling:               # the prompt (or its recomputation) is done: a token is sampled
                self.prefilling.remove(seq)
                if seq.first_token < 0:
                    seq.first_token = env.now
                seq.generated += 1
                if seq.generated >= seq.req.output_tokens:
                    finished.append(seq)
                else:
                    started.append(seq)
        ended = decoding.advance()               # every decoding request emits a token
        if ended:
            if len(ended) > 1:
                ended.sort(key=self.running.index)
            finished += ended
        for seq in started:                      # decoding from the next step on
            decoding.join(seq)
        stores += self._decode_stores(finished)
        if stores and self.lm is not None:
            yield from self.lm.store(self.index, stores)
        self.steps += 1
        self.busy += env.now - start
        self.occupied += (env.now - start) * fullness
        if self.blocked:
            self.waited += env.now - start
            self.waited_full += (env.now - start) * fullness
        for seq in finished:
            self._finish(seq)

    def _decode_stores(self, finished: list[Seq]) -> list[int]:
        """save_decode_cache: at the end, the full chunks that include generated tokens."""
        if self.lm is None or not self.lm.save_decode_cache:
            return []
        keys: list[int] = []
        for seq in finished:
            full = seq.req.content.keys(self.lm.chunk_size, seq.length)
            keys += full[seq.saved:]
            seq.saved = len(full)
        return keys

    # ---- many decode steps at once
    def _fast_forward(self) -> Steps:
        env, bs, decoding = self.env, self.bs, self.decoding
        decodes = [s for s in self.running if s.since >= 0]      # the members, in running order
        for seq in decodes:
            decoding.sync(seq)
        horizon = decoding.next_end()
        room = [s.holding.blocks * bs - s.computed for s in decodes]   # decode steps before a new block
        horizon = min(horizon, self._steps_within_free_blocks(room, horizon))
        if horizon < 1:                      # the next step needs a block that is not free: step it
            yield from self._step([], [])
            return
        start, seqs, context = env.now, len(decodes), decoding.context
        fullness = self._fullness(seqs)
        if len(self.running) < self.max_seqs:      # an arrival may join at the next step boundary (_wake)
            # Steps are timed as the run reaches them, PLAN_FIRST then as many again each time: an
            # arrival cuts most runs short, and the steps after it would have been timed for nothing.
            ends = self.steptime.decode_run(seqs, context, min(horizon, PLAN_FIRST))
            self.run_start, self.run_ends, self.run_steps = start, ends, len(ends)
            yield self._sleep_until(start + ends[-1])
            while self.asleep and len(ends) < horizon:     # nobody came: time the next steps
                self.steptime.extend_run(ends, seqs, context, min(horizon - len(ends), len(ends)))
                self.run_steps = len(ends)
                yield self._sleep_until(start + ends[-1])
            steps = self.run_steps
            self.run_ends = []
        else:
            ends = self.steptime.decode_run(seqs, context, horizon)
            self.run_start, self.run_ends = start, ends          # for an arrival's count of steps done (submit)
            yield env.timeout(ends[-1])
            self.run_ends = []
            steps = horizon
        for seq, r in zip(decodes, room):   # each the blocks its steps need (the decode set's `due` finds out)
            extra = -(-(steps - r) // bs)
            if extra > 0 and not self.hbm.grow(seq.holding, extra):
                raise AssertionError("fast-forward planned blocks that are not free")
        finished = decoding.advance(steps)
        if len(finished) > 1:
            finished.sort(key=self.running.index)
        self.steps += steps
        self.busy += env.now - start
        self.occupied += (env.now - start) * fullness
        if self.blocked:
            self.waited += env.now - start
            self.waited_full += (env.now - start) * fullness
        stores = self._decode_stores(finished)
        if stores and self.lm is not None:
            yield from self.lm.store(self.index, stores)
        for seq in finished:
            self._finish(seq)

    def _steps_within_free_blocks(self, room: list[int], horizon: int) -> int:
        """The most decode steps (<= horizon) whose new blocks the free pool can supply (plain Python:
        a batch holds a few dozen requests at most, where numpy's per-call cost is the larger part)."""
        free, bs = self.hbm.free_blocks, self.bs

        def needed(steps: int) -> int:
            return sum(-(-(steps - r) // bs) for r in room if r < steps)

        if needed(horizon) <= free:
            return horizon
        lo, hi = 0, horizon                    # needed(lo) <= free < needed(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if needed(mid) <= free else (lo, mid)
        return lo

    # ---- completion
    def _finish(self, seq: Seq) -> None:
        env = self.env
        self.running.remove(seq)
        if self.prefix_caching:
            self.hbm.commit(seq.holding, seq.blocks, min(seq.length, len(seq.blocks) * self.bs) // self.bs)
        if not self.hold_finished:
            self.hbm.release(seq.holding)
            seq.holding = Holding([], 0, 0)
        seq.req.content.forget()
        self.on_finish(self.index, seq, env.now)
        self._wake()

    def release(self, seq: Seq) -> None:
        """A finished request's blocks back to the free queue (`hold_finished`: once its KV has been sent)."""
        self.hbm.release(seq.holding)
        seq.holding = Holding([], 0, 0)
        self._wake()
