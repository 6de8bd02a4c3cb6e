#!/usr/bin/python
"""Ansible module: one look at a daemon-role service that is starting - ready, still starting, or gone.

The daemon role's tasks/wait.yml calls it in an `until` loop, so that waiting for a service stops
as soon as its process has exited, instead of running out the whole timeout, and the failure says
why: the last lines of the service's log (its log file, or journalctl for a systemd unit).

Python standard library only; read-only, so it also runs in check mode.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: kvplan_daemon_probe
short_description: Whether a service started by kvplan's daemon role is ready, starting or has exited
description:
  - Probes readiness first (C(url) answers HTTP 200, or C(port) accepts a TCP connection), then,
    if not ready, whether the service's process still runs.
  - Pid-file mode (C(pidfile)) asks C(daemonctl status), the daemon role's own rule for "running";
    systemd mode (C(unit)) reads the unit's C(ActiveState), C(SubState), C(MainPID) and C(NRestarts).
    A unit waiting to be restarted by C(Restart=on-failure), or restarted more often than C(restarts),
    has exited.
  - C(state) is C(ready), C(starting), C(exited), or C(timeout) (not ready, still running, and the
    target's clock is past C(deadline)). Unless ready, C(msg) names the service, says what happened
    and ends with the last C(lines) lines of its log.
  - Changes nothing and never fails because of what it finds; the caller decides (C(failed_when)).
options:
  name: {description: Service name (for messages), type: str, required: true}
  pidfile: {description: Pid file of a pid-file mode service, type: path}
  daemonctl: {description: The daemon role's daemonctl helper (pid-file mode), type: path}
  log: {description: Log file of a pid-file mode service, type: path}
  unit: {description: systemd unit of a systemd mode service, type: str}
  url: {description: Ready when a GET of this URL answers 200, type: str, default: ""}
  host: {description: With C(port), the address to connect to, type: str, default: 127.0.0.1}
  port: {description: Ready when this TCP port accepts connections (0 for none), type: int, default: 0}
  restarts: {description: systemd restarts (NRestarts) already seen; more means the process exited, type: int, default: -1}
  deadline: {description: Target's time (seconds since the epoch) after which a service that is not ready has timed out; 0 for none, type: float, default: 0}
  timeout: {description: The wait's length in seconds, for the message, type: int, default: 0}
  lines: {description: How many lines of the log go into the message, type: int, default: 30}
  probe_timeout: {description: Seconds one HTTP request or connection may take, type: float, default: 5}
author: kvplan
"""

RETURN = r"""
state: {description: ready, starting, exited or timeout, type: str, returned: always}
pid: {description: The service's process id (pid file content, or systemd's MainPID), 0 if unknown, type: int, returned: always}
detail: {description: What the readiness probe saw, type: str, returned: always}
restarts: {description: systemd's NRestarts of the unit (0 in pid-file mode), type: int, returned: always}
now: {description: The target's time, seconds since the epoch, type: float, returned: always}
log: {description: The last lines of the service's log, unless ready, type: str, returned: always}
log_source: {description: Where those lines come from, type: str, returned: always}
msg: {description: What happened, with the log lines unless ready, type: str, returned: always}
"""

import os
import socket
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule


def ready(url: str, host: str, port: int, timeout: float) -> tuple[bool, str]:
    """(ready, what the probe saw)."""
    if url:
        # A health check of this host's own service: never through a proxy.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(url, timeout=timeout) as resp:
                return resp.status == 200, f"GET {url}: HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            return False, f"GET {url}: HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            return False, f"GET {url}: {getattr(exc, 'reason', exc)}"
    if port:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True, f"{host}:{port} accepts connections"
        except OSError as exc:
            return False, f"{host}:{port}: {exc.strerror or exc}"
    return True, "no readiness probe: running is ready"


