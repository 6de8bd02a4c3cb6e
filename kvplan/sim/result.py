"""SimResult: what one simulation run measured, as plain numbers (and its JSON form).

Hit ratios come in two weights. `token_hit_ratio` of a tier is the prompt tokens it served
divided by the prompt tokens that reached it (not served by a tier above); `chunk_hit_ratio` is
LMCache's own view, the chunks it held among the chunks it was asked about. `served_share` is a
tier's part of all prompt tokens, so the shares of hbm, ddr, nvme and ceph plus the recomputed
share add up to 1. Each counts a request once, at its first admission; the lookups of preempted
requests admitted again are reported apart (`relookup_*`, `relookups`). docs/simulator.md
("Ratios") defines every ratio in one table.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Iterator, NamedTuple, get_type_hints

import numpy as np
from pydantic import (BaseModel, ConfigDict, PlainSerializer, PlainValidator, SerializerFunctionWrapHandler,
                      WithJsonSchema, model_serializer)

from .steady import TierState, WarmTier


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TierResult(_Result):
    name: str
    caches: int
    capacity_bytes: int
    """All caches of the tier together."""
    served_tokens: int
    served_share: float
    token_hit_ratio: float
    lookup_chunks: int
    """Chunks requests' first lookups asked this tier about (0 for hbm)."""
    hit_chunks: int
    chunk_hit_ratio: float
    relookup_chunks: int
    """Chunks asked about again when preempted requests were re-admitted (not in lookup_chunks)."""
    relookup_hit_chunks: int
    relookup_chunk_hit_ratio: float
    bytes_read: int
    bytes_written: int
    stored_chunks: int
    refused_chunks: int
    promoted_chunks: int
    evictions: int
    evicted_bytes: int
    expired: int
    peak_used_bytes: int
    final_used_bytes: int
    occupancy: list[tuple[float, int]]
    """(time s, bytes held in all caches of the tier) samples."""


class LinkResult(_Result):
    name: str
    transfers: int
    work: float
    """Bytes moved (bandwidth links) or seconds of device time (NVMe, OSDs)."""
    utilisation: float


def _column(dtype: str):
    """A numpy column: 8 bytes a value in memory (a million requests fit easily), a list in JSON."""
    return Annotated[np.ndarray, PlainValidator(lambda v: np.asarray(v, dtype=dtype)),
                     PlainSerializer(lambda a: a.tolist(), return_type=list),
                     WithJsonSchema({"type": "array", "items": {"type": "number"}})]


Ints, Floats = _column("int64"), _column("float64")


class RequestRow(NamedTuple):
    id: int
    instance: int
    arrival: float
    prompt_tokens: int
    output_tokens: int
    hbm_tokens: int
    ddr_tokens: int
    nvme_tokens: int
    ceph_tokens: int
    recomputed_tokens: int
    queue: float
    """Seconds from arrival to first being scheduled."""
    load: float
    """Seconds of its prefill steps spent waiting for synchronous LMCache retrieves (its own or a batch
    mate's: a step's forward pass waits for every load it admitted)."""
    ttft: float
    """Seconds from arrival to the first output token."""
    tpot: float
    """Mean seconds per output token after the first."""
    e2e: float
    """Seconds from arrival to the last output token."""
    preemptions: int


FLOAT_COLUMNS = frozenset(name for name, tp in get_type_hints(RequestRow).items() if tp is float)


