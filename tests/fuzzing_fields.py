"""Fuzz cases that know a field's kind, so that most of them get past validation to `resolve`, the simulator,
`size` and the render: tests/fuzzing.py's mutations put any value anywhere, and nearly all of its specs are
refused before any of that runs. Each strategy here is one of issue 49's kinds of hostile input:

- `kept_valid_specs`: a spec that resolves, each change keeping its field's kind (a value another example gives
  the same field, or a number scaled within its unit): the share that reaches the simulator is measured;
- `edge_specs`: zero and extreme rates, sizes, durations and counts, each written in its field's own unit;
- `tagged_texts`: a field's value given a YAML tag it does not fit (`!!int 0b102`, `!!float 'x'`, ...);
- `hostile_host_specs`: every host field (serving.host, monitoring.metrics_address, ceph.rgw.address) given an
  address with a scope id, a line break, a template or a command in it, besides well-formed ones.

A case passes when each stage it reaches ends in a result or a SpecError (`reach` runs them and says how far it
got); tests/test_fuzz.py runs them on every CI, benchmarks/fuzz.py many more.
"""

from __future__ import annotations

import copy
import functools
import re
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from fuzzing import EXAMPLES, PARSED, REPO, _parent, _paths

DIRS = {p.name: p.parent for p in EXAMPLES}
REQUESTS = 30
"""Requests a case simulates: enough to run every part of the simulator, few enough for CI."""


def _field(path: tuple) -> tuple:
    """A key path with list indices left out: the field a value is given for, in any example."""
    return tuple(part for part in path if not isinstance(part, int))


def _leaves(data: Any) -> list[tuple]:
    return [p for p in _paths(data) if not isinstance(_parent(data, p)[p[-1]], (dict, list))]


VALUES = {}
"""Field -> every scalar value a shipped example gives it (what `kept_valid_specs` swaps in)."""
for _data in PARSED.values():
    for _path in _leaves(_data) if isinstance(_data, dict) else []:
        _value = _parent(_data, _path)[_path[-1]]
        VALUES.setdefault(_field(_path), [])
        if _value not in VALUES[_field(_path)]:
            VALUES[_field(_path)].append(_value)


@functools.cache
def seeds() -> list[str]:
    """The examples that resolve as they are (some are shipped mistakes): the starting points here."""
    from kvplan.errors import SpecError
    from kvplan.resolve import resolve
    from kvplan.validation import from_mapping

    good = []
    for name in sorted(PARSED):
        try:
            resolve(from_mapping(capped(PARSED[name]), base_dir=DIRS[name]))
            good.append(name)
        except (SpecError, TypeError, KeyError):
            pass
    return good


def capped(data: Any) -> Any:
    """`data` with at most REQUESTS requests (unless its workload is staged: stages end by themselves)."""
    data = copy.deepcopy(data)
    workload = data.get("workload") if isinstance(data, dict) else None
    if isinstance(workload, dict) and "stages" not in workload:
        workload["requests"] = min(workload["requests"], REQUESTS) if type(workload.get("requests")) is int \
            else REQUESTS
    return data


# ---- numbers with their units

_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)\s*([A-Za-z%/][A-Za-z%/ ]*)$")
_RATE = ("/s", "/min", "/h")
_SIZE = ("B", "KB", "MB", "GB", "TB", "PB", "KiB", "MiB", "GiB", "TiB", "PiB")
_TIME = ("ns", "us", "ms", "s", "m", "min", "h", "d")


def _unit_kind(unit: str) -> str:
    if unit.endswith("B/s") or unit.endswith("bps"):
        return "bandwidth"
    if unit.startswith(_RATE):
        return "rate"
    if unit in _SIZE:
        return "size"
    if unit in _TIME:
        return "duration"
    return "other"


EDGES = {
    "rate": ["0/s", "1e-300/s", "0.000001/s", "1e300/s", "99999999999999999999999/s"],
    "size": ["0B", "1B", "0GiB", "1e300TB", "99999999999999999999999GiB"],
    "duration": ["0s", "1ns", "1e300s", "99999999999999999999999h"],
    "bandwidth": ["0GB/s", "1e-300GB/s", "1e300GB/s"],
    "other": ["0", "1e300"],
    "int": [0, 1, 2, -1, 2 ** 31, 2 ** 63, 99999999999999999999999],
    "float": [0.0, 5e-324, 1e-300, 1.0, 1e308],
}
"""Zero and extreme values of each kind of number, written the way the field writes its own."""

KNOWN = [(("workload", "arrivals", "rate"), "0/s"), (("workload", "arrivals", "session_rate"), "0/s"),
         (("monitoring", "scrape_interval"), "0s"), (("serving", "max_num_batched_tokens"), 99999999999999999999999),
         (("serving", "max_num_seqs"), 0), (("lmcache", "chunk_size"), 0), (("serving", "kv_cache_memory"), "0B"),
         (("workload", "sessions", "turns"), 2 ** 31), (("workload", "prompt", "max"), 2 ** 63),
         (("workload", "output"), 2 ** 63), (("workload", "shared_prefixes", "tokens"), 2 ** 63),
         (("workload", "arrivals", "rate"), "1e300/s")]
