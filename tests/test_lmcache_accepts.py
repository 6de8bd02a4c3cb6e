"""LMCache itself accepts what kvplan renders for it.

In-process mode: the lmcache.yaml the lmcache role writes (`lmcache_config | to_nice_yaml`) is loaded
with LMCache's own `LMCacheEngineConfig.from_file`; LMCache must not warn about any key, and it must
read back the chunk size, tier sizes and eviction policy that the simulator used (`Resolved`).

MP mode: `lmcache server` needs torch to build its argument parser, so the rendered
`lmcache_server_args` are checked against the parser's source instead: the flags that
`lmcache server` registers (`add_argument` calls reachable from its `add_arguments`, read with `ast`),
the choices it allows, the L2 adapter types and keys LMCache registers, and the keys of an
adapter's "eviction" block. The batch eviction kvplan simulates and writes out is LMCache's own
default, read from the same source.

LMCache is installed without its GPU dependencies (shared/reference/lmcache-vllm.md §7):
    pip install --no-deps lmcache==0.5.6 && pip install pyyaml requests
"""

from __future__ import annotations

import ast
import functools
import json
import logging
from pathlib import Path

import lmcache
import pytest
from ansible.plugins.filter.core import to_nice_yaml
from lmcache.v1.config import LMCacheEngineConfig

from kvplan.deploy.stack import MP_POLICY, build
from kvplan.errors import SpecError
from kvplan.resolve import Resolved, resolve
from kvplan.resolved_tiers import MP_EVICTION_RATIO, MP_EVICTION_WATERMARK
from kvplan.spec import load

from conftest import REPO, spec

LMCACHE = Path(lmcache.__file__).parent
SPECS = sorted((REPO / "examples").glob("*.yaml")) + sorted((REPO / "docs" / "examples").glob("*.yaml"))


def _resolved_examples(mode: str) -> list[Path]:
    """Example specs that validate and use this LMCache mode."""
    out = []
    for path in SPECS:
        try:
            r = resolve(load(path))
        except SpecError:
            continue
        if r.lmcache is not None and r.lmcache.mode == mode and r.router != "llm_d":    # llm_d: the Helm path only
            out.append(path)
    return out


def _stack(r: Resolved):
    """The role variables kvplan renders, with made-up host names (one per node)."""
    return build(r, [f"gpu-{i}" for i in range(r.nodes)], ["ceph-1"])


# Variants that reach the other branches of the in-process config: no nvme
# tier, no ddr tier (LMCache still stages chunks in CPU memory), and another eviction policy.
INPROCESS_VARIANTS = {
    "chat-llama2-13b, ddr and ceph only": dict(lmcache__nvme=None),
    "chat-llama2-13b, nvme only": dict(lmcache__ddr=None, lmcache__ceph=None),
    "chat-llama2-13b, LFU": dict(lmcache__ddr={"size": "8GB", "eviction": "LFU"},
                                 lmcache__nvme={"size": "1TB", "eviction": "LFU", "device": "gen4", "path": "/mnt/nvme0/lmcache"}),
    "chat-llama2-13b, nvme on two drives": dict(serving__gpus_per_node=2, serving__tensor_parallel=2,
                                                lmcache__nvme={"size": "1TB", "drives": 2, "layout": "per_drive",
                                                               "paths": ["/mnt/nvme0/lmcache", "/mnt/nvme1/lmcache"]}),
}
MP_VARIANTS = {
    "codegen-70b, no nvme": ("codegen-70b", dict(lmcache__nvme=None)),
}


def _inprocess_cases():
    cases = [pytest.param(lambda p=p: resolve(load(p)), id=p.name) for p in _resolved_examples("inprocess")]
    cases += [pytest.param(lambda c=c: resolve(spec("chat-llama2-13b", **c)), id=name) for name, c in INPROCESS_VARIANTS.items()]
    return cases


def _mp_cases():
    cases = [pytest.param(lambda p=p: resolve(load(p)), id=p.name) for p in _resolved_examples("mp")]
    cases += [pytest.param(lambda e=e, c=c: resolve(spec(e, **c)), id=name) for name, (e, c) in MP_VARIANTS.items()]
    return cases


