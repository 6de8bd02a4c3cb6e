"""Measured all-reduce times (microsoft/vidur's all_reduce.csv tables, kept under
models/profiles/vidur/network/<setup>.csv) and the step-time model's all-reduce term fitted to them.

The model charges one all-reduce of S bytes on TP ranks as a ring over one direction of the link:

    time = allreduce_latency + 2 (TP - 1) / TP x S / (link bandwidth x allreduce_efficiency)

allreduce_efficiency is fitted to the large messages (16 MiB and more, where the fixed latency is
under a tenth of the time): each gives the efficiency that reproduces it, and the fit is their
median over every TP degree the setup measured. The latency the tables show for small messages
is NCCL's (tens of microseconds at TP 4 and 8); vLLM sends decode-size messages through its own
custom all-reduce instead, so allreduce_latency stays the catalog's cited figure for that kernel.

Which table stands for which GPU is in SETUPS: A100's `a100_dgx` table is 5-50x slower than its
NVLink allows at every size (a PCIe-bound or shared node, by the numbers), so A100 uses the
`a100_pairwise_nvlink` table, whose TP 2 pairs are NVLink-connected.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass

import numpy as np

from ..catalog import Device
from ..step_coefficients import allreduce_link
from .operators import root

LARGE = 16 << 20
SETUPS = {"A100-80GB": ("a100_pairwise_nvlink", (2,)), "H100-SXM": ("h100_dgx", (2, 4, 8))}
"""GPU -> (table, the TP degrees in it that run over NVLink)."""


@dataclass(frozen=True)
class AllReducePoint:
    tp: int
    size: int
    """Bytes."""
    seconds: float


def points(setup: str, tps: tuple[int, ...]) -> list[AllReducePoint]:
    with (root() / "network" / f"{setup}.csv").open() as f:
        return [AllReducePoint(int(r["num_workers"]), int(r["size_bytes"]), float(r["all_reduce_ms"]) * 1e-3)
                for r in csv.DictReader(f) if int(r["num_workers"]) in tps]


def ring_seconds(p: AllReducePoint, link: float, latency: float, efficiency: float) -> float:
    return latency + 2.0 * (p.tp - 1) / p.tp * p.size / (link * efficiency)


def fit(pts: list[AllReducePoint], device: Device, latency: float) -> float:
    """allreduce_efficiency: the median over large messages of the efficiency that reproduces each."""
    big = [p for p in pts if p.size >= LARGE]
    eff = [2.0 * (p.tp - 1) / p.tp * p.size / (allreduce_link(device) * (p.seconds - latency)) for p in big]
    return round(float(np.median(eff)), 3)