"""Edges that once crashed kvplan (issue 49), set even where the example leaves the field out."""


def _kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    match = _UNIT.match(value) if isinstance(value, str) else None
    return _unit_kind(match.group(2).strip()) if match else None


def _scaled(value: Any, factor: float) -> Any:
    """`value` times `factor`, in its own kind: an int stays an int of at least 1, a unit keeps its unit."""
    if isinstance(value, int):
        return max(1, round(value * factor))
    if isinstance(value, float):
        return value * factor if value > 1 else value * min(factor, 1.0)
    number, unit = _UNIT.match(value).groups()
    return f"{float(number) * factor:g}{'' if unit.startswith('/') else ' '}{unit.strip()}".replace(" /", "/")


def _set(data: dict, path: tuple, value: Any) -> None:
    """Set `path` in `data`, making the mappings on the way where they are missing."""
    node = data
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


STRUCTURE = ("kind", "mode")
"""Fields that choose which other fields a section has (workload.kind, lmcache.mode): left as they are."""


@st.composite
def kept_valid_specs(draw) -> tuple[str, dict]:
    """(example, its spec with one to three changes that each keep the field's kind): a value another example
    gives the same field, or a number scaled by 1/2 to 2 in its unit. Requests capped at REQUESTS."""
    name = draw(st.sampled_from(seeds()))
    data = capped(PARSED[name])
    for _ in range(draw(st.integers(1, 3))):
        leaves = [p for p in _leaves(data) if p[:2] != ("workload", "requests") and p[-1] not in STRUCTURE]
        path = draw(st.sampled_from(leaves))
        parent, value = _parent(data, path), _parent(data, path)[path[-1]]
        others = [v for v in VALUES.get(_field(path), []) if v != value]
        if _kind(value) is not None and (not others or draw(st.booleans())):
            parent[path[-1]] = _scaled(value, draw(st.sampled_from([0.5, 0.75, 1.25, 1.5, 2.0])))
        elif others:
            parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(others)))
    return name, data


@st.composite
def edge_specs(draw) -> tuple[str, dict]:
    """(example, its spec with one or two numbers at an edge of their kind: zero, the smallest, the largest,
    past 64 bits), or one of KNOWN's edges. Requests capped at REQUESTS."""
    name = draw(st.sampled_from(seeds()))
    data = capped(PARSED[name])
    if draw(st.integers(0, 3)) == 0:
        path, value = draw(st.sampled_from(KNOWN))
        _set(data, path, value)
        return name, data
    kinds = {p: _kind(_parent(data, p)[p[-1]]) for p in _leaves(data) if p[:2] != ("workload", "requests")}
    numbers = [p for p, kind in kinds.items() if kind is not None]
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(numbers))       # the kind as the example writes it: an edge set before may not
        _parent(data, path)[path[-1]] = draw(st.sampled_from(EDGES[kinds[path]]))   # read as one ("0" has no unit)
    return name, data


def changes(name: str, data: Any) -> str:
    """What a case changed in its example, as `path=value` (for a report of what broke)."""
    before, out = capped(PARSED[name]), []
    for path in _leaves(data):
        try:
            old = _parent(before, path)[path[-1]]
        except (KeyError, IndexError, TypeError):
            old = object()
        new = _parent(data, path)[path[-1]]
        if old != new:
            out.append(f"{'.'.join(map(str, path))}={new!r}")
    return ", ".join(out)


# ---- YAML tags

TAGS = ["!!int 0b102", "!!int 0x", "!!int ''", "!!int 1.5", "!!int 0o9", "!!int 99999999999999999999999",
        "!!float 'x'", "!!float ''", "!!float .inf", "!!float 1e999", "!!float 0x1p3", "!!bool maybe", "!!bool ''",
        "!!null x", "!!str", "!!binary '***'", "!!timestamp 2001-13-45", "!!timestamp x", "!!seq x", "!!map x",
        "!!omap [1]", "!!set [1]", "!!pairs x", "!<tag:yaml.org,2002:int> 0b2", "!!python/name:os.system",
        "!local x", "!!merge x", "!!value x", "!!int", "!!float", "! 5", "!!int !!float 1"]
"""YAML tags a field's value does not fit: wrong kind, malformed literal, unknown or unsafe tag."""

