"""Variants: one spec turned into many by `--vary PATH=V1,V2,...`.

A *vary* names a dotted spec path (`serving.instances`, `lmcache.ddr.size`,
`workload.arrivals.rate`) and the values to try there. Each value is read as a YAML scalar, so it
means what it would mean in the spec file: `64GiB`, `1/s` and `50ms` keep their units, `4` is a
number, `LFU` a string. Two values have a special meaning:

- `null` (or `~`) removes the key, so its default applies (or the section is left out);
- `0` as the size of an LMCache tier (`lmcache.ddr.size`, `lmcache.nvme.size`,
  `lmcache.ceph.size`) removes that tier, as if the spec never had it. (In `mp` mode ddr is the
  LMCache server's L1 and cannot be removed; the loader says so, with the fix.)

One path is not a spec key: `offload.engine=lmcache,native` moves the spec's host-memory tier between
LMCache and vLLM's native offloading (engines.py says how).

Several varies combine as a cartesian product (every combination, the first vary changing
slowest), or with `zip` position by position (all lists the same length). Every variant is a
full spec validated by the normal loader, with the original spec's folder as its base, so
relative trace paths still work; a variant the loader refuses is reported with the variant's
values, the field and the fix, before anything runs.
"""

from __future__ import annotations

import copy
import itertools
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from ..errors import Problem, SpecError, did_you_mean
from ..resolve import resolve
from ..spec import bounds, from_mapping
from ..spec.topology import Topology
from .engines import PATH as ENGINE_PATH, apply_engine

TIER_SIZES = ("lmcache.ddr.size", "lmcache.nvme.size", "lmcache.ceph.size")


class VaryUsageError(ValueError):
    """A --vary or --zip that cannot be read at all (the CLI's usage error, exit 2)."""


@dataclass(frozen=True)
class Vary:
    """One --vary: a dotted spec path and the values to try, as written and as parsed."""

    path: str
    texts: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Variant:
    """One point of a sweep: the value (as written) of each varied path, and the full spec."""

    values: tuple[tuple[str, str], ...]
    spec: Topology

    @property
    def label(self) -> str:
        return ", ".join(f"{path}={text}" for path, text in self.values)


def parse_vary(text: str) -> Vary:
    """`PATH=V1,V2,...` -> Vary; raises VaryUsageError naming what is wrong."""
    path, eq, rest = text.partition("=")
    path = path.strip()
    if not eq or not path:
        raise VaryUsageError(f"'{text}' is not PATH=V1,V2,...; write e.g. serving.instances=2,4,8")
    parts = path.split(".")
    if any(not p for p in parts):
        raise VaryUsageError(f"'{path}' is not a dotted spec path; write e.g. lmcache.ddr.size")
    texts = tuple(v.strip() for v in rest.split(","))
    if any(not t for t in texts):
        raise VaryUsageError(f"'{text}' has an empty value; list the values separated by commas, e.g. {path}=1,2")
    values = []
    for t in texts:
        try:
            value = bounds.load(t)          # a tag that cannot build its value (!!int 0b102) is a YAML error too
        except (yaml.YAMLError, SpecError):
            raise VaryUsageError(f"'{t}' in --vary {path} is not a YAML scalar; quote it or write it as in the spec") from None
        if isinstance(value, (dict, list)):
            raise VaryUsageError(f"'{t}' in --vary {path} is a YAML {type(value).__name__}; "
                                 "vary one scalar field at a time (e.g. lmcache.ddr.size)")
        values.append(value)
    return Vary(path, texts, tuple(values))


