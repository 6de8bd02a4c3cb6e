"""Price overrides: what this organisation really pays, in place of the catalog's list prices.

Unset fields fall back to models/prices.yaml, whose every entry cites its source and date.
"""

from __future__ import annotations

from pydantic import Field

from .base import SpecModel


class CostOverrides(SpecModel):
    gpu_hour: float | None = Field(None, ge=0)
    """USD per accelerator per hour."""

    ddr_gb_month: float | None = Field(None, ge=0)
    """USD per GB of host DRAM per month (amortised)."""

    nvme_gb_month: float | None = Field(None, ge=0)
    """USD per GB of NVMe per month (amortised)."""

    ceph_raw_gb_month: float | None = Field(None, ge=0)
    """USD per raw GB of Ceph OSD capacity per month (replication is counted separately)."""

    nic_port_month: float | None = Field(None, ge=0)
    """USD per storage-network port per month."""
