"""Prefill/decode disaggregation: a prefill pool and a decode pool of vLLM instances, the KV sent between them.

What the real systems do, and what is copied here. vLLM: its NixlConnector, read at vLLM commit 053da34b
(vllm/distributed/kv_transfer/kv_connector/v1/nixl/scheduler.py, NixlConnectorScheduler; releases before the
nixl/ package kept it in nixl_connector.py, where the decode side read only the prompt's whole blocks), and the
proxy of tests/v1/kv_connector/nixl_integration/toy_proxy_server.py and examples/online_serving/
disaggregated_serving/. LMCache: its disagg proxy, examples/disagg_prefill/disagg_proxy_server.py (LMCache main,
read in this session: its WeightedSemaphore, ret_first_tok, max_tokens - 1 for the decoder); its PD mode's workers
(LMCacheConnectorV1 with enable_pd, pd_role sender / receiver, transfer_channel nixl) as its documentation describes
them: ASSUMED, not read from LMCache's source here.

1. The proxy sends each request to a prefill instance, round robin, with max_tokens=1 and kv_transfer_params
   {do_remote_decode: true}. The prefill instance schedules it like any request (it is an aggregated `Engine`:
   its prefix cache and the LMCache tiers behind it), computes the prompt and samples one token, which the proxy
   drops (nixl). Its response (carrying the KV's block ids) goes back to the proxy: a second HTTP leg, which costs the
   step model's request_overhead.
2. nixl: the request finishes on the prefill instance FINISHED_LENGTH_CAPPED and request_finished returns
   delay_free_blocks: its blocks stay held until the decode instance has read them (NIXL then notifies it). The
   proxy sends the request to a decode instance, round robin, with {do_remote_prefill: true}.
   get_num_new_matched_tokens returns the prompt's tokens less the decode instance's own prefix-cache hit, loaded
   asynchronously: the decode scheduler gives the request its blocks when it admits it and parks it as
   WAITING_FOR_REMOTE_KVS (no batch slot, no token budget, as native offloading's loads in engine.py), and its
   worker reads the blocks over NIXL. When they are in, the request rejoins the waiting queue with all but the last
   prompt token computed (vLLM recomputes one, as after any full external hit), and its first step computes that
   token and samples the first output token.
   lmcache: the proxy picks the decode instance first (round robin) and takes ceil(prompt / chunk_size) slots of
   its semaphore over the decode buffer (pd_buffer_size) before it sends the prefill, holding the request while
   they are not free (`Buffer`). The prefill instance pushes the KV over NIXL into the decode instance's receive
   buffer as it saves it and frees its blocks; once the KV is there the proxy gives the slots back, streams the
   prefill's token to the client (ret_first_tok: the client's first token) and sends the decode instance the prompt
   and that token with max_tokens one less (nothing, for a one-token answer). Its LMCache lookup finds the prompt in
   the buffer, copied into vLLM's blocks (within the GPU, at its memory bandwidth), and its first step computes the
   prefill's token and samples the second.
3. The decode instance decodes in batches that carry no prefill besides that one token per request (a request it
   preempts is recomputed there: vLLM reads the remote KV once).

TTFT, as the proxy's client sees it, is the time from the request's arrival at the proxy to the first token it
streams back, + request_overhead for the client's own leg (as aggregated). nixl: prefill queue + prefill compute
(and its LMCache loads) + the prefill leg's HTTP overhead + the wait for a decode admission + the read + the decode
instance's first step. lmcache: the wait for buffer room and the prefill queue + prefill compute + the push + the
prefill leg's HTTP overhead (the decode leg comes after it, in TPOT). SimResult.disaggregation splits it into
those phases.

The transfer is one `Link` per instance per direction of its network (each GPU has its own port, every rank moves
its share at once, so a link carries one rank's bytes at one port's bandwidth): the prefill instance's send link
and the decode instance's receive link, after the NIC's one-way latency. Concurrent transfers share them. The KV
network is separate from the Ceph storage network (fabric.py), as the GPU ports of a server are from its storage
NIC.

Not modelled (docs/disaggregation.md): the prefill step's wait for LMCache's push (the push overlaps the prefill
instance's next steps here); NIXL's handshake on a pair's first transfer; offload tiers on the decode side (the
lmcache section gives the prefill pool its tiers).
"""