def tail(path: str, lines: int) -> str:
    """The last `lines` lines of a file, without reading all of a large one."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        end = f.tell()
        size = min(end, 4096)
        while True:
            f.seek(end - size)
            data = f.read(size)
            if data.count(b"\n") > lines or size == end:
                break
            size = min(end, size * 4)
    return b"\n".join(data.rstrip(b"\n").split(b"\n")[-lines:]).decode(errors="replace")


def pidfile_process(module: AnsibleModule) -> tuple[bool, int, str]:
    """(running, pid, "") of a pid-file mode service, by daemonctl's rule."""
    p = module.params
    if not p["daemonctl"] or not os.access(p["daemonctl"], os.X_OK):
        module.fail_json(msg=f"{p['name']}: no daemonctl at {p['daemonctl']}; was it started by the daemon role?")
    rc, out, err = module.run_command([p["daemonctl"], "status", p["pidfile"]])
    if rc != 0:
        module.fail_json(msg=f"{p['name']}: daemonctl status failed: {err.strip()}", rc=rc)
    try:
        with open(p["pidfile"]) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        pid = 0
    return out.strip() == "running", pid, ""


def systemd_process(module: AnsibleModule) -> tuple[bool, int, int, str]:
    """(running, MainPID, NRestarts, how it looks) of a systemd unit; restarted since `restarts` counts as not running."""
    p = module.params
    systemctl = module.get_bin_path("systemctl", required=True)
    rc, out, err = module.run_command([systemctl, "show", p["unit"], "--property=ActiveState,SubState,MainPID,NRestarts"])
    if rc != 0:
        module.fail_json(msg=f"{p['name']}: systemctl show {p['unit']} failed: {err.strip()}", rc=rc)
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    pid = int(props.get("MainPID") or 0)
    restarts = int(props.get("NRestarts") or 0)
    running = active in ("active", "reloading") or (active == "activating" and sub != "auto-restart")
    look = f"{p['unit']} {active}/{sub}; "
    if p["restarts"] >= 0 and restarts > p["restarts"]:
        running = False
        look = f"{p['unit']} {active}/{sub}, restarted by systemd {restarts - p['restarts']} time(s) during the wait; "
    return running, pid, restarts, look


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "pidfile": {"type": "path"},
            "daemonctl": {"type": "path"},
            "log": {"type": "path"},
            "unit": {"type": "str"},
            "url": {"type": "str", "default": ""},
            "host": {"type": "str", "default": "127.0.0.1"},
            "port": {"type": "int", "default": 0},
            "restarts": {"type": "int", "default": -1},
            "deadline": {"type": "float", "default": 0},
            "timeout": {"type": "int", "default": 0},
            "lines": {"type": "int", "default": 30},
            "probe_timeout": {"type": "float", "default": 5},
        },
        required_one_of=[("pidfile", "unit")],
        mutually_exclusive=[("pidfile", "unit")],
        required_by={"pidfile": ("daemonctl", "log")},
        supports_check_mode=True,
    )
    p = module.params
    name = p["name"]

    is_ready, detail = ready(p["url"], p["host"], p["port"], p["probe_timeout"])
    if p["unit"]:
        running, pid, restarts, look = systemd_process(module)
    else:
        (running, pid, look), restarts = pidfile_process(module), 0
    now = time.time()
    result = {"changed": False, "pid": pid, "detail": detail, "restarts": restarts, "now": now, "log": "", "log_source": ""}

    if is_ready and running:
        module.exit_json(state="ready", msg=f"{name} is ready ({detail})", **result)
    if running and not (p["deadline"] and now >= p["deadline"]):
        module.exit_json(state="starting", msg=f"{name} is starting (pid {pid}; {detail})", **result)

    # Exited (even if something answers on its port: then it is not this service), or timed out.
    if p["unit"]:
        source = f"journalctl -u {p['unit']} -n {p['lines']} --no-pager"
        journalctl = module.get_bin_path("journalctl")
        if journalctl:
            rc, out, err = module.run_command([journalctl, "-u", p["unit"], "-n", str(p["lines"]), "--no-pager"])
            log = out.rstrip("\n") if rc == 0 else f"(journalctl failed: {err.strip()})"
        else:
            log = "(journalctl is not installed)"
    else:
        source = p["log"]
        try:
            log = tail(p["log"], p["lines"])
        except OSError as exc:
            log = f"(cannot read the log: {exc.strerror})"
    log = log or "(empty)"
    if running:
        state = "timeout"
        what = f"{name} is running (pid {pid}) but was not ready within {p['timeout']} s (last probe: {detail})"
    else:
        state = "exited"
        what = f"{name} exited during start-up (pid {pid or 'unknown'}; {look}last probe: {detail})"
    result.update(log=log, log_source=source)
    module.exit_json(state=state, msg=f"{what}. Last {p['lines']} lines of {source}:\n{log}", **result)


if __name__ == "__main__":
    main()
