"""Overrides: `--set PATH=VALUE`, a spec field changed for one run without editing the file.

Every command that reads a spec takes `--set` (repeatable), as Helm's `--set` and NVIDIA AISimulate's do:

- PATH is a dotted spec path (`serving.max_num_seqs`, `lmcache.ddr.size`, `workload.arrivals.rate`); a list item
  is named by its index (`workload.stages.0.rate`), which the spec must have;
- the path must name a field of the spec schema (`kvplan schema`): one the file sets, or one it leaves to its
  default, so `--set serving.max_num_batched_tokens=8192` works on a spec that never wrote it. A path naming no
  field is refused with the keys allowed there and a "did you mean" (a typo would otherwise set nothing);
  below a free-form mapping (`ceph.options`) any key is allowed, as in the file;
- VALUE is read as YAML, exactly as it would be in the spec file: `2TB`, `50ms` and `40/s` keep their units, `128`
  is a number, `true` a boolean, `[a, b]` a list; `null` removes the key so its default applies;
- they apply left to right, so a later `--set` of the same path wins, and the spec is validated after all of them,
  by the same loader as the file (a bad value names its field and says it came from --set).

The file itself is never changed. Each change is echoed on stderr (`set: serving.max_num_seqs 256 -> 128`) and
the result files a command writes keep the overrides (their `overrides` key), so a result says what it ran.
"""

from __future__ import annotations

import copy
import typing
from dataclasses import dataclass
from typing import Any, Iterable

import yaml
from pydantic import BaseModel, SerializerFunctionWrapHandler, model_serializer

from ..errors import Problem, SpecError, did_you_mean
from . import bounds

OPTION = "--set"


class SetUsageError(ValueError):
    """A --set that cannot be read or names no spec field (the CLI's usage error, exit 2); its text says what
    is wrong, what is allowed and the fix."""


@dataclass(frozen=True)
class Override:
    """One --set: the dotted path (its keys, list indices as ints) and the value, as written and as parsed."""

    path: str
    keys: tuple[str | int, ...]
    text: str
    value: Any

    def __str__(self) -> str:
        return f"{self.path}={self.text}"


_MISSING = object()


@dataclass(frozen=True)
class Change:
    """What one override did to the spec: the value the path had before (or that it had none) and the new one."""

    override: Override
    before: Any = _MISSING

    def line(self) -> str:
        """The echo on stderr: `set: serving.max_num_seqs 256 -> 128`."""
        before = "(not in the spec)" if self.before is _MISSING else _text(self.before)
        after = "(removed: its default applies)" if self.override.value is None else self.override.text
        return f"set: {self.override.path} {before} -> {after}".replace("\n", "\\n")   # one line, whatever the value


def _text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def parse(text: str) -> Override:
    """`PATH=VALUE` -> Override, the path checked against the spec schema; SetUsageError says what is wrong."""
    from .load import _StrictLoader

    path, eq, rest = text.partition("=")
    path, rest = path.strip(), rest.strip()
    if not eq or not path:
        raise SetUsageError(f"'{text}' is not PATH=VALUE; write e.g. --set serving.max_num_seqs=128")
    parts = path.split(".")
    if any(not p for p in parts):
        raise SetUsageError(f"'{path}' is not a dotted spec path; write e.g. --set lmcache.ddr.size=64GiB")
    if not rest:
        raise SetUsageError(f"--set {path}= has no value; give one (e.g. {path}=128), or {path}=null to remove the "
                            "key so its default applies")
    try:
        value = bounds.load(rest, _StrictLoader)   # the spec's own loader: units, limits, no duplicate keys
    except (yaml.YAMLError, SpecError):
        raise SetUsageError(f"'{rest}' in --set {path} is not a YAML value; quote it or write it as in the spec") from None
    keys = tuple(int(p) if p.isdigit() else p for p in parts)
    check_path(path, keys)
    return Override(path, keys, rest, value)


