"""kvplan's own Ceph diff: the spec's pool, options, bucket and lifecycle against a live cluster.

Ceph's Ansible modules (and kvplan's shell tasks) predict nothing in check mode, so
`kvplan deploy --check` reads the cluster with the read-only `State:` tasks of the ceph role
(`ceph osd pool ls detail`, `ceph osd crush rule dump`, `ceph config dump`, `radosgw-admin
bucket stats` and `lc get`) and compares them here with what a deploy would set.

The pool comparison is the ceph role's (templates/roles/ceph/tasks/pool_live.yml), and so is its
refusal: an existing pool of an external cluster that differs from the spec, without
ceph.pool.adopt, stops the deploy before it changes anything, and the diff says so.
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
    note: str = ""
    """Why the deploy would not make it after all (an external pool without ceph.pool.adopt)."""

    def __str__(self) -> str:
        return f"{self.what}: {self.live} -> {self.desired}" + (f" ({self.note})" if self.note else "")


ADOPT_REFUSAL = ("refused: the pool exists in the external cluster and ceph.pool.adopt is false, so the deploy stops "
                 "before changing anything; set ceph.pool.adopt: true to let kvplan change it, or make the spec match the pool")


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
        differences = _pool_differences(want, pool, rules)
        if differences and want.ceph_deploy == "external" and not want.ceph_pool_adopt:
            # The deploy stops here (pool.yml), so nothing after it would change either.
            return [Change(name, ", ".join(f"{key} {live}" for key, live, _ in differences),
                           ", ".join(f"{key} {desired}" for key, _, desired in differences), ADOPT_REFUSAL)]
        changes += [Change(f"{name} {key}", live, desired) for key, live, desired in differences]
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


def _pool_differences(want: CephVars, pool: dict, rules: dict) -> list[tuple[str, str, str]]:
    """(setting, live, desired) where an existing pool differs from the spec, as pool_live.yml compares them."""
    differences = []
    for key, desired, live in (("size", want.ceph_pool_size, pool.get("size")),
                               ("min_size", want.ceph_pool_min_size, pool.get("min_size")),
                               ("pg_num", want.ceph_pool_pg_num, pool.get("pg_num")),
                               ("pg_autoscale_mode", "off", pool.get("pg_autoscale_mode")),
                               ("crush_rule", want.ceph_crush_rule, rules.get(pool.get("crush_rule"), pool.get("crush_rule")))):
        if str(live) != str(desired):
            differences.append((key, str(live), str(desired)))
    applications = pool.get("application_metadata") or {}
    if want.ceph_pool_application not in applications:
        differences.append(("application", ",".join(applications) or "none", want.ceph_pool_application))
    return differences


def _lifecycle_days(lc) -> int | None:
    """Expiration days of the kvplan-ttl rule in `radosgw-admin lc get` output."""
    for entry in (lc or {}).get("rule_map", []):
        rule = entry.get("rule", {})
        if entry.get("id") == "kvplan-ttl" and rule.get("status") == "Enabled":
            days = (rule.get("expiration") or {}).get("days")
            return int(days) if days else None
    return None
