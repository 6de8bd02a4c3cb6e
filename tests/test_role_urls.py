"""Every URL the rendered roles ask for, and every URL among the variables kvplan renders, is a URL for any
address the spec may give (issue 49): an IPv6 address in brackets, a link-local address's scope id as `%25`
(RFC 6874), which urllib (Ansible's uri, the daemon probe, the S3 module) reads back as the address it connects to.

The URLs are found in the rendered roles' task files, so a URL added to a role is held to this as well."""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import jinja2
import pytest

from conftest import REPO, spec
from kvplan.deploy import ansible_yaml, inventory as inventory_mod
from kvplan.deploy.render import render
from kvplan.deploy.secrets import Secrets
from kvplan.resolve import resolve

KEYS = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")
LOCAL = inventory_mod.load(REPO / "inventories" / "local")
URL_KEYS = {"url", "endpoint", "daemon_wait_url"}
SCHEME = re.compile(r"[a-z][a-z0-9+.-]*://")


def strings(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, string) for every string in a loaded YAML document, with the mapping key it sits under."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from strings(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from strings(v, key)
    elif isinstance(value, str):
        yield key, value


def rendered(addr: str, tmp_path: Path, rgw: str | None = None) -> Path:
    """The local example rendered with vLLM, the metrics (Prometheus, LMCache's HTTP API) and RGW at `addr`."""
    r = resolve(spec("local", serving__host=addr, ceph__rgw__address=rgw or addr, monitoring__metrics_address=addr,
                     lmcache__warmup={"system_prompts": 1}))
    return render(r, LOCAL, tmp_path / "run", KEYS).root / "project"


def role_vars(project: Path) -> dict[str, Any]:
    """What a play on the one host of the local inventory sees of kvplan's variables."""
    found: dict[str, Any] = {}
    for path in sorted((project / "group_vars" / "all").glob("*.yml")) + [project / "host_vars" / "localhost.yml"]:
        found |= ansible_yaml.load(path.read_text())
    return found


def role_urls(project: Path, variables: dict[str, Any]) -> dict[str, list[str]]:
    """Each role task file -> the URLs its tasks ask for, templated with the rendered variables (the loops' items:
    the host's first instance and warm-up prompt). An undefined variable fails the test: a URL is not guessed. The
    daemon role asks for the daemon_wait_url its callers pass, which are found at the callers."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    instance = variables["vllm_instances"][0]
    loop = {"vllm_instance": instance, "item": [variables["warmup_prompts"][0], instance]}
    out: dict[str, list[str]] = {}
    for path in sorted(p for p in (project / "roles").glob("*/tasks/*.yml") if p.parts[-3] != "daemon"):
        for key, text in strings(ansible_yaml.load(path.read_text())):
            if key in URL_KEYS or "http://" in text:
                out.setdefault(str(path.relative_to(project / "roles")), []).append(
                    env.from_string(text).render(variables | loop))
    return out


def connects_to(url: str) -> str:
    """host:port that urllib connects to for `url`, after checking that it parses as a URL with a port."""
    parts = urllib.parse.urlsplit(url)
    assert parts.scheme == "http" and parts.port, url
    assert ":" not in parts.hostname or parts.netloc.startswith("["), f"an IPv6 address without brackets: {url}"
    return urllib.request.Request(url).host


@pytest.mark.parametrize(("addr", "written"), [("::1", "[::1]"), ("fe80::1%eth0", "[fe80::1%25eth0]")])
def test_every_url_the_roles_ask_for_brackets_an_ipv6_address(tmp_path, addr, written):
    project = rendered(addr, tmp_path)
    variables = role_vars(project)
    urls = role_urls(project, variables)
    # the vLLM and router health checks, Prometheus readiness, LMCache's /status, RGW's wait and its bucket, the warm-up
    assert {"vllm/tasks/main.yml", "router/tasks/main.yml", "monitoring/tasks/service.yml", "lmcache/tasks/mp.yml", "ceph/tasks/wait_rgw.yml",
            "ceph/tasks/rgw.yml", "warmup/tasks/main.yml"} <= set(urls), sorted(urls)
    for role_file, found in urls.items():
        for url in found:
            assert url.startswith(f"http://{written}:"), (role_file, url)
            # urllib reads %25 back as the '%' of the scope id: the address the spec gave is where it connects
            assert connects_to(url).rsplit(":", 1)[0] == f"[{addr}]", (role_file, url)


@pytest.mark.parametrize("addr", ["::1", "fe80::1%eth0"])
def test_every_url_among_the_rendered_variables_is_a_url(tmp_path, addr):
    variables = role_vars(rendered(addr, tmp_path))
    urls = [text for _, text in strings(variables) if SCHEME.match(text)]
    assert {variables["router_url"], variables["ceph_rgw_endpoint"]} <= set(urls)
    for url in urls:
        # the router's workers are the inventory's addresses (loopback); the rest are the spec's
        assert connects_to(url).rsplit(":", 1)[0] in (f"[{addr}]", "127.0.0.1"), url


def test_host_port_values_bracket_an_ipv6_address_and_keep_its_scope_id(tmp_path):
    # not URLs: Prometheus's --web.listen-address and its own scrape target take the scope id as it is
    variables = role_vars(rendered("fe80::1%eth0", tmp_path))
    assert variables["monitoring_web_listen_address"] == "[fe80::1%eth0]:9090"
    assert variables["monitoring_self_target"] == "[fe80::1%eth0]:9090"


def test_every_address_on_a_wildcard_is_reached_on_loopback(tmp_path):
    variables = role_vars(rendered("::", tmp_path, rgw="fd00::10"))
    assert (variables["vllm_url_host"] == variables["warmup_url_host"] == variables["monitoring_url_host"]
            == variables["lmcache_http_url_host"] == "127.0.0.1")
    assert variables["ceph_rgw_endpoint"] == "http://[fd00::10]:7480"
    assert variables["monitoring_web_listen_address"] == "[::]:9090"
    assert variables["monitoring_self_target"] == "127.0.0.1:9090"


def test_the_s3_module_signs_the_host_header_urllib_sends(monkeypatch):
    # RGW checks the signature against the Host header it receives: for a link-local endpoint urllib sends the scope
    # id with '%', not the URL's %25
    import importlib.util

    path = REPO / "templates" / "roles" / "ceph" / "library" / "kvplan_s3_bucket.py"
    loaded = importlib.util.spec_from_file_location("kvplan_s3_bucket", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    sent: list[urllib.request.Request] = []

    class Answer:
        status = 200

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            return b""

    monkeypatch.setattr(module.urllib.request, "urlopen", lambda req, timeout: sent.append(req) or Answer())
    s3 = module.S3("http://[fe80::1%25eth0]:7480", "default", "AKIAEXAMPLEEXAMPLE00", "example-secret")
    assert s3.request("GET", "/kvcache") == (200, b"")
    [req] = sent
    assert s3.host == req.host == "[fe80::1%eth0]:7480"
    assert "SignedHeaders=host;" in req.get_header("Authorization")