def parse_all(texts: Iterable[str] | None) -> tuple[Override, ...]:
    """Every --set, in the order given."""
    return tuple(parse(t) for t in texts or ())


# ---- the path against the schema --------------------------------------------------------------

def check_path(path: str, keys: tuple[str | int, ...]) -> None:
    """Refuse a path that names no field of the spec schema: the key, the keys allowed there and a guess."""
    from .topology import Topology

    current: Any = Topology
    done: list[str] = []
    for depth, key in enumerate(keys):
        if isinstance(key, int):
            item = _list_item(current)
            if item is None:
                where = ".".join(done) or "the top of the spec (its sections)"
                raise SetUsageError(_unknown(path, f"'{key}' is a list index, but {where} is not a list", None,
                                             f"set {'.'.join(done)} itself" if done else
                                             "start the path with a section, e.g. serving.max_num_seqs"))
            current = item
            done.append(str(key))
            continue
        models = _models(current)
        if not models:
            if _is_mapping(current):
                return                         # a free-form mapping (ceph.options, ...): any key, as in the file
            what = "a list: name an item by its index" if _list_item(current) is not None else "a single value"
            raise SetUsageError(_unknown(path, f"{'.'.join(done)} is {what}, not a section", None,
                                         f"set {'.'.join(done)} itself" if "single" in what
                                         else f"e.g. --set {'.'.join(done)}.0.{key}=..."))
        fields = {name: field for model in models for name, field in model.model_fields.items()}
        if key not in fields:
            known = sorted(fields)
            guess = did_you_mean(key, known)
            where = f" in {'.'.join(done)}" if done else " at the top of the spec"
            fix = (f"did you mean {'.'.join([*done, guess, *map(str, keys[depth + 1:])])}?" if guess
                   else "use one of the allowed keys (kvplan schema lists every field)")
            raise SetUsageError(_unknown(path, f"unknown key '{key}'{where}", ", ".join(known), fix))
        current = fields[key].annotation
        done.append(key)


def _unknown(path: str, message: str, allowed: str | None, fix: str) -> str:
    return Problem(f"{OPTION} {path}", message, None, allowed, fix).render()


def _models(tp: Any) -> list[type[BaseModel]]:
    """The models a field's type allows (a union may allow several)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    if typing.get_origin(tp) in (list, tuple, dict):
        return []
    return [m for arg in typing.get_args(tp) for m in _models(arg)]


def _list_item(tp: Any) -> Any:
    """The item type of a list field (or of the list in a union), else None."""
    if typing.get_origin(tp) is list:
        return typing.get_args(tp)[0] if typing.get_args(tp) else Any
    for arg in typing.get_args(tp):
        if typing.get_origin(arg) is list:
            return _list_item(arg)
    return None


def _is_mapping(tp: Any) -> bool:
    if tp is dict or typing.get_origin(tp) is dict:
        return True
    return typing.get_origin(tp) is not list and any(_is_mapping(a) for a in typing.get_args(tp))


# ---- applying them --------------------------------------------------------------------------

def apply(data: Any, overrides: Iterable[Override], source: str | None = None) -> tuple[Any, list[Change]]:
    """A copy of the spec mapping `data` with every override applied, left to right, and what each changed. A path
    through a value that is not a section, or a list index the spec does not have, is a SpecError."""
    overrides = list(overrides)
    if not overrides or not isinstance(data, dict):
        return data, []                       # not a mapping: the loader says what the file is
    data = copy.deepcopy(data)
    changes = []
    for o in overrides:
        node: Any = data
        for depth, key in enumerate(o.keys[:-1]):
            where = ".".join(map(str, o.keys[:depth + 1]))
            if isinstance(key, int):
                _check_item(node, o, depth, source)
                child = node[key]
            else:
                child = node.get(key)
                if child is None:
                    if o.value is None:
                        break                 # removing below a section that is not there: nothing to do
                    child = node[key] = {}
            if not isinstance(child, (dict, list)):
                raise SpecError([Problem(f"{OPTION} {o.path}", f"{where} is {child!r} in the spec, not a section",
                                         o.text, fix=f"write {where} as a mapping in the spec, or set {where} itself")],
                                source)
            node = child
        else:
            changes.append(Change(o, _set(node, o, source)))
            continue
        changes.append(Change(o))
    return data, changes


def _check_item(node: Any, o: Override, depth: int, source: str | None) -> None:
    """Refuse a list index the spec's list at o.keys[:depth] does not have (or a list the spec does not have)."""
    key, where = o.keys[depth], ".".join(map(str, o.keys[:depth]))
    if not isinstance(node, list) or not node:
        raise SpecError([Problem(f"{OPTION} {o.path}", f"the spec has no items in {where} to set item {key} of", o.text,
                                 fix=f"set the whole list (--set '{where}=[...]'), or write it in the spec")], source)
    if key >= len(node):
        raise SpecError([Problem(f"{OPTION} {o.path}", f"the spec's {where} has {len(node)} item(s); there is no item "
                                 f"{key}", o.text, f"0 to {len(node) - 1}",
                                 "name an item the spec has (counting from 0), or set the whole list")], source)


