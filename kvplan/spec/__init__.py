"""The topology spec: what users write, validated (see topology.py for the whole shape)."""

from .load import from_mapping, load, read_yaml
from .topology import Topology

__all__ = ["Topology", "from_mapping", "load", "read_yaml"]