_SCALAR_LINE = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*):[ \t]+([^\s#{\[&*!|>][^#\n]*?)[ \t]*(#.*)?$", re.M)


@st.composite
def tagged_texts(draw) -> tuple[str, str]:
    """(example, its text with one field's scalar value replaced by a tag from TAGS)."""
    name = draw(st.sampled_from(seeds()))
    text = next(p for p in EXAMPLES if p.name == name).read_text()
    lines = list(_SCALAR_LINE.finditer(text))
    line = draw(st.sampled_from(lines))
    tagged = f"{line.group(1)}{line.group(2)}: {draw(st.sampled_from(TAGS))}"
    return name, text[:line.start()] + tagged + text[line.end():]


def with_tag(name: str, key: str, tag: str) -> str:
    """An example's text with `key`'s value (the first line that sets it) replaced by `tag` (issue 49's cases)."""
    text = next(p for p in EXAMPLES if p.name == name).read_text()
    line = next(m for m in _SCALAR_LINE.finditer(text) if m.group(2) == key)
    return text[:line.start()] + f"{line.group(1)}{key}: {tag}" + text[line.end():]


# ---- hosts

HOST_FIELDS = [("serving", "host"), ("monitoring", "metrics_address"), ("ceph", "rgw", "address")]
"""Every field of the spec that names a host (kvplan.spec.grammar.HostName)."""
GOOD_HOSTS = ["10.0.0.5", "0.0.0.0", "127.0.0.1", "::1", "fe80::1%eth0", "2001:db8::1", "ceph-1.example.com",
              "rgw.kvplan.internal", "localhost"]
BAD_HOSTS = ["fe80::1%eth0\n- hosts: all", "fe80::1%{{ lookup('pipe', 'id') }}", "fe80::1%$(id)", "fe80::1%`id`",
             "::1%eth0 x", "fe80::1%", "fe80::1%" + "e" * 300, "10.0.0.1\nx", "{{ x }}", "$(reboot)", "a b",
             "-oProxyCommand=id", "host;id", "[::1]:80", "10.0.0.1:80", "é.example.com", "x" * 300, "", "\x1b[2J",
             "10.0.0.1\r", "host\x00", "1.2.3.4.5", "::1::", "[/]", "*", "host/x"]
"""Host values with a line break, template, command, control character, port, scope id or odd form in them."""
HOSTILE = re.compile(r"[\s{}$`;'\"\\\x00-\x1f\x7f\[\]*/]")
"""What an accepted host must never hold: it reaches /etc/hosts, Prometheus's targets and vLLM's command line."""


@st.composite
def hostile_host_specs(draw) -> tuple[str, dict, dict[tuple, str]]:
    """(example, its spec with one to three host fields set, the values set by field): each value hostile
    (BAD_HOSTS) or well-formed (GOOD_HOSTS), so that some cases get through validation with a hostile one
    beside them. ceph.rgw.address is set only where the example has a ceph section."""
    name = draw(st.sampled_from(seeds()))
    data = capped(PARSED[name])
    fields = [f for f in HOST_FIELDS if f[0] != "ceph" or isinstance(data.get("ceph"), dict)]
    chosen = draw(st.lists(st.sampled_from(fields), min_size=1, max_size=len(fields), unique=True))
    values = {}
    for field in chosen:
        values[field] = draw(st.sampled_from(BAD_HOSTS if draw(st.booleans()) else GOOD_HOSTS))
        _set(data, field, values[field])
    return name, data, values


# ---- how far a case gets

STAGES = ("refused", "resolved", "simulated")


def reach(name: str, data: Any = None, text: str | None = None, render: bool = False, max_wall: float = 10.0) -> str:
    """Run a case as far as it goes: validate and resolve (from `data`, or from `text` as a spec file, its requests
    capped as `capped` does), then
    simulate and `size` it, and render it for inventories/local when `render`. Returns how far it got (one of
    STAGES); a SpecError at any stage is a clean end, any other exception escapes (a bug)."""
    from kvplan.errors import SpecError
    from kvplan.resolve import resolve
    from kvplan.sim.run import Bounds, run
    from kvplan.sizing import size
    from kvplan.validation import from_mapping, load

    try:
        if text is not None:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / name
                path.write_text(text, encoding="utf-8", errors="surrogatepass")
                topology = _capped_topology(load(path))
        else:
            topology = from_mapping(data, base_dir=DIRS[name])
        resolved = resolve(topology)
    except SpecError:
        return "refused"
    try:
        run(resolved, bounds=Bounds(max_wall=max_wall))
        size(topology)
    except SpecError:
        return "resolved"
    if render:
        _render(resolved)
    return "simulated"


def _capped_topology(topology):
    """A spec read from text with at most REQUESTS requests, as `capped` does for a mapping."""
    w = topology.workload
    if w.stages is not None or (w.requests is not None and w.requests <= REQUESTS):
        return topology
    return topology.model_copy(update={"workload": w.model_copy(update={"requests": REQUESTS})})


_INVENTORY: list = []


def _render(resolved) -> None:
    """Render the resolved spec for inventories/local into a new folder (a SpecError is a clean refusal)."""
    from kvplan.deploy import inventory
    from kvplan.deploy.render import render
    from kvplan.deploy.secrets import Secrets
    from kvplan.errors import SpecError

    if not _INVENTORY:
        _INVENTORY.append(inventory.load(REPO / "inventories" / "local"))
    keys = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")
    with tempfile.TemporaryDirectory() as folder:
        try:
            render(resolved, _INVENTORY[0], Path(folder) / "render", keys)
        except SpecError:
            pass