def _set(node: Any, o: Override, source: str | None) -> Any:
    """Set (or, for null, remove) the last key of `o` in `node`; the value it had before."""
    key = o.keys[-1]
    if isinstance(key, int):
        _check_item(node, o, len(o.keys) - 1, source)
        before = node[key]
        if o.value is None:
            del node[key]
        else:
            node[key] = copy.deepcopy(o.value)
        return before
    if not isinstance(node, dict):
        raise SpecError([Problem(f"{OPTION} {o.path}", "the spec has a list here, not a section", o.text,
                                 fix="name a list item by its index")], source)
    before = node.get(key, _MISSING)
    if o.value is None:
        node.pop(key, None)
    else:
        node[key] = copy.deepcopy(o.value)
    return before


def attributed(exc: SpecError, overrides: Iterable[Override]) -> SpecError:
    """`exc` with each problem at (or below, or above) an overridden path saying the value came from --set, so a
    bad value given on the command line is not looked for in the file."""
    overrides = list(overrides)
    if not overrides:
        return exc
    problems = []
    for p in exc.problems:
        by = [o for o in overrides if _related(p.path, o)]
        if by and f"(set by {OPTION} " not in p.message:      # not twice: the loader and the CLI both attribute
            given = ", ".join(f"{OPTION} {o}" for o in by[-1:])
            p = Problem(p.path, f"{p.message} (set by {given})", p.value, p.allowed, p.fix)
        problems.append(p)
    return SpecError(problems, exc.source)


def _related(problem_path: str, o: Override) -> bool:
    """Whether a problem's path (`workload.stages[0].rate`) is the override's path or within or above it."""
    if not problem_path:
        return False
    path = problem_path.replace("[", ".").replace("]", "")
    return path == o.path or path.startswith(o.path + ".") or o.path.startswith(path + ".")


# ---- in results ---------------------------------------------------------------------------------

class RecordsOverrides(BaseModel):
    """A result that keeps the --set it was computed with (absent from its JSON when there were none, so a result
    without them reads as before and an older file still reads)."""

    overrides: list[str] = []
    """The --set PATH=VALUE overrides applied to the spec file, in order (empty: the file as it is)."""

    @model_serializer(mode="wrap")
    def _without_empty_overrides(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        if not self.overrides:
            data.pop("overrides", None)
        return data


def recorded(overrides: Iterable[Override]) -> list[str]:
    """The overrides as a result keeps them: `PATH=VALUE`, as written."""
    return [str(o) for o in overrides]


__all__ = ["Change", "OPTION", "Override", "RecordsOverrides", "SetUsageError", "apply", "attributed", "check_path",
           "parse", "parse_all", "recorded"]
