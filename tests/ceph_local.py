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
import threading
import time

STATE = ["/var/lib/ceph/mon/ceph-*", "/var/lib/ceph/mgr/ceph-*", "/var/lib/ceph/osd/ceph-*", "/var/lib/ceph/radosgw/ceph-*",
         "/var/lib/ceph/osd-blocks", "/etc/ceph/ceph.conf", "/etc/ceph/ceph.client.admin.keyring",
         "/etc/ceph/ceph.mon.keyring", "/run/ceph", "/etc/ceph/kvplan-services.yml"]
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


class ArgvWatch:
    """Every distinct command line of this machine's processes while the block runs, sampled from
    /proc/*/cmdline every `interval` seconds in a background thread (what `ps` shows any user)."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.seen: set[str] = set()
        self.sweeps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="argv-watch", daemon=True)

    def _sweep(self) -> None:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        raw = f.read()
                except OSError:  # the process has gone
                    continue
                if raw:
                    self.seen.add(raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace"))
        self.sweeps += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sweep()
            self._stop.wait(self.interval)

    def __enter__(self) -> "ArgvWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def containing(self, text: str) -> list[str]:
        return sorted(line for line in self.seen if text in line)