def test_there_are_examples_of_both_modes():
    assert _resolved_examples("inprocess"), "no example uses in-process LMCache"
    assert _resolved_examples("mp"), "no example uses MP LMCache"


# ----------------------------------------------------------------------------------------------
# In-process mode: LMCacheEngineConfig.from_file


class _Records(logging.Handler):
    """Collects the records of LMCache's loggers (they do not propagate to the root logger)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def __enter__(self):
        self.loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict) if n.startswith("lmcache")]
        for lg in self.loggers:
            lg.addHandler(self)
        return self

    def __exit__(self, *exc):
        for lg in self.loggers:
            lg.removeHandler(self)


def _load_like_vllm(config: dict, tmp_path: Path) -> tuple[LMCacheEngineConfig, list[str]]:
    """Write lmcache.yaml as the lmcache role does and load it as vLLM's connector does."""
    path = tmp_path / "lmcache.yaml"
    path.write_text(to_nice_yaml(config))
    with _Records() as log:
        loaded = LMCacheEngineConfig.from_file(str(path))
    return loaded, [r.getMessage() for r in log.records if r.levelno >= logging.WARNING]


def test_an_unknown_key_is_noticed(tmp_path):
    """The check below would see LMCache's warning: a key it does not know is reported."""
    _, warnings = _load_like_vllm({"chunk_size": 256, "not_an_lmcache_key": 1}, tmp_path)
    assert any("Unknown configuration key: not_an_lmcache_key" in w for w in warnings), warnings


