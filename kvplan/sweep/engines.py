"""`--vary offload.engine=lmcache,native`: the same host DRAM offered to either offload engine.

`offload.engine` is not a key of the spec: a spec chooses its engine by which section it has (`lmcache`, or
`serving.kv_offloading` for vLLM's native offloading; never both). Varying it rewrites the one into the other,
keeping the bytes of host memory:

- `native`: LMCache's ddr tier (per node) becomes vLLM's native CPU tier of each instance, the node's bytes
  split over the instances on it, with the ddr tier's policy when vLLM has it (LRU, ARC), else LRU. vLLM's
  native tier has no NVMe or Ceph below it in kvplan (vLLM 0.32's tiering spec is not modelled), so the
  lmcache section, and with it any nvme and ceph tier and the ceph cluster, is left out; `kvplan sweep` shows
  the runs side by side, so compare with `lmcache.nvme.size=0` and `lmcache.ceph.size=0` for a like-for-like
  pair.
- `lmcache`: vLLM's native tier becomes an LMCache ddr tier of the node's instances' bytes together, in
  process (LMCache inside each vLLM worker, the nearest to vLLM's own offloading) with LRU, or in MP mode
  where the native tier used ARC (in-process LMCache has no ARC).

A spec already on the named engine is left as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import Problem, SpecError
from ..resolve import resolve
from ..spec import from_mapping
from ..units import parse_size

PATH = "offload.engine"
ENGINES = ("lmcache", "native")


def apply_engine(data: dict, value: Any, base_dir: str | Path | None = None) -> dict:
    """A copy of the spec mapping `data` on offload engine `value` (see the module docstring); its relative paths
    are read from `base_dir`."""
    if value not in ENGINES:
        raise SpecError([Problem(f"--vary {PATH}", "names the offload engine", value, ", ".join(ENGINES),
                                 "write --vary offload.engine=lmcache,native")])
    data = {**data, "serving": dict(data.get("serving", {}))}
    serving, lm = data["serving"], data.get("lmcache")
    per_node = resolve(from_mapping(data, base_dir=base_dir)).instances_per_node
    if value == "native" and serving.get("kv_offloading") is None:
        ddr = (lm or {}).get("ddr")
        if not ddr:
            raise SpecError([Problem(f"--vary {PATH}", "native offloading takes its host memory from the spec's "
                                     "LMCache ddr tier, and this spec has none", "lmcache.ddr", None,
                                     "add lmcache.ddr (its size is per node), or write serving.kv_offloading")])
        policy = str(ddr.get("eviction", "LRU")).upper()
        serving["kv_offloading"] = {"size": parse_size(ddr["size"]) // per_node,
                                    "eviction": policy if policy in ("LRU", "ARC") else "LRU"}
        data.pop("lmcache", None)
        data.pop("ceph", None)
    elif value == "lmcache" and serving.get("kv_offloading") is not None:
        native = serving.pop("kv_offloading")
        arc = str(native.get("eviction", "LRU")).upper() == "ARC"
        data["lmcache"] = {"mode": "mp" if arc else "inprocess",
                           "ddr": {"size": parse_size(native["size"]) * per_node, "eviction": "ARC" if arc else "LRU"}}
    return data
