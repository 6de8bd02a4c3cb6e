"""Topology: the whole spec a user writes in topo.yaml, validated and frozen.

A Topology is valid on its own (units, types, rules of the real stack); `kvplan.resolve`
then checks it against the catalog and derives every number the simulator and the deployer use.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Discriminator, Field, Tag, model_validator

from .architecture import Architecture
from ..errors import SpecError
from . import rules
from .base import SpecModel
from .ceph import Ceph
from .cost import CostOverrides
from .lmcache import LMCache
from .serving import Serving
from .slo import Monitoring, Slo
from .workload import Workload


def _model_kind(value: Any) -> str:
    return "inline" if isinstance(value, dict) or isinstance(value, Architecture) else "name"


ModelRef = Annotated[Union[Annotated[str, Tag("name")], Annotated[Architecture, Tag("inline")]],
                     Discriminator(_model_kind)]


class Topology(SpecModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    """Name of this deployment (letters, digits, '.', '_', '-'; used in file and service names)."""

    description: str = ""
    """Free text."""

    simulate_only: bool = False
    """Allow settings only the simulator can honour (e.g. LFU+TTL on ddr); kvplan render refuses such a spec."""

    model: ModelRef
    """The LLM: a catalog name (`kvplan catalog`) or an inline architecture (same keys as models/llm/*.yaml)."""

    serving: Serving
    """vLLM instances and engine settings."""

    lmcache: LMCache | None = None
    """KV offload tiers below HBM; absent means vLLM alone (HBM only)."""

    ceph: Ceph | None = None
    """The Ceph cluster behind lmcache.ceph."""

    workload: Workload
    """Traffic to simulate."""

    slo: Slo = Slo()
    """Latency targets."""

    cost: CostOverrides = CostOverrides()
    """Price overrides."""

    monitoring: Monitoring = Monitoring()
    """Alert thresholds."""

    @model_validator(mode="after")
    def _stack_rules(self) -> "Topology":
        problems = rules.check(self)
        if problems:
            raise SpecError(problems)
        return self

    def simulation_only_settings(self) -> list:
        """The Problems `validate` would report for this spec without simulate_only: what it sets that the real stack
        cannot honour (empty when nothing is)."""
        return rules.check(self.model_copy(update={"simulate_only": False}))

    def spec_hash(self) -> str:
        """sha256 of the canonical JSON of this spec (its identity in rendered files and caches)."""
        import hashlib

        # fields that came after many specs were hashed (serving.kv_offloading, serving.host_memory,
        # serving.api_key_env, serving.disaggregation, the nvme tier's drives, ceph.allow_no_auth): a spec that leaves
        # them at their defaults keeps the hash it had
        serving = {name for name in ("kv_offloading", "host_memory", "api_key_env", "disaggregation")
                   if getattr(self.serving, name) is None}
        unset: dict = {"serving": serving} if serving else {}
        nvme = self.lmcache.nvme if self.lmcache is not None else None
        if nvme is not None and nvme.drives == 1 and nvme.layout == "raid0" and not nvme.paths:
            unset["lmcache"] = {"nvme": {"drives", "layout", "paths"}}
        if self.ceph is not None and not self.ceph.allow_no_auth:
            unset["ceph"] = {"allow_no_auth"}
        return hashlib.sha256(self.model_dump_json(exclude=unset or None).encode()).hexdigest()
