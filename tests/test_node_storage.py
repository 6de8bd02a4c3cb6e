"""The node's storage as it is built: the nvme tier on the node's drives, and the ddr tier in its host memory.

A node's NVMe tier is `drives` drives of one class (catalog or inline), either striped into one volume (raid0: one
device of drives x bandwidth and IOPS) or one directory per drive (per_drive: in-process LMCache puts rank r on
drive r % drives). The ddr tier must fit in the node's RAM.
"""

from __future__ import annotations

import pytest

from kvplan.catalog import load_catalog
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.spec import from_mapping

from conftest import spec

pytestmark = pytest.mark.unit

PATHS4 = [f"/mnt/nvme{i}/lmcache" for i in range(4)]
SLOW = {"name": "slow", "read_bandwidth": "50MB/s", "write_bandwidth": "50MB/s", "read_iops": 1000,
        "write_iops": 1000, "read_latency": "100us", "write_latency": "100us"}
"""An inline drive slow enough that a few requests a second keep it busy."""

TOY = {"name": "toy", "attention": "mha", "num_layers": 1, "hidden_size": 256, "num_attention_heads": 4,
       "num_kv_heads": 4, "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000, "params": 1e6,
       "max_context": 131072}


def problems(exc: pytest.ExceptionInfo[SpecError]) -> dict[str, str]:
    return {p.path: f"{p.message} | {p.fix}" for p in exc.value.problems}


def toy(nvme: dict, *, tp: int = 1, rate: str = "9/s") -> dict:
    """One node of 8 GPUs, a one-layer model, a 16 MiB ddr tier over the nvme tier: the NVMe does the work."""
    return {"name": "toy", "model": TOY,
            "serving": {"gpu": "H100-SXM", "gpus_per_node": 8, "instances": 8 // tp, "tensor_parallel": tp,
                        "block_size": 16, "kv_cache_memory": "4MiB", "max_model_len": 4096},
            "lmcache": {"mode": "inprocess", "chunk_size": 256, "ddr": {"size": "16MiB"},
                        "nvme": {"size": "1GiB", "device": SLOW, **nvme}},
            "workload": {"kind": "chat", "seed": 1, "requests": 150, "arrivals": {"process": "poisson", "session_rate": rate},
                         "sessions": {"turns": 3, "think_time": "1s"},
                         "shared_prefixes": {"count": 4, "skew": 1.0, "tokens": 1024},
                         "prompt": {"dist": "uniform", "min": 512, "max": 2048}, "output": 8}}


def nvme_busy(data: dict) -> dict[str, float]:
    res = run(resolve(from_mapping(data)), seed=0)
    return {link.name: link.utilisation for link in res.links if link.name.startswith("nvme/")}


# ---------------------------------------------------------------------------------------------- the spec

def test_a_striped_volume_of_eight_drives_is_one_device_eight_times_one_drive():
    r = resolve(spec("codegen-70b", lmcache__nvme__drives=8))
    gen5 = load_catalog().nvme["gen5"]
    nv = r.nvme
    assert (nv.drives, nv.layout, nv.devices_per_node, nv.paths) == (8, "raid0", 1, ["/mnt/nvme0/lmcache"])
    assert (nv.device.read_bandwidth, nv.device.write_bandwidth) == (8 * gen5.read_bandwidth, 8 * gen5.write_bandwidth)
    assert (nv.device.read_iops, nv.device.write_iops) == (8 * gen5.read_iops, 8 * gen5.write_iops)
    assert (nv.device.read_latency, nv.device.write_latency) == (gen5.read_latency, gen5.write_latency)
    assert nv.drive.name == "gen5" and nv.device.name == "gen5 x8 raid0"


def test_one_drive_is_the_catalog_class_as_it_was():
    r = resolve(spec("codegen-70b"))
    gen5 = load_catalog().nvme["gen5"]
    assert r.nvme.drives == 1 and r.nvme.device.read_bandwidth == gen5.read_bandwidth
    assert r.nvme.device.read_iops == gen5.read_iops


def test_an_inline_drive_class_is_used_as_written():
    drive = {"name": "pm1733", "read_bandwidth": "7GB/s", "write_bandwidth": "3.8GB/s", "read_iops": 1_500_000,
             "write_iops": 135_000, "read_latency": "90us", "write_latency": "25us"}
    r = resolve(spec("codegen-70b", lmcache__nvme__device=drive, lmcache__nvme__drives=4))
    assert r.nvme.drive.name == "pm1733"
    assert (r.nvme.device.read_bandwidth, r.nvme.device.write_iops) == (28e9, 540_000)
    assert r.nvme.device.read_latency == pytest.approx(90e-6)


def test_an_unknown_drive_name_is_refused_with_the_catalog_names():
    with pytest.raises(SpecError) as exc:
        resolve(spec("codegen-70b", lmcache__nvme__device="pm1733-raid0x8"))
    assert "unknown NVMe class 'pm1733-raid0x8'" in problems(exc)["lmcache.nvme.device"]