def check_path(path: str) -> None:
    """Refuse a path the spec does not have (the problem names the key, the keys allowed and a guess)."""
    if path == ENGINE_PATH:
        return
    current: Any = Topology
    done: list[str] = []
    keys = path.split(".")
    for depth, key in enumerate(keys):
        model = _model(current)
        if model is None:
            if _is_mapping(current):
                return                                # a free-form mapping (ceph.options, ...): any key
            raise SpecError([Problem(f"--vary {path}", f"{'.'.join(done)} is a single value, not a section",
                                     fix=f"vary {'.'.join(done)} itself")])
        if key not in model.model_fields:
            known = sorted(model.model_fields)
            guess = did_you_mean(key, known)
            where = f" in {'.'.join(done)}" if done else ""
            raise SpecError([Problem(f"--vary {path}", f"unknown key '{key}'{where}", None, ", ".join(known),
                                     f"did you mean '{'.'.join([*done, guess, *keys[depth + 1:]])}'?" if guess else "use one of the allowed keys")])
        current = model.model_fields[key].annotation
        done.append(key)


def _model(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in typing.get_args(tp):
        found = _model(arg)
        if found is not None:
            return found
    return None


def _is_mapping(tp: Any) -> bool:
    """A dict field, or a union with a dict in it."""
    if tp is dict or typing.get_origin(tp) is dict:
        return True
    return any(_is_mapping(a) for a in typing.get_args(tp))


def apply(data: dict, path: str, value: Any, base_dir: str | Path | None = None) -> dict:
    """A copy of `data` with `path` set to `value` (None removes the key; 0 for a tier size removes the tier);
    `base_dir` is where the spec's relative paths are read from."""
    data = copy.deepcopy(data)
    if path == ENGINE_PATH:
        return apply_engine(data, value, base_dir)
    keys = path.split(".")
    if path in TIER_SIZES and value == 0 and not isinstance(value, bool):
        keys, value = keys[:-1], None
    node = data
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            if value is None:
                return data                            # removing below a section that is not there
            child = node[key] = {}
        if not isinstance(child, dict):
            where = ".".join(keys[:depth + 1])
            raise SpecError([Problem(f"--vary {path}", f"{where} is {child!r} in the spec, not a section", child,
                                     fix=f"write {where} as a mapping in the spec, or vary {where} itself")])
        node = child
    if value is None:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value
    return data


def expand(data: dict, varies: list[Vary], zip_: bool = False, base_dir: str | Path | None = None,
           source: str | None = None) -> list[Variant]:
    """Every variant of the spec mapping `data`, validated; a SpecError lists all refused variants."""
    paths = [v.path for v in varies]
    duplicates = sorted({p for p in paths if paths.count(p) > 1})
    if duplicates:
        raise VaryUsageError(f"--vary {duplicates[0]} is given twice; list all its values in one --vary")
    for vary in varies:
        check_path(vary.path)
    if zip_:
        lengths = {len(v.values) for v in varies}
        if len(lengths) > 1:
            counts = ", ".join(f"{v.path} has {len(v.values)}" for v in varies)
            raise VaryUsageError(f"--zip pairs values position by position, but {counts}; give every --vary "
                                 "the same number of values, or leave out --zip for every combination")
        combos = list(zip(*(list(zip(v.texts, v.values)) for v in varies)))
    else:
        combos = list(itertools.product(*(list(zip(v.texts, v.values)) for v in varies)))
    variants, problems = [], []
    for combo in combos:
        changed = data
        values = tuple((vary.path, text) for vary, (text, _) in zip(varies, combo))
        label = ", ".join(f"{p}={t}" for p, t in values)
        try:
            for vary, (_, value) in zip(varies, combo):
                changed = apply(changed, vary.path, value, base_dir)
            topo = from_mapping(changed, base_dir=base_dir)
            resolve(topo)                              # catalog checks too, before anything runs
            variants.append(Variant(values, topo))
        except SpecError as exc:
            problems += [Problem(p.path, f"{p.message} (in variant {label})", p.value, p.allowed, p.fix)
                         for p in exc.problems]
    if problems:
        raise SpecError(problems, source)
    return variants


__all__ = ["TIER_SIZES", "Variant", "Vary", "VaryUsageError", "apply", "check_path", "expand", "parse_vary"]