class RequestTable(_Result):
    """One row per request, stored by column (`rows()` or `table[i]` give RequestRow tuples)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    id: Ints
    instance: Ints
    arrival: Floats
    prompt_tokens: Ints
    output_tokens: Ints
    hbm_tokens: Ints
    ddr_tokens: Ints
    nvme_tokens: Ints
    ceph_tokens: Ints
    recomputed_tokens: Ints
    queue: Floats
    load: Floats
    ttft: Floats
    tpot: Floats
    e2e: Floats
    preemptions: Ints

    def __len__(self) -> int:
        return len(self.id)

    def __getitem__(self, i: int) -> RequestRow:
        return RequestRow(*(getattr(self, name)[i].item() for name in RequestRow._fields))

    def rows(self) -> Iterator[RequestRow]:
        columns = [getattr(self, name).tolist() for name in RequestRow._fields]
        return (RequestRow(*values) for values in zip(*columns))


class Summary(_Result):
    """A distribution over requests, in seconds."""

    mean: float
    p50: float
    p90: float
    p99: float


class SloCheck(_Result):
    key: str
    """e.g. ttft_p99."""
    target: float
    value: float
    met: bool


class StageResult(_Result):
    """One load stage of a run (workload.stages): the requests it sent and what they saw, wherever they finished (a
    request still in flight when the next stage starts is its own stage's)."""

    index: int
    """Its place in workload.stages, from 0."""
    load: str
    """Its load and end in words, e.g. 'rate 8/s poisson, 10.0 min'."""
    start: float
    """Seconds from the start of traffic to the stage's start."""
    end: float
    """Seconds from the start of traffic to its end: its duration passed or its last request sent (before any drain)."""
    requests: int
    rejected_requests: int
    duration: float
    """Seconds from its first request's arrival to its last request's completion (inference-perf's per-stage
    span: throughput is requests over it)."""
    prompt_tokens: int
    generated_tokens: int
    recomputed_tokens: int
    ttft: Summary
    tpot: Summary
    e2e: Summary
    queue: Summary
    requests_per_s: float
    prompt_tokens_per_s: float
    generated_tokens_per_s: float
    goodput_per_s: float


class DisaggResult(_Result):
    """Where a disaggregated run's time went (kvplan.sim.disagg): per request, its phases, and the KV transfer's
    totals. nixl: all six add up to its TTFT less request_overhead; lmcache: prefill_queue, prefill, transfer and
    handoff do (the proxy streams the prefill's token), decode_queue and first_step come after."""

    PHASES: ClassVar[tuple[str, ...]] = ("prefill_queue", "prefill", "handoff", "transfer", "decode_queue",
                                         "first_step")

    connector: str
    prefill_instances: int
    decode_instances: int
    """engine_* lists of the result: the prefill instances first, then the decode instances."""
    transfers: int
    transfer_bytes: int
    """KV bytes the decode instances received over the network (all ranks)."""
    send_utilisation: list[float]
    """Per prefill instance, the share of the run its KV port was sending."""
    receive_utilisation: list[float]
    """Per decode instance, the share of the run its KV port was receiving."""
    prefill_queue: Summary
    """Arrival at the proxy to first scheduled on a prefill instance (lmcache: the wait for decode buffer room
    included)."""
    prefill: Summary
    """First scheduled to the prompt computed (its LMCache loads included) on the prefill instance."""
    handoff: Summary
    """The prefill response back to the proxy and the request on to the decode instance (the prefill leg's
    request_overhead)."""
    transfer: Summary
    """The KV over the network (nixl: the decode instance's read; lmcache: the prefill instance's push), NIC latency
    included; 0 for a request that needed none."""
    decode_queue: Summary
    """Handed to the decode instance to admitted there (blocks for it); 0 for a request without a decode leg."""
    first_step: Summary
    """The KV in (nixl) or admitted (lmcache: its copy out of the receive buffer) to the decode instance's first
    token: its next schedule point and the step that computes the last prompt token (lmcache: the prefill's token)."""


class SimResult(_Result):
    name: str
    spec_hash: str
    seed: int
    lmcache_mode: str | None
    requests: int
    warmup_requests: int
    rejected_requests: int
    """Requests vLLM would refuse (longer than max_model_len)."""
    duration: float
    """Simulated seconds from the first arrival to the last completion."""
    prompt_tokens: int
    recomputed_tokens: int
    preemptions: int
    ttft: Summary
    tpot: Summary
    e2e: Summary
    queue: Summary
    requests_per_s: float
    sessions_per_s: float | None = None
    """New sessions per second (sessions whose first turn finished, over the run): beside requests_per_s for a
    workload with sessions, whose every session brings several requests; None without sessions."""
    prompt_tokens_per_s: float
    generated_tokens_per_s: float
    goodput_per_s: float
    """Requests per second that met every SLO target on their own (ttft, tpot and e2e within the
    tightest target set for each)."""
    slo: list[SloCheck]
    block_utilisation: list[tuple[float, float]]
    """(time s, share of the HBM KV blocks held by running requests, averaged over instances)."""
    mean_block_utilisation: float
    engine_steps: list[int]
    """vLLM engine steps each instance ran."""
    engine_busy: list[float]
    """Share of the run each instance spent in steps (loading, computing, copying): near 1 whenever any
    request runs, so it says an instance is working, not that it is full (engine_occupancy)."""
    engine_occupancy: list[float]
    """Per instance, its steps' fullness averaged over the run: each step counts the fullest of its batch
    slots (max_num_seqs), token budget (max_num_batched_tokens) and HBM KV blocks, weighted by its time.
    Near 1, arrivals wait for a slot: the engines' load in plan's headroom."""
    engine_waited: list[float]
    """Per instance, the share of the run in steps that left a request waiting for admission (held by a full batch,
    a slow step or the next step boundary)."""
    engine_waiting_fullness: list[float]
    """Per instance, how full its batches were in those steps (engine_occupancy over them only; 0 when none).
    Near 1, requests waited because the batch was full; low, they waited for slow steps or a step boundary.
    engine_waited x this is the engines' load in the bottleneck verdict: the share of the run requests queued
    for a full batch (for a single queue, the chance an arrival waits is its utilisation)."""
    ceph_op_latency: Summary | None
    """One OSD op (a RADOS read or write of at most 4 MiB) from its arrival at the primary OSD to its
    reply, queueing and replication included, as Ceph's op_r_latency / op_w_latency count it; over
    all ops of the run."""
    ceph_op_latency_slowest_osd: float | None
    """Mean seconds of one op on the OSD whose ops were slowest: what the Ceph op latency alert watches."""
    alerts: list[str]
    """The design note's monitoring thresholds this run crossed."""
    lmcache_hit_ratio: float | None
    """The prefix LMCache held (whole chunks, any tier) over the prompt tokens it looked up, each
    request's first lookup only (docs/simulator.md, "Ratios"). With vLLM's native offloading instead: the
    chunks its CPU tier held beyond vLLM's own HBM hit over the prompt tokens (its lookup starts there)."""
    relookups: int
    """Lookups of preempted requests re-admitted for recomputation, counted apart from the ratios above."""
    relookup_hit_ratio: float | None
    """lmcache_hit_ratio of those re-lookups alone."""
    @property
    def offload_engine(self) -> str | None:
        """"lmcache", "native" (vLLM's native CPU offloading: a tier below HBM and no LMCache mode; the spec
        allows one engine) or None (HBM only)."""
        if self.lmcache_mode is not None:
            return "lmcache"
        return "native" if any(t.name != "hbm" for t in self.tiers) else None

    steady_state: list[TierState] = []
    """Per LMCache tier: whether the run was long enough for it to fill (kvplan.sim.steady)."""
    tiers: list[TierResult]
    links: list[LinkResult]
    stages: list[StageResult] = []
    """Per load stage, when the spec has workload.stages; absent from the JSON of a run without them."""
    warm_start: list[WarmTier] = []
    """Per offload tier, how a warm start's warm-up left it (kvplan.sim.warm); empty, and absent from the JSON,
    when the run started cold."""
    per_request: RequestTable
    disaggregation: DisaggResult | None = None
    """Prefill/decode phases and the KV transfer, for a disaggregated spec; absent from the JSON otherwise."""

    def tier(self, name: str) -> TierResult | None:
        return next((t for t in self.tiers if t.name == name), None)

    @model_serializer(mode="wrap")
    def _without_empty_stages(self, handler: SerializerFunctionWrapHandler) -> dict:
        """A run without stages serialises as it did before there were stages: no "stages" key."""
        data = handler(self)
        if not self.stages:
            data.pop("stages", None)
        if not self.warm_start:
            data.pop("warm_start", None)
        if self.disaggregation is None:
            data.pop("disaggregation", None)
        return data

    def fields(self) -> dict:
        """Its fields by name, as its JSON has them: `stages` only when the run has stages."""
        return {name: value for name, value in self
                if name not in ("stages", "warm_start", "disaggregation") or value}
