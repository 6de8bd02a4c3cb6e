"""The service roles, applied for real to this machine through ansible-runner.

This machine has no systemd, so services run the way the daemon role runs them wherever systemd
is not PID 1: `start-stop-daemon --background` with a pid file, in a session of their own. Every
file the roles write goes under the test's temporary directory, and every process started is
stopped at the end.

- daemon: starts a harmless program, changes nothing on a second run, restarts it (new pid) when
  its environment changes, and stops it; starts it again when it was killed (pid file left behind).
- daemon's wait (through the vllm and lmcache roles): a service that dies while starting ends the
  wait at once, and one that runs but is never ready fails at its timeout, each with the end of its
  log; in systemd mode (stand-in systemctl and journalctl) a unit systemd restarted during the wait
  has exited, and the journal is quoted.
- lmcache (MP mode) and vllm, with the variables `kvplan render` writes for examples/local.yaml:
  small stand-ins play `lmcache server` and `vllm serve` (neither is installed here). The services
  run exactly the rendered arguments, the RGW keys reach the LMCache server through its
  environment only, a second run changes nothing, and vLLM restarts when its LMCache server does.
- lmcache in-process mode writes the lmcache.yaml vLLM reads and stops the MP server.
- daemon's systemd unit (systemd is installed but not PID 1 here): systemd-analyze reads it
  without complaint and with exactly the program's arguments, however they are quoted.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import ansible_runner
import pytest
import yaml

from kvplan.deploy import ansible_yaml, inventory
from kvplan.deploy.render import render
from kvplan.deploy.secrets import load_or_create
from kvplan.deploy.stack import build
from kvplan.resolve import resolve
from kvplan.spec import load

from conftest import REPO, spec

pytestmark = pytest.mark.stack

ROLES = REPO / "templates" / "roles"
BIN = Path(sys.executable).parent
LOCALHOST = {"all": {"hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def daemon_dirs(root: Path) -> dict[str, str]:
    """Where the daemon role keeps its files, moved under the test's directory."""
    return {f"daemon_{d}_dir": str(root / d) for d in ("config", "state", "run", "log", "libexec")} | {
        "daemon_init": "pidfile", "daemon_start_grace": 1}


def run_play(project: Path, roles: list[str], hosts: str = "localhost", inventory_=LOCALHOST, ident: str | None = None,
             tasks: list[dict] | None = None, path: list[Path] = (), succeed: bool = True, check: bool = False,
             diff: bool = False):
    """ansible-playbook over one play of these roles (or these tasks), from this virtual environment;
    `path`: directories of stand-in programs, found before the machine's own; `check`: under --check; `diff`: under
    --diff."""
    play = {"name": "Roles under test", "hosts": hosts, "gather_facts": False}
    play |= {"tasks": tasks} if tasks is not None else {"roles": roles}
    (project / "test-play.yml").write_text(yaml.safe_dump([play]))
    r = ansible_runner.run(
        private_data_dir=str(project.parent), project_dir=str(project), playbook="test-play.yml", inventory=inventory_,
        ident=ident, quiet=True, suppress_env_files=True,
        cmdline=" ".join(flag for flag, on in (("--check", check), ("--diff", diff)) if on) or None,
        # ansible-runner runs whichever ansible-playbook is first on PATH: this virtual environment's
        envvars={"ANSIBLE_ROLES_PATH": str(ROLES), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_PIPELINING": "1",
                 "PATH": os.pathsep.join([*map(str, path), str(BIN), os.environ["PATH"]])})
    if succeed:
        assert r.rc == 0, r.stdout.read()
    else:
        assert r.rc != 0, r.stdout.read()
    return r


def task_results(r, kind: str) -> list[tuple[str, dict]]:
    """(task name, result) of the play's `runner_on_<kind>` events (ok, failed, ...)."""
    return [(e["event_data"]["task"], e["event_data"].get("res") or {}) for e in r.events
            if e["event"] == f"runner_on_{kind}"]


def pid_of(run_dir: Path, name: str) -> int:
    return int((run_dir / f"{name}.pid").read_text())


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def environ(pid: int) -> dict[str, str]:
    pairs = (item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in item)
    return dict(pairs)


