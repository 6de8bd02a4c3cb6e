"""Tier sizing (`kvplan size`): hit ratio against capacity for every tier, from one pass over the workload.

`stack` computes exact LRU stack distances of a reference stream; `view` builds the streams from
the spec's workload, turns them into each tier's curve, working set, 50/90/99 % points and costs,
and replays the tiers whose policy is not LRU.
"""

from .view import SizePoint, SizeResult, TierSize, size

__all__ = ["SizePoint", "SizeResult", "TierSize", "size"]