def test_per_drive_gives_each_storing_rank_its_drive():
    r = resolve(spec("chat-llama2-13b", serving__gpus_per_node=4, serving__tensor_parallel=4,
                     lmcache__nvme={"size": "1TB", "drives": 2, "layout": "per_drive", "paths": PATHS4[:2]}))
    assert (r.nvme.devices_per_node, r.nvme.rank_device, r.nvme.paths) == (2, [0, 1, 0, 1], PATHS4[:2])
    assert r.nvme.device == r.nvme.drive                                  # each device is one drive
    assert r.lmcache.nvme_paths == PATHS4[:2]


@pytest.mark.parametrize("nvme, field, says", [
    ({"drives": 2, "layout": "per_drive", "paths": PATHS4[:1]}, "lmcache.nvme", "one directory per drive"),
    ({"drives": 2, "layout": "per_drive", "paths": [PATHS4[0], PATHS4[0]]}, "lmcache.nvme", "different directory"),
    ({"drives": 2, "paths": PATHS4[:2]}, "lmcache.nvme", "paths is for layout: per_drive"),
    ({"drives": 0}, "lmcache.nvme.drives", "greater than or equal to 1"),
    ({"layout": "mirror"}, "lmcache.nvme.layout", "not one of the allowed values"),
])
def test_a_layout_that_does_not_match_its_drives_is_refused(nvme, field, says):
    with pytest.raises(SpecError) as exc:
        spec("chat-llama2-13b", lmcache__nvme={"size": "1TB", **nvme})
    found = problems(exc)
    assert says in found.get(field, ""), found


def test_per_drive_with_more_drives_than_storing_ranks_is_refused():
    with pytest.raises(SpecError) as exc:       # TP 1: every instance's rank 0 would use drive 0 only
        resolve(spec("chat-llama2-13b", lmcache__nvme={"size": "1TB", "drives": 4, "layout": "per_drive",
                                                       "paths": PATHS4}))
    found = problems(exc)["lmcache.nvme.drives"]
    assert "never be written" in found and "layout: raid0" in found


def test_per_drive_in_mp_mode_is_refused_because_the_server_copies_to_every_adapter():
    with pytest.raises(SpecError) as exc:
        spec("codegen-70b", lmcache__nvme={"size": "1TB", "drives": 2, "layout": "per_drive", "paths": PATHS4[:2]})
    found = problems(exc)["lmcache.nvme.layout"]
    assert "every L2 adapter" in found and "layout: raid0" in found and "built by you" in found


# ---------------------------------------------------------------------------------------------- host memory

def test_a_ddr_tier_larger_than_a_dgx_h100s_memory_is_refused():
    with pytest.raises(SpecError) as exc:       # MP: the server's L1 is the node's ddr size
        resolve(spec("codegen-70b", lmcache__ddr__size="3TB"))
    found = problems(exc)["lmcache.ddr.size"]
    assert "2.0 TB" in found or "1.8 TiB" in found, found
    assert "H100-SXM reference server" in found and "lower the ddr tier" in found


def test_the_spec_says_how_much_memory_its_nodes_have():
    r = resolve(spec("codegen-70b", lmcache__ddr__size="3TB", serving__host_memory="4TB"))
    assert (r.host_memory.bytes, r.host_memory.source) == (4e12, "serving.host_memory")
    assert r.host_memory.pinned_bytes == 3e12
    with pytest.raises(SpecError) as exc:
        resolve(spec("codegen-70b", serving__host_memory="256GiB"))     # 512 GiB of ddr
    assert "serving.host_memory" in problems(exc)["lmcache.ddr.size"]


def test_inprocess_ddr_counts_every_rank_on_the_node():
    r = resolve(spec("chat-llama2-13b", serving__gpu="H100-SXM", serving__gpus_per_node=4, serving__instances=4))
    ddr = r.lmcache.tier("ddr")
    assert r.host_memory.pinned_bytes == round(ddr.configured_gb * 2**30) * 4       # 4 ranks share the node's 64 GB
    assert r.host_memory.pinned_bytes <= 64e9


@pytest.mark.parametrize("gpu, memory", [("H100-SXM", 2e12), ("H100-PCIe", 2e12), ("H200", 2e12), ("A100-80GB", 2e12),
                                         ("B200", 1.8e12)])
def test_each_eight_gpu_server_class_has_its_cited_host_memory(gpu, memory):
    """DGX H100 from NVIDIA's user guide; the others from MLPerf Inference system descriptions (models/hardware)."""
    assert load_catalog().devices[gpu].node_host_memory == memory
    r = resolve(spec("chat-llama2-13b", serving__gpu=gpu))
    assert (r.host_memory.bytes, r.host_memory.source) == (memory, f"the catalog's {gpu} reference server")


