"""The cost model by hand: a small deployment whose bill can be added up on paper.

Two H100s (two instances of TP 1, one GPU per node, so two nodes), each node with 10 GB of DRAM
and 100 GB of gen4 NVMe for LMCache, and an owned three-host Ceph cluster of six 1 TB NVMe OSDs
on 25GbE. Prices are models/prices.yaml's; monthly ones are divided by 730 hours.
"""

from __future__ import annotations

import pytest

from kvplan.cost import HOURS_PER_MONTH, cost_of, per_million
from kvplan.resolve import resolve
from kvplan.sim.result import SimResult
from kvplan.spec import from_mapping

TOY = {"name": "toy", "attention": "mha", "num_layers": 1, "hidden_size": 64, "num_attention_heads": 1,
       "num_kv_heads": 1, "head_dim": 64, "intermediate_size": 128, "vocab_size": 1000, "params": 1e6,
       "max_context": 4096}


def toy(**over):
    spec = {"name": "toy", "model": TOY,
            "serving": {"gpu": "H100-SXM", "gpus_per_node": 1, "instances": 2, "kv_cache_memory": "1GiB"},
            "lmcache": {"mode": "mp", "ddr": {"size": "10GB"}, "nvme": {"size": "100GB", "device": "gen4"},
                        "ceph": {"size": "1TB", "eviction": "LRU"}},
            "ceph": {"deploy": "cephadm", "hosts": 3, "osds_per_host": 2, "osd_size": "1TB", "device_class": "nvme",
                     "network": "25GbE", "pool": {"size": 3, "min_size": 2}},
            "workload": {"kind": "chat", "requests": 10}}
    for key, value in over.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    topo = from_mapping(spec)
    return topo, resolve(topo)


def test_each_tier_is_priced_from_the_catalog_and_adds_up():
    cost = cost_of(*toy())
    month = HOURS_PER_MONTH
    expected = {
        "hbm": 2 * 6.88,                           # 2 GPUs x p5 on-demand per GPU-hour
        "ddr": 2 * 10 * 0.1953 / month,            # 2 nodes x 10 GB x DDR5 $/GB-month
        "nvme": 2 * 100 * 0.002778 / month,        # 2 nodes x 100 GB x gen4 $/GB-month
        "ceph": 6 * 1000 * 0.002778 / month,       # 6 OSDs x 1,000 GB raw x NVMe $/GB-month
        "network": (2 + 3) * 4.861 / month,        # a 25GbE port per GPU node and per Ceph host
    }
    assert {t.tier: t.usd_per_hour for t in cost.tiers} == pytest.approx(expected)
    assert cost.opex_usd_per_hour == pytest.approx(expected["hbm"])
    assert cost.usd_per_hour == pytest.approx(sum(expected.values()))
    assert cost.tier("hbm").kind == "opex" and cost.tier("ddr").kind == "capex"
    assert cost.tier("hbm").price == "prices.yaml gpu_hour H100-SXM"


def test_the_specs_prices_win_over_the_catalogs():
    cost = cost_of(*toy(cost={"gpu_hour": 2.0, "ddr_gb_month": 0.73}))
    assert cost.tier("hbm").usd_per_hour == pytest.approx(4.0)
    assert cost.tier("hbm").price == "spec cost.gpu_hour"
    assert cost.tier("ddr").usd_per_hour == pytest.approx(20 * 0.001)      # 20 GB x $0.73 / 730 h
    assert cost.tier("nvme").price == "prices.yaml nvme_gb_month gen4"     # the others stay the catalog's


def test_an_owned_cluster_pays_for_raw_capacity_so_replication_is_paid_for():
    cost = cost_of(*toy())
    ceph = cost.tier("ceph")
    usable_gb = 6 * 1000 / 3
    assert ceph.quantity == pytest.approx(usable_gb * 3)       # raw = usable x pool size
    # holding the same usable bytes with one replica less needs a third fewer OSDs, and costs a third less
    smaller = cost_of(*toy(ceph={"osds_per_host": 2, "osd_size": "667GB", "pool": {"size": 2, "min_size": 1}}))
    assert smaller.tier("ceph").usd_per_hour < ceph.usd_per_hour


def test_an_external_cluster_costs_the_raw_bytes_the_kv_tier_occupies():
    size3 = cost_of(*toy(ceph={"deploy": "external"}))
    size2 = cost_of(*toy(ceph={"deploy": "external", "pool": {"size": 2, "min_size": 1}}))
    assert size3.tier("ceph").quantity == pytest.approx(1000 * 3)         # 1 TB tier x 3 replicas
    assert size3.tier("ceph").usd_per_hour == pytest.approx(1.5 * size2.tier("ceph").usd_per_hour)
    assert size3.tier("network").quantity == 2                           # only the GPU nodes' ports


def test_per_million_tokens_divides_the_hourly_bill_by_the_tokens_served_per_hour():
    assert per_million(36.0, 10_000) == pytest.approx(1.0)    # $36/h over 36M tokens/h
    assert per_million(36.0, 0) is None
    runs = [SimResult.model_construct(prompt_tokens_per_s=8_000.0, generated_tokens_per_s=1_000.0),
            SimResult.model_construct(prompt_tokens_per_s=12_000.0, generated_tokens_per_s=3_000.0)]
    cost = cost_of(*toy(), results=runs)                      # throughput is the mean over the runs
    assert cost.prompt_tokens_per_s == 10_000.0
    assert cost.usd_per_1m_prompt_tokens == pytest.approx(cost.usd_per_hour / 36.0)
    assert cost.usd_per_1m_generated_tokens == pytest.approx(cost.usd_per_hour / 7.2)


def test_a_price_nobody_gives_is_an_error_naming_the_field_and_the_fix():
    from kvplan.catalog import load_catalog
    from kvplan.errors import SpecError

    catalog = load_catalog()
    bare = catalog.model_copy(update={"prices": catalog.prices.model_copy(update={"gpu_hour": []})})
    with pytest.raises(SpecError) as exc:
        cost_of(*toy(), catalog=bare)
    problem = exc.value.problems[0]
    assert problem.path == "cost.gpu_hour" and "set cost.gpu_hour" in problem.fix
    assert cost_of(*toy(cost={"gpu_hour": 1.0}), catalog=bare).tier("hbm").usd_per_hour == 2.0
