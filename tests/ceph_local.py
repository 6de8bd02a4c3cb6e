"""Test helper: the single-node Ceph that `kvplan deploy examples/local.yaml --tags ceph` builds.

The tests start from nothing and end with nothing: `wipe()` stops every Ceph daemon by the pid
files in /run/ceph (clients, then OSDs, then the monitor, as shared/reference/ceph-single-node.md
§8 says) and removes the cluster's state. A cluster left over from a killed run is wiped rather
than reused: RGW stalls on the dead instance's watches after an unclean restart (§10.9).
This is test scaffolding only; kvplan itself never deletes a pool, bucket or object.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import time

STATE = ["/var/lib/ceph/mon/ceph-*", "/var/lib/ceph/mgr/ceph-*", "/var/lib/ceph/osd/ceph-*", "/var/lib/ceph/radosgw/ceph-*",
         "/var/lib/ceph/osd-blocks", "/etc/ceph/ceph.conf", "/etc/ceph/ceph.client.admin.keyring", "/run/ceph",
         "/etc/ceph/kvplan-services.yml"]
PACKAGES = ("ceph-mon", "ceph-mgr", "ceph-osd", "radosgw", "radosgw-admin")


def missing_packages() -> list[str]:
    return [p for p in PACKAGES if shutil.which(p) is None]


def _stop(pattern: str, timeout: float = 15.0) -> None:
    pids = []
    for path in glob.glob(f"/run/ceph/{pattern}"):
        try:
            pid = int(open(path).read().strip())
            os.kill(pid, signal.SIGTERM)
            pids.append(pid)
        except (ValueError, ProcessLookupError, PermissionError, FileNotFoundError):
            pass
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def wipe() -> None:
    """Stop the daemons by pid and remove the cluster's state."""
    _stop("ceph-client.rgw.*.pid")
    _stop("ceph-mgr.*.pid")
    _stop("ceph-osd.*.pid")
    _stop("ceph-mon.*.pid")
    # Daemons whose pid files are gone (an interrupted run) are found by name.
    for name in ("radosgw", "ceph-osd", "ceph-mgr", "ceph-mon"):
        subprocess.run(["pkill", "-KILL", "-x", name], check=False)
    for pattern in STATE:
        for path in glob.glob(pattern):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)


def ceph(*args: str) -> str:
    """Run the real `ceph` CLI against the local cluster."""
    done = subprocess.run(["ceph", "--connect-timeout", "10", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"ceph {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def radosgw_admin(*args: str) -> str:
    done = subprocess.run(["radosgw-admin", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"radosgw-admin {' '.join(args)} failed: {done.stderr}"
    return done.stdout