from __future__ import annotations

from array import array
from itertools import count
from typing import TYPE_CHECKING

from .clock import Steps
from .engine import Engine
from .fabric import Fabric
from .links import Link, served
from .lmcache import LMCacheModel
from .metrics import summary
from .prefix_cache import Holding, PrefixCache
from .result import DisaggResult
from .router import Router
from .seq import Seq
from .steptime import StepTime

if TYPE_CHECKING:
    from ..resolve import Resolved, ResolvedDisaggregation
    from .request import Request
    from .run import Simulation


class Buffer:
    """LMCache's disagg proxy's WeightedSemaphore over the decode buffer (examples/disagg_prefill/
    disagg_proxy_server.py): a request takes ceil(prompt / chunk_size) slots before its prefill is sent and gives them
    back once its KV is in the decode instance's buffer. An asyncio Condition's wait_for: an arrival that fits goes at
    once; a release wakes the waiters in order, each going if it fits now."""

    def __init__(self, slots: int, chunk_tokens: int):
        self.available, self.chunk_tokens = slots, chunk_tokens
        self.waiting: list[tuple[int, "Request", Engine]] = []

    def slots(self, req: "Request") -> int:
        return -(-req.prompt_tokens // self.chunk_tokens)

    def acquire(self, req: "Request", engine: Engine) -> None:
        """Send `req` to `engine` once its slots are free."""
        need = self.slots(req)
        if need <= self.available:
            self.available -= need
            engine.submit(req)
        else:
            self.waiting.append((need, req, engine))

    def release(self, req: "Request") -> None:
        self.available += self.slots(req)
        still = []
        for need, waiter, engine in self.waiting:
            if need <= self.available:
                self.available -= need
                engine.submit(waiter)
            else:
                still.append((need, waiter, engine))
        self.waiting = still


class Handoff:
    """One request between its pools: its prefill-side seq and instance, what the decode side reads, and the phase
    times (seconds of the simulated clock)."""

    __slots__ = ("prefill", "engine", "decode", "end", "done_prefill", "submitted", "transfer_start", "transfer_end",
                 "pushed")

    def __init__(self, prefill: Seq, engine: Engine, decode: int, end: int, now: float):
        self.prefill, self.engine, self.decode, self.end = prefill, engine, decode, end
        self.done_prefill = now
        self.submitted = self.transfer_start = self.transfer_end = -1.0
        self.pushed = False


class Pools:
    """The prefill and decode pools of a simulation (`Simulation._build` makes them for a spec with
    serving.disaggregation), the proxy between them (its `deliver`, `submit`, `forget` stand for the router's) and the
    KV transfers: the decode engines' `RemoteKV` (see the module docstring). The run, its ledger and its result stay
    `Simulation`'s; it is told when a request has finished (`finished`)."""

    def __init__(self, sim: "Simulation", r: "Resolved"):
        d = r.disaggregation
        assert d is not None
        self.sim, self.d = sim, d
        p, dec = d.prefill, d.decode
        self.env = env = sim.env
        self.request_overhead = sim.request_overhead
        self.fabric = Fabric(env, p)             # the prefill pool's PCIe, NVMe and Ceph paths
        self.hbm = [PrefixCache(p.hbm_blocks) for _ in range(p.instances)] + \
                   [PrefixCache(dec.hbm_blocks) for _ in range(dec.instances)]
        self.lmcache = LMCacheModel(env, p, self.fabric) if p.lmcache else None
        self.originals: dict[int, "Request"] = {}   # request id -> the request as the client sent it, until it ends
        self.buffer = Buffer(d.buffer_slots, d.buffer_chunk_tokens) if d.connector == "lmcache" else None
        self.prefills = [Engine(p, i, env, self.hbm[i], self.lmcache, StepTime(p), self.prefilled)
                         for i in range(p.instances)]
        self.decodes = [Engine(dec, p.instances + j, env, self.hbm[p.instances + j], None, StepTime(dec), self.decoded)
                        for j in range(dec.instances)]
        for engine in self.prefills:
            engine.hold_finished = True          # vLLM's delay_free_blocks (nixl); until the push is done (lmcache)
        for engine in self.decodes:
            engine.remote = self
        self.engines: list[Engine] = [*self.prefills, *self.decodes]
        self.pick = Router(d.proxy, self.prefills, p.block_size, p.router_thresholds, None, sim.seed)
        self._decode_turn = count()
        net = d.network
        self.send = [Link(env, f"kv-tx/prefill{i}", net.bandwidth) for i in range(p.instances)]
        self.recv = [Link(env, f"kv-rx/decode{j}", net.bandwidth) for j in range(dec.instances)]
        self.pending: dict[int, Handoff] = {}    # id(decode seq) -> its handoff, until the decode side admits it
        self.handoffs: dict[int, Handoff] = {}   # request id -> its handoff, until it finishes
        self.phases = {name: array("d") for name in DisaggResult.PHASES}
        self.transfers = 0
        self.transfer_bytes = 0

    def finished(self, instance: int, seq: Seq, now: float) -> None:
        self.sim.finished(instance, seq, now)

    # ---- the proxy
    def deliver(self, env, requests, offset: float) -> Steps:
        """The arrivals, as one process (the router's `deliver`): each request to the proxy at its time."""
        for req in requests:
            delay = req.arrival + offset - env.now
            if delay > 0:
                yield env.timeout(delay)
            self.submit(req)

    def submit(self, req: "Request") -> None:
        """The proxy's prefill request (max_tokens=1) to the prefill instance it picks; with LMCache's proxy, once its
        chunks have room in the decode buffer."""
        engine = self.prefills[self.pick.pick(req)]
        self.originals[req.id] = req
        prefill = req._replace(output_tokens=1)
        if self.buffer is not None:
            self.buffer.acquire(prefill, engine)
        else:
            engine.submit(prefill)

    def forget(self) -> None:
        self.pick.forget()

    # ---- the prefill side
    def prefilled(self, instance: int, seq: Seq, now: float) -> None:
        """A prefill instance computed `seq`'s prompt and sampled its one token."""
        engine = self.prefills[instance]
        if not seq.record:                       # a warm-up: nothing goes on to a decode instance
            engine.release(seq)
            self.finished(instance, seq, now)
            return
        req = seq.req
        lmcache = self.d.connector == "lmcache"
        handoff = Handoff(seq, engine, next(self._decode_turn) % len(self.decodes), req.prompt_tokens, now)
        self.handoffs[req.id] = handoff
        if lmcache:
            self.env.process(self._push(handoff))
        else:
            self.env.process(self._hand_over(handoff))

    def _push(self, handoff: Handoff) -> Steps:
        """LMCache's PD sender: the KV to the decode instance's receive buffer, then the prefill response."""
        handoff.transfer_start = self.env.now
        yield from self._transfer(handoff.engine.index, handoff.decode, handoff.end)
        handoff.transfer_end = self.env.now
        handoff.pushed = True
        self.sent(handoff)
        assert self.buffer is not None
        self.buffer.release(handoff.prefill.req)
        yield from self._hand_over(handoff)

    def _hand_over(self, handoff: Handoff) -> Steps:
        """The prefill response back to the proxy (an HTTP leg), then the request to its decode instance: the
        client's (nixl), or (lmcache) the prompt and the prefill's token with max_tokens one less, the prefill's token
        streamed to the client now (a one-token request ends here)."""
        yield self.env.timeout(self.request_overhead)
        handoff.submitted = self.env.now
        req = self.originals[handoff.prefill.req.id]
        if handoff.pushed:
            if req.output_tokens == 1:           # the prefill's token is the whole answer: no decode leg
                self._record(handoff, handoff.prefill, self.env.now, handoff.engine.index)
                return
            req = req._replace(prompt_tokens=req.prompt_tokens + 1, output_tokens=req.output_tokens - 1)
        engine = self.decodes[handoff.decode]
        engine.submit(req)
        self.pending[id(engine.waiting[-1])] = handoff

    def sent(self, handoff: Handoff) -> None:
        """The prefill instance may free the request's blocks (its KV has been read or pushed, or is not needed)."""
        if handoff.prefill.holding.blocks:
            handoff.engine.release(handoff.prefill)

    # ---- the decode side's RemoteKV (kvplan.sim.engine)
    def claim(self, seq: Seq) -> int:
        handoff = self.pending.get(id(seq))
        return handoff.end if handoff is not None else -1

    def skip(self, seq: Seq) -> None:
        self.sent(self.pending.pop(id(seq)))

    def receive(self, seq: Seq, instance: int, local: int, end: int) -> Steps:
        """A process: the decode side receives tokens [local, end) of the prompt (nixl: reads them from the prefill
        instance's GPU; lmcache: copies them out of its receive buffer)."""
        handoff = self.pending.pop(id(seq))
        index = instance
        tokens = end - local
        if handoff.pushed:
            nbytes = tokens * self.d.decode_bytes_per_token_per_port
            yield self.env.timeout(nbytes / self.d.buffer_copy_bandwidth)
            return
        handoff.transfer_start = self.env.now
        yield from self._transfer(handoff.engine.index, index - len(self.prefills), tokens)
        handoff.transfer_end = self.env.now
        self.sent(handoff)

    def _transfer(self, prefill: int, decode: int, tokens: int) -> Steps:
        """`tokens` of KV from prefill instance `prefill` to decode instance `decode`: every rank over its own port at
        once, after the NIC's latency."""
        d = self.d
        yield self.env.timeout(d.network.latency)
        send, recv = tokens * d.prefill_bytes_per_token_per_port, tokens * d.decode_bytes_per_token_per_port
        yield from served(self.env, (self.send[prefill].transfer(send), self.recv[decode].transfer(recv)))
        self.transfers += 1
        self.transfer_bytes += recv * d.decode.tensor_parallel

    # ---- the decode side
    def decoded(self, instance: int, seq: Seq, now: float) -> None:
        """A decode instance emitted the request's last token."""
        if not seq.record:
            self.finished(instance, seq, now)
            return
        self._record(self.handoffs[seq.req.id], seq, now, instance)

    def _record(self, h: Handoff, seq: Seq, now: float, instance: int) -> None:
        """The request's row, as the client sees it (its first token: the decode instance's, or with lmcache the
        prefill's, streamed by the proxy), with where its prompt's KV came from and how long it queued as the prefill
        side saw it; and its phases. Before the client's first token: prefill_queue + prefill + handoff + transfer
        (+ decode_queue + first_step with nixl) = TTFT less the decode leg's request_overhead."""
        self.handoffs.pop(seq.req.id)
        p = h.prefill
        decoded = seq is not p
        admitted = seq.admitted if decoded else h.submitted     # its first admission on the decode side
        first = seq.first_token if decoded else h.submitted
        moved = h.transfer_end - h.transfer_start if h.transfer_end >= 0 else 0.0
        if h.pushed:                             # lmcache: pushed before the prefill response
            handoff = h.submitted - h.transfer_end
        else:                                    # nixl: read once the decode side admitted it
            handoff = h.submitted - h.done_prefill
        received = h.transfer_end if h.transfer_end >= 0 and not h.pushed else admitted
        req = self.originals.pop(seq.req.id)
        arrival = req.arrival + self.sim.offset
        for name, value in (("prefill_queue", p.admitted - arrival), ("prefill", h.done_prefill - p.admitted),
                            ("handoff", handoff), ("transfer", moved), ("decode_queue", admitted - h.submitted),
                            ("first_step", first - received)):
            self.phases[name].append(value)
        seq.req = req                            # the client's request: its lengths in the row
        if h.pushed:
            seq.first_token = h.submitted        # the proxy streamed the prefill's token
        seq.hbm_tokens, seq.tiers, seq.load_wait = p.hbm_tokens, p.tiers, p.load_wait
        seq.admitted = p.admitted                # the queue column: arrival to first scheduled, as aggregated
        if decoded:
            seq.preemptions += p.preemptions
        req.content.forget()
        self.finished(instance, seq, now)

    # ---- the result
    def links(self) -> list[Link]:
        return [*self.send, *self.recv]

    def result(self, span: float) -> DisaggResult:
        """The phases and the transfers' totals of a run whose links worked for `span` seconds."""
        d = self.d
        return DisaggResult(
            connector=d.connector, prefill_instances=len(self.prefills), decode_instances=len(self.decodes),
            transfers=self.transfers, transfer_bytes=self.transfer_bytes,
            send_utilisation=[link.utilisation(span) for link in self.send],
            receive_utilisation=[link.utilisation(span) for link in self.recv],
            **{name: summary(values) for name, values in self.phases.items()})