@functools.cache
def _inprocess_policies() -> frozenset[str]:
    """Names in LMCache's POLICY_MAPPING (the module imports torch, so it is read, not imported)."""
    tree = ast.parse((LMCACHE / "v1/storage_backend/cache_policy/__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "POLICY_MAPPING":
            return frozenset(k.value for k in node.value.keys)
    raise AssertionError("POLICY_MAPPING not found in lmcache's cache_policy package")


@functools.cache
def _storage_backend_strings() -> frozenset[str]:
    """Every string literal in LMCache's storage backends: where extra_config keys are read."""
    out = set()
    for path in (LMCACHE / "v1" / "storage_backend").rglob("*.py"):
        out |= {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return frozenset(out)


@pytest.mark.parametrize("resolved", _inprocess_cases())
def test_lmcache_loads_the_inprocess_config_as_planned(resolved, tmp_path):
    r = resolved()
    config = _stack(r).lmcache.lmcache_config
    loaded, warnings = _load_like_vllm(config, tmp_path)

    assert not [w for w in warnings if "Unknown configuration key" in w], warnings
    lm = r.lmcache
    ddr, nvme = lm.tier("ddr"), lm.tier("nvme")
    assert loaded.chunk_size == lm.chunk_size
    assert loaded.local_cpu is (ddr is not None)
    if ddr is not None:
        assert loaded.max_local_cpu_size == ddr.configured_gb
    else:
        assert 0 < loaded.max_local_cpu_size * 2**30 >= 2 * lm.chunk_bytes_per_rank, "staging space for two chunks"
    assert loaded.max_local_disk_size == (nvme.configured_gb if nvme else 0.0)
    if nvme is not None:   # every directory the simulator puts chunks in, in drive order; a worker takes paths[GPU % n]
        assert loaded.local_disk.split(",") == [path.rstrip("/") + "/" for path in lm.nvme_paths]
        assert loaded.local_disk_path_sharding == "by_gpu"
    local_tier = ddr or nvme
    assert loaded.cache_policy == (local_tier.eviction if local_tier else "LRU")
    assert loaded.cache_policy.upper() in _inprocess_policies()
    unread = set(loaded.extra_config or {}) - _storage_backend_strings()
    assert not unread, f"extra_config keys no LMCache storage backend reads: {unread}"


# ----------------------------------------------------------------------------------------------
# MP mode: the arguments of `lmcache server`


class ParserSource:
    """The argparse options a function in LMCache registers, read from its source.

    Follows calls from the function into other functions of LMCache (by the names its module
    imports or defines), as `lmcache server` composes its parser from several modules."""

    def __init__(self, root: Path):
        self.root = root
        self.options: dict[str, dict] = {}
        self._seen: set[tuple[str, str]] = set()

    def _path(self, module: str) -> Path:
        rel = Path(*module.split(".")[1:])
        return self.root / rel.with_suffix(".py") if (self.root / rel.with_suffix(".py")).exists() else self.root / rel / "__init__.py"

    @functools.cache
    def _tree(self, module: str) -> ast.Module:
        return ast.parse(self._path(module).read_text())

    def _names(self, module: str) -> dict[str, tuple[str, str]]:
        """name -> (module, function) for every lmcache import and top-level def of a module."""
        names = {}
        for node in ast.walk(self._tree(module)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lmcache"):
                for alias in node.names:
                    names[alias.asname or alias.name] = (node.module, alias.name)
        for node in self._tree(module).body:
            if isinstance(node, ast.FunctionDef):
                names[node.name] = (module, node.name)
        return names

    def _function(self, module: str, qualname: str) -> ast.FunctionDef | None:
        scope = self._tree(module).body
        *classes, name = qualname.split(".")
        for cls in classes:
            scope = next(n.body for n in scope if isinstance(n, ast.ClassDef) and n.name == cls)
        return next((n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name), None)

    def add(self, module: str, qualname: str) -> "ParserSource":
        if (module, qualname) in self._seen:
            return self
        self._seen.add((module, qualname))
        fn = self._function(module, qualname)
        if fn is None:
            return self
        names = self._names(module)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                self._option(node)
            elif isinstance(node.func, ast.Name) and node.func.id in names:
                self.add(*names[node.func.id])
        return self

    def _option(self, call: ast.Call) -> None:
        flags = [a.value for a in call.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        kw = {k.arg: k.value for k in call.keywords}
        action = kw.get("action")
        boolean = isinstance(action, ast.Constant) and action.value in ("store_true", "store_false")
        optional_bool = isinstance(action, ast.Attribute) and action.attr == "BooleanOptionalAction"
        choices = None
        if isinstance(kw.get("choices"), (ast.List, ast.Tuple)):
            values = kw["choices"].elts
            if all(isinstance(v, ast.Constant) for v in values):
                choices = {v.value for v in values}
        default = kw["default"].value if isinstance(kw.get("default"), ast.Constant) else None
        for flag in flags:
            self.options[flag] = {"value": not (boolean or optional_bool), "choices": choices, "default": default}
            if optional_bool:
                self.options["--no-" + flag[2:]] = {"value": False, "choices": None, "default": None}


@functools.cache
def _server_options() -> dict[str, dict]:
    """Options of `lmcache server` (lmcache/cli/commands/server.py, ServerCommand.add_arguments)."""
    options = ParserSource(LMCACHE).add("lmcache.cli.commands.server", "ServerCommand.add_arguments").options
    assert {"--l1-size-gb", "--eviction-policy", "--l2-adapter", "--chunk-size"} <= set(options), \
        "the parser source reader no longer finds lmcache server's options"
    return options


def _string_constants(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@functools.cache
def _l2_adapters() -> dict[str, frozenset[str]]:
    """Registered L2 adapter type -> the string literals of its module (where its keys are read)."""
    out = {}
    for path in sorted((LMCACHE / "v1/distributed/l2_adapters").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_l2_adapter_type"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                out[node.args[0].value] = frozenset(_string_constants(path))
    assert {"fs", "fs_native", "s3"} <= set(out)
    return out


@functools.cache
def _eviction_block() -> dict[str, object]:
    """The keys LMCache reads from an L2 adapter's "eviction" block, with their defaults (None: required): the
    `eviction_dict.get(key[, default])` calls of `_parse_eviction_config` in lmcache/v1/distributed/l2_adapters/config.py."""
    tree = ast.parse((LMCACHE / "v1/distributed/l2_adapters/config.py").read_text())
    parse = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_parse_eviction_config")
    keys = {}
    for node in ast.walk(parse):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and getattr(node.func.value, "id", None) == "eviction_dict" and isinstance(node.args[0], ast.Constant)):
            keys[node.args[0].value] = node.args[1].value if len(node.args) > 1 else None
    assert "eviction_policy" in keys, "the reader no longer finds how LMCache parses an adapter's eviction block"
    return keys


def test_the_batch_eviction_kvplan_simulates_is_lmcaches_default():
    """kvplan simulates MP mode's batch eviction at 80 %, 20 % at a time, and writes that into the server's
    arguments and every adapter's eviction block; it is what LMCache 0.5.6 does when told nothing."""
    options = _server_options()
    assert options["--eviction-trigger-watermark"]["default"] == MP_EVICTION_WATERMARK
    assert options["--eviction-ratio"]["default"] == MP_EVICTION_RATIO
    block = _eviction_block()
    assert (block["trigger_watermark"], block["eviction_ratio"]) == (MP_EVICTION_WATERMARK, MP_EVICTION_RATIO)


def _parse_server_args(args: list[str]) -> list[tuple[str, str | None]]:
    """(flag, value) pairs, checked against lmcache server's options."""
    options, pairs, i = _server_options(), [], 0
    while i < len(args):
        flag = args[i]
        assert flag in options, f"lmcache server has no option {flag!r}"
        if options[flag]["value"]:
            assert i + 1 < len(args), f"{flag} needs a value"
            value = args[i + 1]
            choices = options[flag]["choices"]
            assert choices is None or value in choices, f"{flag} {value!r} is not one of {sorted(choices)}"
            pairs.append((flag, value))
            i += 2
        else:
            pairs.append((flag, None))
            i += 1
    return pairs


def test_the_parser_source_reader_sees_choices():
    """The reader finds what the checks rely on: the L1 eviction policies LMCache accepts."""
    assert _server_options()["--eviction-policy"]["choices"] == {"LRU", "ARC", "IsolatedLRU", "noop"}
    with pytest.raises(AssertionError, match="no option"):
        _parse_server_args(["--l1-size", "1"])


def test_the_http_server_module_takes_the_same_arguments_as_lmcache_server():
    """`python -m lmcache.v1.multiprocess.http_server` can stand in for `lmcache server` where the
    CLI is not on PATH (lmcache_command_prefix); the plain `...multiprocess.server` cannot: it has
    no HTTP frontend, so it refuses --http-host."""
    http_server = ParserSource(LMCACHE).add("lmcache.v1.multiprocess.http_server", "parse_args").options
    plain_server = ParserSource(LMCACHE).add("lmcache.v1.multiprocess.server", "parse_args").options
    assert set(http_server) == set(_server_options())
    assert "--http-host" not in plain_server


@pytest.mark.parametrize("resolved", _mp_cases())
def test_lmcache_server_accepts_the_mp_arguments(resolved):
    r = resolved()
    pairs = _parse_server_args(_stack(r).lmcache.lmcache_server_args)
    values = dict(pairs)
    lm = r.lmcache

    assert int(values["--chunk-size"]) == lm.chunk_size
    assert float(values["--l1-size-gb"]) == lm.tier("ddr").configured_gb
    assert values["--eviction-policy"] == MP_POLICY.get(lm.tier("ddr").eviction, lm.tier("ddr").eviction)
    assert float(values["--eviction-trigger-watermark"]) == lm.eviction_watermark
    assert float(values["--eviction-ratio"]) == lm.eviction_ratio

    adapters = [json.loads(v) for f, v in pairs if f == "--l2-adapter"]
    lower = [t for t in lm.tiers if t.name != "ddr"]
    assert len(adapters) == len(lower), "one L2 adapter per tier below DDR, in lookup order"
    base_keys = _string_constants(LMCACHE / "v1/distributed/l2_adapters/config.py")
    policies = _server_options()["--eviction-policy"]["choices"]
    for adapter, tier in zip(adapters, lower):
        assert adapter["type"] in _l2_adapters(), f"unknown L2 adapter type {adapter['type']!r}"
        unknown = set(adapter) - {"type"} - _l2_adapters()[adapter["type"]] - base_keys
        assert not unknown, f"{adapter['type']} adapter keys LMCache does not read: {unknown}"
        assert adapter["eviction"]["eviction_policy"] in policies
        assert set(adapter["eviction"]) <= set(_eviction_block()), "eviction keys LMCache does not read"
        assert (adapter["eviction"]["trigger_watermark"], adapter["eviction"]["eviction_ratio"]) == \
               (lm.eviction_watermark, lm.eviction_ratio)
        assert adapter["max_capacity_gb"] == tier.configured_gb
