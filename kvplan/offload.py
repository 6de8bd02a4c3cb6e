"""vLLM's native CPU offloading resolved into numbers: chunks, their bytes, the tier's capacity.

vLLM 0.32.0's `CPUOffloadingSpec` (vllm/v1/kv_offload/cpu/spec.py) sizes the tier from the connector's
`cpu_bytes_to_use` (the whole instance: every tensor-parallel rank's share together):

    kv_bytes_per_block = worker_kv_bytes_per_block * copies   (copies: the world size, or 1 for MLA's
                                                              replicated layout, where every rank holds the same KV)
    kv_bytes_per_chunk = kv_bytes_per_block * blocks_per_chunk
    num_chunks         = cpu_bytes_to_use // round_up(kv_bytes_per_chunk, page size)

`blocks_per_chunk` is the connector's `block_size` (tokens) over vLLM's --block-size, 1 by default
(distributed/kv_transfer/kv_connector/v1/offloading/config.py). The page is `mmap.PAGESIZE` of the shared
region (cpu/shared_offload_region.py `BLOCK_SIZE_ALIGNMENT`), 4 KiB on x86-64 and most arm64 Linux hosts.

Transfers move each rank's slice over that rank's host link: the simulator times them on the catalog's PCIe
figure (`Resolved.pcie_bandwidth`), the same links LMCache's ddr tier uses (sim/fabric.py).
"""

from __future__ import annotations

from typing import Literal

from .errors import Problem
from .spec.base import SpecModel
from .spec.offload import KvOffloading
from .units import fmt_bytes

PAGE_BYTES = 4096
"""mmap.PAGESIZE on the hosts kvplan deploys to: vLLM pads each offloaded chunk to it."""


class ResolvedOffload(SpecModel):
    """vLLM's native CPU offloading of one instance, as the simulator runs it and the render configures it."""

    engine: Literal["native"] = "native"
    chunk_tokens: int
    """Tokens per offloaded chunk (the connector's block_size)."""
    blocks_per_chunk: int
    chunk_bytes_per_rank: int
    """Bytes one rank copies for one chunk (its slice of the KV)."""
    chunk_bytes: int
    """Host bytes one chunk takes: every copy, padded to the page."""
    capacity_bytes: int
    """cpu_bytes_to_use: host memory of the tier, per instance."""
    capacity_chunks: int
    capacity_tokens: int
    eviction: Literal["LRU", "ARC"]


def resolve_offload(n: KvOffloading, block_size: int, block_bytes_per_rank: int, copies: int, cpu_device: bool,
                    simulate_only: bool, problems: list[Problem]) -> ResolvedOffload:
    """The tier vLLM builds from serving.kv_offloading; problems get what vLLM would refuse."""
    tokens = n.block_size or block_size
    blocks = tokens // block_size
    per_rank = block_bytes_per_rank * blocks
    raw = per_rank * copies
    chunk = -(-raw // PAGE_BYTES) * PAGE_BYTES
    chunks = n.size // chunk
    if chunks < 1:
        problems.append(Problem("serving.kv_offloading.size", f"holds no whole chunk: one {tokens}-token chunk is "
                                f"{fmt_bytes(chunk)}", n.size, f">= {fmt_bytes(chunk)}",
                                "raise the size or lower serving.kv_offloading.block_size"))
    if cpu_device and not simulate_only:
        problems.append(Problem("serving.kv_offloading", "vLLM 0.32 offloads only from CUDA and XPU devices: on a CPU "
                                "device its arguments parse, but the offloading worker refuses to start "
                                "(vllm/v1/kv_offload/cpu/spec.py CPUOffloadingSpec.get_worker)", "set",
                                fix="use the lmcache section (mp mode runs on CPU hosts), or set simulate_only: true "
                                    "to study it in simulation only"))
    return ResolvedOffload(chunk_tokens=tokens, blocks_per_chunk=blocks, chunk_bytes_per_rank=per_rank,
                           chunk_bytes=chunk, capacity_bytes=n.size, capacity_chunks=chunks,
                           capacity_tokens=chunks * tokens, eviction=n.eviction)