def serves(port: int, patience: float = 30.0) -> bool:
    """Something accepts connections on this loopback port (it may still be binding)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)


def stop_all(root: Path) -> None:
    """Stop whatever a test left running (daemonctl signals each service's whole session)."""
    ctl, run_dir = root / "libexec" / "daemonctl", root / "run"
    for pidfile in run_dir.glob("*.pid") if run_dir.is_dir() else []:
        subprocess.run([str(ctl), "stop", str(pidfile), "5"], capture_output=True)


# ----------------------------------------------------------------------------------------------
# daemon


def test_daemon_starts_keeps_restarts_and_stops_a_program(tmp_path):
    port = free_port()
    project = tmp_path / "project"
    (project / "group_vars" / "all").mkdir(parents=True)

    def apply(generation: str, state: str = "started"):
        variables = daemon_dirs(tmp_path) | {
            "daemon_name": "kvplan-test-http",
            "daemon_command": [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
            "daemon_env": {"KVPLAN_TEST_GENERATION": generation},
            "daemon_env_private": {"KVPLAN_TEST_TOKEN": "not-on-the-command-line"},
            "daemon_state": state}
        (project / "group_vars" / "all" / "daemon.yml").write_text(yaml.safe_dump(variables))
        return run_play(project, ["daemon"])

    try:
        first = apply("1")
        pid = pid_of(tmp_path / "run", "kvplan-test-http")
        assert first.stats["changed"], "the first run starts the program"
        assert alive(pid)
        assert cmdline(pid) == [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
        assert environ(pid)["KVPLAN_TEST_GENERATION"] == "1"
        assert environ(pid)["KVPLAN_TEST_TOKEN"] == "not-on-the-command-line"
        secret_env = tmp_path / "config" / "kvplan-test-http.secret.env"
        assert stat.S_IMODE(secret_env.stat().st_mode) == 0o600
        assert serves(port)

        again = apply("1")
        assert again.stats["changed"] == {}, "nothing changed, so nothing is done"
        assert pid_of(tmp_path / "run", "kvplan-test-http") == pid and alive(pid)

        apply("2")
        new_pid = pid_of(tmp_path / "run", "kvplan-test-http")
        assert new_pid != pid and not alive(pid) and alive(new_pid), "a new environment restarts the program"
        assert environ(new_pid)["KVPLAN_TEST_GENERATION"] == "2"

        apply("2", state="stopped")
        assert not alive(new_pid)
        assert not (tmp_path / "run" / "kvplan-test-http.pid").exists()
    finally:
        stop_all(tmp_path)


def test_daemon_under_check_mode_says_what_it_would_change_and_changes_nothing(tmp_path):
    port = free_port()
    project = tmp_path / "project"
    (project / "group_vars" / "all").mkdir(parents=True)

    def apply(generation: str, check: bool):
        (project / "group_vars" / "all" / "daemon.yml").write_text(yaml.safe_dump(daemon_dirs(tmp_path) | {
            "daemon_name": "kvplan-test-check",
            "daemon_command": [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
            "daemon_env": {"KVPLAN_TEST_GENERATION": generation}}))
        return run_play(project, ["daemon"], check=check)

    def would_change(r) -> dict[str, list[str]]:
        """The paths each task would change (check mode skips commands; the files are what it can tell)."""
        return {task: res.get("changed_paths") for task, res in task_results(r, "ok") if res.get("changed")}

    config = tmp_path / "config"
    try:
        would = would_change(apply("1", check=True))
        assert str(config / "kvplan-test-check.env") in would["Files, and whether it runs, of kvplan-test-check"], would
        assert not [d for d in ("config", "state", "run", "log", "libexec") if (tmp_path / d).exists()], "check mode wrote"

        apply("1", check=False)
        pid = pid_of(tmp_path / "run", "kvplan-test-check")
        env = (config / "kvplan-test-check.env").read_text()
        assert apply("1", check=True).stats["changed"] == {}, "nothing would change"
        would = would_change(apply("2", check=True))
        assert would == {"Files, and whether it runs, of kvplan-test-check": [str(config / "kvplan-test-check.env")],
                         "Record what runs as kvplan-test-check": None}, would
        assert (config / "kvplan-test-check.env").read_text() == env
        assert pid_of(tmp_path / "run", "kvplan-test-check") == pid and alive(pid)
    finally:
        stop_all(tmp_path)


def test_daemon_under_diff_mode_shows_the_changed_lines_and_never_the_secret(tmp_path):
    """`kvplan deploy --check --diff` reads what the daemon module reports: the environment and command files'
    lines before and after, and the secret file named with a note instead of its content."""
    project = tmp_path / "project"
    (project / "group_vars" / "all").mkdir(parents=True)
    secret = "s3cret-token-never-shown"

    def apply(generation: str, port: int, check: bool):
        (project / "group_vars" / "all" / "daemon.yml").write_text(yaml.safe_dump(daemon_dirs(tmp_path) | {
            "daemon_name": "kvplan-test-diff",
            "daemon_command": [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
            "daemon_env": {"KVPLAN_TEST_GENERATION": generation},
            "daemon_env_private": {"KVPLAN_TEST_TOKEN": secret + generation}}))
        return run_play(project, ["daemon"], check=check, diff=True)

    def diffs(r) -> dict[str, dict]:
        found = [d for _, res in task_results(r, "ok") if res.get("changed") for d in res.get("diff") or []]
        return {d["after_header"]: d for d in found if isinstance(d, dict) and "after_header" in d}

    config = tmp_path / "config"
    first, second = free_port(), free_port()
    try:
        apply("1", first, check=False)
        would = apply("2", second, check=True)
        changed = diffs(would)
        env = changed[str(config / "kvplan-test-diff.env")]
        assert 'KVPLAN_TEST_GENERATION="1"' in env["before"] and 'KVPLAN_TEST_GENERATION="2"' in env["after"], env
        command = changed[str(config / "kvplan-test-diff.command")]
        # one option and its value per line: the changed port is one changed line
        assert f"\n--bind 127.0.0.1\n{first}\n" in command["before"], command
        assert f"\n--bind 127.0.0.1\n{second}\n" in command["after"], command
        hidden = changed[str(config / "kvplan-test-diff.secret.env")]
        assert "not shown" in hidden["after"], hidden
        assert secret not in would.stdout.read() and secret not in str(list(would.events)), "a secret reached the output"
        assert not any("stamp" in path for path in changed), "the stamp's hash is no diff a reader needs"
        assert (config / "kvplan-test-diff.env").read_text().count('GENERATION="1"') == 1, "check mode wrote"
    finally:
        stop_all(tmp_path)


def test_daemon_starts_again_a_program_that_was_killed(tmp_path):
    """After a crash (SIGKILL: the pid file stays, its process is gone), the next run starts the
    program again, and only that start changes anything."""
    port = free_port()
    project = tmp_path / "project"
    (project / "group_vars" / "all").mkdir(parents=True)
    (project / "group_vars" / "all" / "daemon.yml").write_text(yaml.safe_dump(daemon_dirs(tmp_path) | {
        "daemon_name": "kvplan-test-crash",
        "daemon_command": [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]}))
    try:
        run_play(project, ["daemon"])
        pid = pid_of(tmp_path / "run", "kvplan-test-crash")
        assert alive(pid)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid) and (tmp_path / "run" / "kvplan-test-crash.pid").exists()

        again = run_play(project, ["daemon"])
        new_pid = pid_of(tmp_path / "run", "kvplan-test-crash")
        assert new_pid != pid and alive(new_pid), "the killed program runs again"
        assert cmdline(new_pid) == [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]
        assert serves(port)
        changed = [task for task, res in task_results(again, "ok") if res.get("changed")]
        assert changed == ["Start kvplan-test-crash"]
    finally:
        stop_all(tmp_path)


# ----------------------------------------------------------------------------------------------
# lmcache and vllm

STAND_IN = '''#!{python}
"""Stand-in for `lmcache server` and `vllm serve`: listens on --host/--port (IPv4 or IPv6); GET /health answers 200."""
import http.server
import socket
import sys

args = sys.argv[1:]
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


class Server(http.server.HTTPServer):
    address_family = socket.AF_INET6 if ":" in host else socket.AF_INET


Server((host, port), Health).serve_forever()
'''


@pytest.fixture(scope="module")
def gpu_node(tmp_path_factory):
    """examples/local.yaml rendered for this machine (free ports), with the stand-ins as programs,
    and applied once: (the render, the stand-in, the directory of the daemons' files, first run)."""
    tmp_path = tmp_path_factory.mktemp("gpu-node")
    r = resolve(spec("local", lmcache__port=free_port(), serving__port=free_port()))
    rendered = render(r, inventory.load(REPO / "inventories" / "local"), tmp_path / "render",
                      load_or_create(tmp_path / "state", r.name))
    stand_in = tmp_path / "stand-in"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    overrides = daemon_dirs(tmp_path) | {
        "ansible_python_interpreter": sys.executable,
        "lmcache_command_prefix": [str(stand_in)],
        "vllm_bin": str(stand_in),
        "lmcache_nvme_paths": [str(tmp_path / "lmcache-disk")],
        "vllm_health_timeout": 60,
    }
    # group_vars/gpu outranks the rendered group_vars/all
    (rendered.project / "group_vars" / "gpu").mkdir()
    (rendered.project / "group_vars" / "gpu" / "test.yml").write_text(yaml.safe_dump(overrides))
    try:
        yield rendered, stand_in, tmp_path, _apply_gpu_roles(rendered)
    finally:
        stop_all(tmp_path)


def _apply_gpu_roles(rendered, roles=("lmcache", "vllm")):
    return run_play(rendered.project, list(roles), hosts="gpu", inventory_=str(rendered.root / "inventory" / "hosts.yml"))


# The three tests below share one deployment and run in this order: first run, second run and a
# restart, then the switch to in-process mode.


def test_lmcache_server_and_vllm_run_the_rendered_arguments(gpu_node):
    rendered, stand_in, tmp_path, first = gpu_node
    stack = rendered.stack
    secrets = ansible_yaml.load((rendered.project / "group_vars" / "all" / "secrets.yml").read_text())
    assert first.stats["changed"]

    server = pid_of(tmp_path / "run", "lmcache-server")
    assert cmdline(server)[1:] == [str(stand_in), *stack.lmcache.lmcache_server_args]
    env = environ(server)
    assert {k: env[k] for k in stack.lmcache.lmcache_env} == stack.lmcache.lmcache_env
    assert env["AWS_ACCESS_KEY_ID"] == secrets["ceph_rgw_access_key"]
    assert env["AWS_SECRET_ACCESS_KEY"] == secrets["ceph_rgw_secret_key"]
    assert not any(secrets["ceph_rgw_secret_key"] in arg for arg in cmdline(server)), "keys never on a command line"
    assert secrets["ceph_rgw_secret_key"] not in (tmp_path / "config" / "lmcache-server.env").read_text()
    assert stat.S_IMODE((tmp_path / "config" / "lmcache-server.secret.env").stat().st_mode) == 0o600
    assert (tmp_path / "lmcache-disk").is_dir()

    for instance in stack.instances["localhost"]:
        vllm = pid_of(tmp_path / "run", f"vllm-{instance['index']}")
        assert cmdline(vllm)[1:] == [str(stand_in), "serve", stack.vllm.vllm_model, "--host", stack.vllm.vllm_host,
                                     "--port", str(instance["port"]), *stack.vllm.vllm_args]
        env = environ(vllm)
        assert {k: env[k] for k in stack.vllm.vllm_env} == stack.vllm.vllm_env
        assert "CUDA_VISIBLE_DEVICES" not in env, "a CPU node has no CUDA devices to select"
        assert "AWS_SECRET_ACCESS_KEY" not in env, "in MP mode only the LMCache server talks to RGW"


def test_a_second_run_changes_nothing_and_vllm_restarts_with_its_lmcache_server(gpu_node):
    rendered, _, tmp_path, _ = gpu_node
    server, vllm = pid_of(tmp_path / "run", "lmcache-server"), pid_of(tmp_path / "run", "vllm-0")

    assert _apply_gpu_roles(rendered).stats["changed"] == {}
    assert (pid_of(tmp_path / "run", "lmcache-server"), pid_of(tmp_path / "run", "vllm-0")) == (server, vllm)

    # A changed LMCache server environment restarts the server, and a vLLM attached to the old
    # server would stop working (shared/reference/vllm-cpu-lmcache.md §4.3): it restarts too.
    overrides = rendered.project / "group_vars" / "gpu" / "test.yml"
    values = yaml.safe_load(overrides.read_text())
    values["lmcache_env"] = rendered.stack.lmcache.lmcache_env | {"LMCACHE_LOG_LEVEL": "DEBUG"}
    overrides.write_text(yaml.safe_dump(values))
    _apply_gpu_roles(rendered)
    new_server, new_vllm = pid_of(tmp_path / "run", "lmcache-server"), pid_of(tmp_path / "run", "vllm-0")
    assert new_server != server and alive(new_server) and not alive(server)
    assert new_vllm != vllm and alive(new_vllm) and not alive(vllm)


def test_inprocess_mode_writes_lmcache_yaml_and_stops_the_mp_server(gpu_node):
    rendered, _, tmp_path, _ = gpu_node
    server = pid_of(tmp_path / "run", "lmcache-server")

    chat = resolve(load(REPO / "examples" / "chat-llama2-13b.yaml"))
    inprocess = build(chat, [f"gpu-{i}" for i in range(chat.nodes)], ["ceph-1"]).lmcache
    config_file = tmp_path / "etc-lmcache" / "lmcache.yaml"
    overrides = rendered.project / "group_vars" / "gpu" / "test.yml"
    overrides.write_text(overrides.read_text() + yaml.safe_dump({
        "lmcache_mode": "inprocess", "lmcache_config": inprocess.lmcache_config, "lmcache_server_args": [],
        "lmcache_config_file": str(config_file)}))
    _apply_gpu_roles(rendered, roles=["lmcache"])

    assert yaml.safe_load(config_file.read_text()) == inprocess.lmcache_config
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o644
    assert not alive(server), "in-process mode has no MP server"


def test_vllm_on_an_ipv6_address_is_found_healthy_at_its_bracketed_url(tmp_path):
    # issue 49: the health check asked for http://::1:<port>/health, which is no URL (urlsplit's .port refuses it;
    # only http.client's split at the last ':' reached the instance); the bracketed URL the render now gives it
    # reaches the instance through the daemon role's probe
    r = resolve(spec("local", serving__host="::1", lmcache__port=free_port(), serving__port=free_port()))
    rendered = render(r, inventory.load(REPO / "inventories" / "local"), tmp_path / "render",
                      load_or_create(tmp_path / "state", r.name))
    stand_in = tmp_path / "stand-in"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    (rendered.project / "group_vars" / "gpu").mkdir()
    (rendered.project / "group_vars" / "gpu" / "test.yml").write_text(yaml.safe_dump(daemon_dirs(tmp_path) | {
        "ansible_python_interpreter": sys.executable, "lmcache_command_prefix": [str(stand_in)],
        "vllm_bin": str(stand_in), "lmcache_nvme_paths": [str(tmp_path / "lmcache-disk")], "vllm_health_timeout": 20}))
    try:
        r = _apply_gpu_roles(rendered)
        # the first probe, or the wait after it, finds each instance ready at its URL
        url = f"http://[::1]:{rendered.stack.instances['localhost'][0]['port']}/health"
        probes = [res for task, res in task_results(r, "ok")
                  if task.startswith(("Readiness of vllm-", "Wait until ready, or exited, for vllm-")) and "state" in res]
        assert any(res["state"] == "ready" and f"GET {url}: HTTP 200" in res["msg"] for res in probes), probes
    finally:
        stop_all(tmp_path)


# A service that dies while starting, and one that never becomes ready: the daemon role's wait
# (tasks/wait.yml), which the vllm and lmcache roles include, stops at once for the first and at
# the timeout for the second, each time with the end of the service's log.

CRASHING = '''#!{python}
"""Stand-in for a `vllm serve` that dies while loading: /health answers 503 (not ready yet), and
at the second health check it logs an error and exits."""
import http.server
import os
import sys

args = sys.argv[1:]
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])


class Loading(http.server.BaseHTTPRequestHandler):
    checks = 0

    def do_GET(self):
        self.send_response(503)
        self.end_headers()
        self.wfile.flush()
        Loading.checks += 1
        if Loading.checks < 2:
            return
        print("stand-in: ImportError: libcudart.so.12: cannot open shared object file", file=sys.stderr, flush=True)
        os._exit(1)

    def log_message(self, *args):
        pass


print("stand-in: loading the model", flush=True)
http.server.HTTPServer((host, port), Loading).serve_forever()
'''

HANGING = '''#!{python}
"""Stand-in for an `lmcache server` that runs but never listens."""
import time

print("stand-in: waiting for a peer that never answers", flush=True)
time.sleep(600)
'''


def _program(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text.format(python=sys.executable))
    path.chmod(0o755)
    return path


def test_a_vllm_that_exits_while_starting_fails_the_deploy_at_once_with_its_log(tmp_path):
    project = tmp_path / "project"
    (project / "group_vars" / "all").mkdir(parents=True)
    port, timeout = free_port(), 120
    (project / "group_vars" / "all" / "vllm.yml").write_text(yaml.safe_dump(daemon_dirs(tmp_path) | {
        "vllm_bin": str(_program(tmp_path, "crashing", CRASHING)), "vllm_model": "stand-in-model", "vllm_args": [],
        "vllm_env": {}, "vllm_host": "127.0.0.1", "vllm_url_host": "127.0.0.1", "vllm_tensor_parallel": 1, "vllm_cpu_host": True,
        "vllm_s3_credentials": False, "vllm_api_key_env": "", "vllm_instances": [{"index": 0, "port": port, "devices": "0"}],
        "vllm_health_timeout": timeout}))
    try:
        began = time.monotonic()
        r = run_play(project, ["vllm"], succeed=False)
        took = time.monotonic() - began
        [(task, res)] = task_results(r, "failed")
        # The first look saw it starting (503); the wait stopped at the next one, after the exit.
        assert task == "Wait until ready, or exited, for vllm-0", task
        assert "vllm-0 exited during start-up" in res["msg"], res["msg"]
        assert "ImportError: libcudart.so.12: cannot open shared object file" in res["msg"], res["msg"]
        assert "stand-in: loading the model" in res["msg"], res["msg"]
        assert str(tmp_path / "log" / "vllm-0.log") in res["msg"]
        assert res["state"] == "exited"
        # A guard, not a benchmark: waiting out the timeout would take 120 s.
        assert took < timeout / 2, f"the failed start took {took:.0f} s"
    finally:
        stop_all(tmp_path)


KEYED = '''#!{python}
"""Stand-in for a vLLM: says whether it was given the API key the test exported (never the key), then answers /health."""
import http.server, os, sys

port = int(sys.argv[sys.argv.index("--port") + 1])
print("stand-in: key", "given" if os.environ.get("VLLM_API_KEY") == "sk-role-test-key" else "missing", flush=True)


class Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), Healthy).serve_forever()
'''


def _keyed_vllm(tmp_path: Path, api_key_env: str) -> Path:
    project = tmp_path / "project"
    (project / "group_vars" / "all").mkdir(parents=True)
    (project / "group_vars" / "all" / "vllm.yml").write_text(yaml.safe_dump(daemon_dirs(tmp_path) | {
        "vllm_bin": str(_program(tmp_path, "keyed", KEYED)), "vllm_model": "stand-in-model", "vllm_args": [],
        "vllm_env": {}, "vllm_host": "127.0.0.1", "vllm_url_host": "127.0.0.1", "vllm_tensor_parallel": 1,
        "vllm_cpu_host": True, "vllm_s3_credentials": False, "vllm_api_key_env": api_key_env,
        "vllm_instances": [{"index": 0, "port": free_port(), "devices": "0"}], "vllm_health_timeout": 60}))
    return project


def test_vllm_gets_the_api_key_from_the_variable_the_spec_names_through_its_private_file(tmp_path, monkeypatch):
    """serving.api_key_env: CHAT_API_KEY; the deploy reads the variable where it runs and gives each instance the key
    as VLLM_API_KEY in its 0600 secret environment file, not in the environment file anyone may read."""
    monkeypatch.setenv("CHAT_API_KEY", "sk-role-test-key")
    project = _keyed_vllm(tmp_path, "CHAT_API_KEY")
    try:
        r = run_play(project, ["vllm"])
        assert "sk-role-test-key" not in r.stdout.read()
        assert "stand-in: key given" in (tmp_path / "log" / "vllm-0.log").read_text()
        secret = tmp_path / "config" / "vllm-0.secret.env"
        assert 'VLLM_API_KEY="sk-role-test-key"' in secret.read_text() and secret.stat().st_mode & 0o077 == 0
        assert "sk-role-test-key" not in (tmp_path / "config" / "vllm-0.env").read_text()
    finally:
        stop_all(tmp_path)


def test_a_named_api_key_variable_that_is_unset_fails_the_deploy_before_anything_starts(tmp_path, monkeypatch):
    """The spec asks for a key the deploy cannot find: vLLM is not started without one, unauthenticated."""
    monkeypatch.delenv("CHAT_API_KEY", raising=False)
    project = _keyed_vllm(tmp_path, "CHAT_API_KEY")
    try:
        r = run_play(project, ["vllm"], succeed=False)
        [(task, res)] = task_results(r, "failed")
        assert task == "The API key the instances ask of clients is set where the deploy runs", task
        assert "export CHAT_API_KEY=<the key> and deploy again" in res["msg"], res["msg"]
        assert not (tmp_path / "log" / "vllm-0.log").exists()
    finally:
        stop_all(tmp_path)


@pytest.mark.parametrize("api_key_env, sent", [("CHAT_API_KEY", "Bearer sk-warm-up-key"), ("", None)])
def test_the_warm_up_sends_the_api_key_and_the_play_does_not_show_it(tmp_path, monkeypatch, api_key_env, sent):
    """A vLLM that asks for a key refuses a prefill without it: the warm-up sends the key of the variable the spec
    names as a bearer token, and its task is no_log, so the play's output never holds the key; without
    serving.api_key_env it sends no Authorization header."""
    import http.server
    import threading

    seen: list[str | None] = []

    class Vllm(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(self.headers.get("Authorization"))
            self.send_response(200 if seen[-1] == sent else 401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Vllm)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("CHAT_API_KEY", "sk-warm-up-key")
    project = tmp_path / "project"
    (project / "group_vars" / "all").mkdir(parents=True)
    (project / "group_vars" / "all" / "warmup.yml").write_text(yaml.safe_dump({
        "warmup_model": "stand-in-model", "warmup_url_host": "127.0.0.1", "warmup_api_key_env": api_key_env,
        "warmup_prompts": [{"name": "system-0", "prompt": [1, 2, 3]}],
        "warmup_instances": [{"index": 0, "port": server.server_address[1], "devices": "0"}]}))
    try:
        r = run_play(project, ["warmup"])
        assert seen == [sent]
        assert "sk-warm-up-key" not in r.stdout.read()
    finally:
        server.shutdown()


def test_an_lmcache_server_that_never_listens_fails_at_the_timeout_with_its_log(tmp_path):
    project = tmp_path / "project"
    (project / "group_vars" / "all").mkdir(parents=True)
    port = free_port()
    (project / "group_vars" / "all" / "lmcache.yml").write_text(yaml.safe_dump(daemon_dirs(tmp_path) | {
        "lmcache_command_prefix": [str(_program(tmp_path, "hanging", HANGING))], "lmcache_mode": "mp",
        "lmcache_cpu_host": True, "lmcache_config": {}, "lmcache_config_file": str(tmp_path / "lmcache.yaml"),
        "lmcache_server_args": ["--host", "127.0.0.1", "--port", str(port)], "lmcache_host": "127.0.0.1",
        "lmcache_port": port, "lmcache_http_url_host": "127.0.0.1", "lmcache_http_port": free_port(), "lmcache_env": {},
        "lmcache_nvme_paths": [], "lmcache_nvme_own_volume": False,
        "lmcache_ready_timeout": 3}))
    try:
        r = run_play(project, ["lmcache"], succeed=False)
        [(task, res)] = task_results(r, "failed")
        assert task.endswith("lmcache-server"), task
        pid = pid_of(tmp_path / "run", "lmcache-server")
        assert res["state"] == "timeout"
        assert f"lmcache-server is running (pid {pid}) but was not ready within 3 s" in res["msg"], res["msg"]
        assert f"127.0.0.1:{port}" in res["msg"]
        assert "stand-in: waiting for a peer that never answers" in res["msg"], res["msg"]
        assert alive(pid), "a service that is merely slow is left running"
    finally:
        stop_all(tmp_path)


SYSTEMCTL = '''#!/bin/sh
# Stand-in systemctl: the unit runs at the first look; at the next, systemd has restarted it (it
# crashed in between and Restart=on-failure brought it back).
echo "$@" >> {calls}
n=$(wc -l < {calls})
if [ "$n" -le 1 ]; then pid=4242 restarts=0; else pid=4343 restarts=1; fi
printf 'ActiveState=active\\nSubState=running\\nMainPID=%s\\nNRestarts=%s\\n' "$pid" "$restarts"
'''

JOURNALCTL = '''#!/bin/sh
echo "$@" > {calls}
echo "Jan 01 00:00:00 gpu-0 vllm[4242]: stand-in journal: torch.OutOfMemoryError: CUDA out of memory"
'''


def test_a_unit_systemd_restarted_during_the_wait_has_exited_and_its_journal_is_shown(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("systemctl", SYSTEMCTL), ("journalctl", JOURNALCTL)):
        (fake / name).write_text(text.format(calls=tmp_path / f"{name}.calls"))
        (fake / name).chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    wait = {"name": "Wait", "ansible.builtin.include_role": {"name": "daemon", "tasks_from": "wait"},
            "vars": {"daemon_name": "kvplan-test", "daemon_init": "systemd", "daemon_wait_timeout": 60,
                     "daemon_wait_delay": 1, "daemon_wait_url": f"http://127.0.0.1:{free_port()}/health"}}
    r = run_play(project, [], tasks=[wait], path=[fake], succeed=False)
    [(task, res)] = task_results(r, "failed")
    assert task == "Wait until ready, or exited, for kvplan-test"
    assert res["state"] == "exited" and res["pid"] == 4343
    assert "kvplan-test exited during start-up" in res["msg"] and "restarted by systemd" in res["msg"], res["msg"]
    assert "stand-in journal: torch.OutOfMemoryError: CUDA out of memory" in res["msg"], res["msg"]
    assert (tmp_path / "journalctl.calls").read_text().split() == ["-u", "kvplan-test.service", "-n", "30", "--no-pager"]
    assert all(line.startswith("show kvplan-test.service ") for line in (tmp_path / "systemctl.calls").read_text().splitlines())


# ----------------------------------------------------------------------------------------------
# daemon, systemd mode: the unit file (systemd is installed here but not running, so the unit is
# checked with systemd-analyze rather than started)

TRICKY_ARGV = ["/usr/bin/python3", "-c", "import sys; print(sys.argv)",
               '{"type":"s3","note":"50% full","cost":"$y"}', "back\\slash", "it's", "two words"]


def _render_unit(tmp_path: Path, command: list[str]) -> Path:
    """The daemon role's unit.j2 rendered by Ansible for `command`, as kvplan-test.service under tmp_path."""
    project = tmp_path / "project"
    project.mkdir()
    unit = tmp_path / "kvplan-test.service"
    (project / "unit.yml").write_text(yaml.safe_dump([{
        "name": "Render the daemon role's unit", "hosts": "localhost", "gather_facts": False,
        "vars": {"daemon_name": "kvplan-test", "daemon_command": command, "daemon_chdir": "/", "daemon_user": "",
                 "daemon_stop_timeout": 30, "daemon_envfile": "/etc/kvplan/kvplan-test.env",
                 "daemon_secret_envfile": "/etc/kvplan/kvplan-test.secret.env"},
        "tasks": [{"name": "Unit", "ansible.builtin.template": {
            "src": str(ROLES / "daemon" / "templates" / "unit.j2"), "dest": str(unit), "mode": "0644"}}]}]))
    rendered = ansible_runner.run(private_data_dir=str(tmp_path), playbook="unit.yml", inventory=LOCALHOST, quiet=True,
                                  suppress_env_files=True, envvars={"PATH": f"{BIN}:{os.environ['PATH']}"})
    assert rendered.rc == 0, rendered.stdout.read()
    return unit


def test_systemd_reads_the_unit_with_the_exact_arguments(tmp_path):
    unit = str(_render_unit(tmp_path, TRICKY_ARGV))
    verify = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True, text=True)
    assert verify.returncode == 0 and not verify.stdout + verify.stderr, verify.stdout + verify.stderr
    dump = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True, text=True,
                          env={**os.environ, "SYSTEMD_LOG_LEVEL": "debug"})
    output = dump.stdout + dump.stderr
    # The debug dump shows the parsed command line shell-quoted, before systemd's exec-time "$$" -> "$".
    shown = next(line for line in output.splitlines() if "Command Line:" in line).split("Command Line:", 1)[1]
    argv = [arg.replace("\\$", "$").replace("$$", "$") for arg in shlex.split(shown)]
    assert argv == TRICKY_ARGV


def test_a_line_break_in_an_argument_cannot_add_a_line_to_the_unit(tmp_path):
    # S1c (issue 49): serving.host "127.0.0.1\nExecStartPre=..." once became a line of its own in the unit. A
    # forged value (the grammar refuses it at validate) is written as systemd's \n escape, inside its argument.
    attack = "127.0.0.1\nExecStartPre=/bin/touch /tmp/kvplan-pwn\r\nUser=root"
    unit = _render_unit(tmp_path, ["/usr/bin/python3", "-m", "http.server", "--bind", attack])
    lines = unit.read_text().splitlines()
    assert not [line for line in lines if line.startswith(("ExecStartPre=", "User="))], lines
    [exec_start] = [line for line in lines if line.startswith("ExecStart=")]
    assert exec_start.endswith('"--bind" "127.0.0.1\\nExecStartPre=/bin/touch /tmp/kvplan-pwn\\r\\nUser=root"'), exec_start
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
