"""kvplan's own Ceph diff: the spec's pool, options, bucket and lifecycle against a live cluster.

Ceph's Ansible modules (and kvplan's shell tasks) predict nothing in check mode, so
`kvplan deploy --check` reads the cluster with the read-only `State:` tasks of the ceph role
(`ceph osd pool ls detail`, `ceph osd crush rule dump`, `ceph config dump`, `radosgw-admin
bucket stats` and `lc get`) and compares them here with what a deploy would set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .stack import CephVars


@dataclass(frozen=True)
class Change:
    """One thing a deploy would change on the cluster."""

    what: str
    live: str
    desired: str

    def __str__(self) -> str:
        return f"{self.what}: {self.live} -> {self.desired}"


def _json(result: dict | None):
    if not result or result.get("skipped") or result.get("rc", 0) != 0:
        return None
    try:
        return json.loads(result.get("stdout") or "null")
    except json.JSONDecodeError:
        return None


def diff(want: CephVars, state: dict[str, dict]) -> list[Change]:
    """Changes a deploy would make, from the `State: ...` task results of project/ceph-state.yml."""
    changes: list[Change] = []
    reached = state.get("State: pools") or {}
    if reached.get("rc", 0) != 0:
        why = ((reached.get("stderr") or "").strip().splitlines() or ["no answer"])[-1]
        built = "built by the deploy" if want.ceph_deploy != "external" else "reachable (check the admin host's ceph.conf and keyring)"
        return [Change("cluster", f"not reachable ({why})", built)]
    pools = _json(state.get("State: pools")) or []
    rules = {r["rule_id"]: r["rule_name"] for r in _json(state.get("State: crush rules")) or []}
    pool = next((p for p in pools if p.get("pool_name") == want.ceph_pool_name), None)
    name = f"pool {want.ceph_pool_name}"
    if pool is None:
        changes.append(Change(name, "absent", f"created (size {want.ceph_pool_size}, min_size {want.ceph_pool_min_size}, "
                                              f"pg_num {want.ceph_pool_pg_num})"))
    else:
        for key, desired, live in (("size", want.ceph_pool_size, pool.get("size")),
                                   ("min_size", want.ceph_pool_min_size, pool.get("min_size")),
                                   ("pg_num", want.ceph_pool_pg_num, pool.get("pg_num")),
                                   ("crush_rule", want.ceph_crush_rule, rules.get(pool.get("crush_rule"), pool.get("crush_rule")))):
            if str(live) != str(desired):
                changes.append(Change(f"{name} {key}", str(live), str(desired)))
        if want.ceph_pool_application not in (pool.get("application_metadata") or {}):
            changes.append(Change(f"{name} application", ",".join(pool.get("application_metadata") or {}) or "none",
                                  want.ceph_pool_application))
    config = _json(state.get("State: config")) or []

    def live_option(section: str, key: str) -> str:
        return next((str(c.get("value")) for c in config if c.get("section") == section and c.get("name") == key), "unset")

    wanted = [("global", k, v) for k, v in want.ceph_options.items()]
    if want.ceph_access == "s3":
        wanted.append(("client.rgw", "rgw_dns_name", want.ceph_rgw_dns_name))
    for section, key, value in wanted:
        live = live_option(section, key)
        if live != value:
            changes.append(Change(f"config {section} {key}", live, value))
    if want.ceph_access == "s3":
        bucket = f"bucket {want.ceph_rgw_bucket}"
        if _json(state.get("State: bucket")) is None:
            changes.append(Change(bucket, "absent", "created"))
        days = _lifecycle_days(_json(state.get("State: lifecycle")))
        if days != want.ceph_rgw_expiration_days:
            changes.append(Change(f"{bucket} lifecycle expiration", f"{days} days" if days else "none",
                                  f"{want.ceph_rgw_expiration_days} days" if want.ceph_rgw_expiration_days else "none"))
    return changes


def _lifecycle_days(lc) -> int | None:
    """Expiration days of the kvplan-ttl rule in `radosgw-admin lc get` output."""
    for entry in (lc or {}).get("rule_map", []):
        rule = entry.get("rule", {})
        if entry.get("id") == "kvplan-ttl" and rule.get("status") == "Enabled":
            days = (rule.get("expiration") or {}).get("days")
            return int(days) if days else None
    return None
