"""vLLM's native KV offloading: a host-memory tier that vLLM itself keeps, beside LMCache as a second engine.

Read from vLLM 0.32.0 (the install kvplan's stack uses, /opt/kvplan/vllm-venv):

- `--kv-offloading-size GiB --kv-offloading-backend native` (vllm/config/cache.py `kv_offloading_size`,
  `kv_offloading_backend`; vllm/config/vllm.py `_post_init_kv_transfer_config`) is shorthand for
  `--kv-transfer-config` with the `OffloadingConnector` and `kv_connector_extra_config.cpu_bytes_to_use`: the
  host memory of one vLLM instance, all its tensor-parallel ranks together. kvplan renders the connector
  itself, so the exact bytes, the eviction policy and the chunk size reach vLLM (and `VLLM_USE_SIMPLE_KV_OFFLOAD`
  cannot swap the connector).
- The CPU tier (vllm/v1/kv_offload/cpu/spec.py `CPUOffloadingSpec`) holds `cpu_bytes_to_use // chunk bytes`
  chunks, a chunk being `blocks_per_chunk` vLLM blocks (`kv_connector_extra_config.block_size` in tokens, a
  multiple of --block-size; default one block: distributed/kv_transfer/kv_connector/v1/offloading/config.py),
  rounded up to the page size. It evicts by `eviction_policy`, "lru" (default) or "arc"
  (vllm/v1/kv_offload/cpu/policies/factory.py).
- vLLM 0.32 also ships a tiering spec (vllm/v1/kv_offload/tiering/: fs, obj, p2p secondary tiers behind the CPU
  one, `spec_name: TieringOffloadingSpec`); kvplan does not model or deploy it yet.

One KV connector runs per vLLM instance, so a spec chooses this engine or LMCache, not both (rules.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from ..units import Size
from .base import MAX_INT32, SpecModel

NATIVE_POLICIES = ("LRU", "ARC")
"""vLLM 0.32's built-in CPU cache policies (vllm/v1/kv_offload/cpu/policies/factory.py: "lru", "arc")."""


def _canonical_policy(value: Any) -> Any:
    """'lru' -> 'LRU', as LMCache's policies are matched."""
    if isinstance(value, str) and value.strip().upper() in NATIVE_POLICIES:
        return value.strip().upper()
    return value


NativePolicy = Annotated[Literal["LRU", "ARC"], BeforeValidator(_canonical_policy)]


class KvOffloading(SpecModel):
    """vLLM's native CPU offloading (OffloadingConnector): one host-memory tier per instance."""

    size: Size
    """Host memory for offloaded KV per vLLM instance, all its tensor-parallel ranks together
    (vLLM --kv-offloading-size / the connector's cpu_bytes_to_use), e.g. 64GiB."""

    eviction: NativePolicy = "LRU"
    """How the CPU tier evicts when full: LRU (vLLM's default) or ARC (the connector's eviction_policy)."""

    block_size: int | None = Field(None, ge=1, le=MAX_INT32)
    """Tokens per offloaded chunk, the unit vLLM stores, looks up and loads (the connector's block_size): a multiple
    of serving.block_size. Default: serving.block_size (one vLLM block per chunk, vLLM's default)."""