def test_without_a_figure_for_the_node_nothing_is_checked():
    assert resolve(spec("chat-llama2-13b", serving__gpu="L40S")).host_memory is None   # no reference server cited


def test_a_tier_larger_than_the_nodes_drives_is_refused():
    """The catalog's gen4 class is Samsung's PM9A3 family, whose largest drive holds 7.68 TB: 8 TB needs two."""
    with pytest.raises(SpecError) as exc:
        resolve(spec("codegen-70b", lmcache__nvme__size="8TB", lmcache__nvme__device="gen4"))
    found = problems(exc)["lmcache.nvme.size"]
    assert "1 drive(s) of at most 7.0 TiB (the largest gen4 drive in the catalog)" in found, found
    assert "lmcache.nvme.drives" in found
    r = resolve(spec("codegen-70b", lmcache__nvme__size="8TB", lmcache__nvme__device="gen4", lmcache__nvme__drives=4,
                     lmcache__nvme__layout="raid0", lmcache__nvme__path="/raid/lmcache"))
    assert r.nvme.drives == 4


def test_an_inline_drive_without_a_capacity_is_not_checked_and_one_with_it_is():
    roomy = {**SLOW, "capacity": "15.36TB"}
    assert resolve(from_mapping(toy({"size": "10TB", "device": roomy}))).nvme.drive.capacity == 15.36e12
    assert resolve(from_mapping(toy({"size": "10TB"}))).nvme.drive.capacity is None
    with pytest.raises(SpecError) as exc:
        resolve(from_mapping(toy({"size": "20TB", "device": roomy})))
    assert "the inline drive slow's capacity" in problems(exc)["lmcache.nvme.size"]


# ---------------------------------------------------------------------------------------------- the simulation

def test_eight_striped_drives_take_an_eighth_of_the_load_of_one():
    one = nvme_busy(toy({}))
    eight = nvme_busy(toy({"drives": 8}))
    assert list(one) == list(eight) == ["nvme/0"]
    assert 0.2 < one["nvme/0"] < 0.9                  # busy, but not saturated: the queue has not changed the load
    assert one["nvme/0"] / eight["nvme/0"] == pytest.approx(8, rel=0.2)


def test_per_drive_spreads_each_instances_ranks_over_the_drives():
    one = nvme_busy(toy({}, tp=4))
    four = nvme_busy(toy({"drives": 4, "layout": "per_drive", "paths": PATHS4}, tp=4))
    assert list(four) == ["nvme/0.0", "nvme/0.1", "nvme/0.2", "nvme/0.3"]
    assert max(four.values()) == pytest.approx(min(four.values()))    # every rank's objects are alike
    assert one["nvme/0"] / four["nvme/0.0"] == pytest.approx(4, rel=0.2)


# ---------------------------------------------------------------------------------------------- the deployment

def test_the_deploy_checks_that_several_drives_are_mounted_and_one_drive_is_left_as_it_was():
    from kvplan.deploy.stack import build

    def lmcache_vars(**changes):
        r = resolve(spec("codegen-70b", **changes))
        return build(r, [f"gpu-{i}" for i in range(r.nodes)], ["ceph-1"]).lmcache

    one, eight = lmcache_vars(), lmcache_vars(lmcache__nvme__drives=8)
    assert (one.lmcache_nvme_paths, one.lmcache_nvme_own_volume) == (["/mnt/nvme0/lmcache"], False)
    assert (eight.lmcache_nvme_paths, eight.lmcache_nvme_own_volume) == (["/mnt/nvme0/lmcache"], True)
    assert eight.lmcache_server_args == one.lmcache_server_args     # LMCache sees the same one directory


def test_helm_mounts_every_drives_directory_and_tells_lmcache_to_shard_by_gpu():
    from kvplan.deploy.helm import values

    r = resolve(spec("chat-llama2-13b", lmcache__ceph=None, ceph=None, lmcache__warmup=None, serving__router="round_robin",
                     serving__gpus_per_node=2, serving__tensor_parallel=2,
                     lmcache__nvme={"size": "1TB", "drives": 2, "layout": "per_drive", "paths": PATHS4[:2]}))
    model = values(r, 8, "256Gi")["servingEngineSpec"]["modelSpec"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in model["env"]}
    assert env["LMCACHE_LOCAL_DISK"] == "file:///mnt/nvme0/lmcache/,file:///mnt/nvme1/lmcache/"
    assert env["LMCACHE_LOCAL_DISK_PATH_SHARDING"] == "by_gpu"
    assert [v["hostPath"]["path"] for v in model["extraVolumes"]] == PATHS4[:2]
    assert [m["mountPath"] for m in model["extraVolumeMounts"]] == PATHS4[:2]
    # each pod in a directory of its own on every drive (the pod's name, from the downward API)
    assert env["KVPLAN_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert {m["subPathExpr"] for m in model["extraVolumeMounts"]} == {"$(KVPLAN_POD_NAME)"}
