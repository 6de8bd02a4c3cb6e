"""Reading a spec: YAML file -> Topology, with every failure turned into named Problems.

YAML syntax errors carry their line and column, duplicate keys are refused (PyYAML would keep
the last silently), unknown keys get a "did you mean", and pydantic's errors are rewritten with
the dotted field path, what is allowed there and a fix.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import Problem, SpecError, did_you_mean
from . import bounds
from .base import field_doc
from .topology import Topology


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, typing.Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first given on line {seen[key] + 1})", key_node.start_mark)
        if isinstance(key, typing.Hashable):
            seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


class _CatalogLoader(yaml.CSafeLoader):
    """The same with libyaml's parser (PyYAML's wheels carry it), for kvplan's own catalog: a dozen
    times faster, and its marks name lines and columns but not the text around them."""


for _loader in (_StrictLoader, _CatalogLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


STDIN = "-"
"""The path that means standard input (`kvplan validate - < spec.yaml`, `... | kvplan simulate -`)."""
_stdin: list[str] = []


def read_text(path: str | Path) -> str:
    """A spec file's text (standard input for "-", read once and kept, so a command may read it again);
    a missing, unreadable or non-UTF-8 file is a SpecError naming it."""
    if str(path) == STDIN:
        if not _stdin:
            try:
                data = sys.stdin.buffer.read(bounds.MAX_FILE_BYTES + 1)
                bounds.check_size(len(data), "standard input")
                _stdin.append(data.decode("utf-8"))
            except SpecError as exc:
                raise exc.with_source("stdin") from None
            except UnicodeDecodeError as exc:
                raise SpecError([Problem("", f"cannot read standard input: {exc}", fix="pipe the spec as UTF-8 text")],
                                "stdin") from None
        return _stdin[0]
    path = Path(path)
    source = str(path)
    if not path.exists():
        raise SpecError([Problem("", f"file not found: {path}", fix="check the path (relative paths are read from the current folder)")], source)
    if not path.is_file():
        raise SpecError([Problem("", f"not a file: {path}", fix="give the path of a YAML spec file")], source)
    try:
        bounds.check_size(path.stat().st_size)
        return path.read_text(encoding="utf-8")
    except SpecError as exc:
        raise exc.with_source(source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([Problem("", f"cannot read the file: {exc}", fix="save the spec as UTF-8 text")], source) from None


def read_yaml(path: str | Path, bounded: bool = True) -> Any:
    """Parse a YAML file ("-": standard input); any failure is a SpecError naming the file (and line, where known).
    `bounded`: held to spec/bounds.py's limits; only kvplan's own catalog, shipped and tested, is read without."""
    source = "stdin" if str(path) == STDIN else str(path)
    text = read_text(path)
    try:
        if not bounded:
            return yaml.load(text, Loader=_CatalogLoader)  # noqa: S506 - a CSafeLoader subclass
        return bounds.load(text, _StrictLoader)
    except SpecError as exc:
        raise exc.with_source(source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc)
        kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
        raise SpecError([Problem("", f"{kind}{where}: {what}",
                                 fix="check indentation, colons and quoting on that line")], source) from None


def load(path: str | Path) -> Topology:
    """Read and validate a spec file ("-": standard input, whose relative paths are read from the current folder)."""
    data, base_dir, source = read_spec(path)
    return from_mapping(data, base_dir=base_dir, source=source)


def read_spec(path: str | Path) -> tuple[Any, Path, str]:
    """A spec file's parsed YAML, the folder its relative paths are read from and its name in messages."""
    if str(path) == STDIN:
        return _no_bare_slo(read_yaml(STDIN), "stdin"), Path.cwd(), "stdin"
    path = Path(path)
    return _no_bare_slo(read_yaml(path), str(path)), path.parent, str(path)


def _no_bare_slo(data: Any, source: str) -> Any:
    """The file's data, unless it gives an SLO target as a bare number (refused as --slo refuses it)."""
    from .slo import bare_slo_problems

    problems = bare_slo_problems(data)
    if problems:
        raise SpecError(problems, source)
    return data


def _a_spec_at_all(data: dict, source: str | None) -> None:
    """Refuse a mapping none of whose keys is a spec section or close to one: some other file (a password file
    reads as one key per line, a config as its own keys). It is named by its kind and size, never quoted: the
    path may name a file whose content must not be printed. A spec with misspelled sections still gets its
    "did you mean"s."""
    sections = list(Topology.model_fields)
    if not data or any(isinstance(key, str) and (key in sections or did_you_mean(key, sections)) for key in data):
        return
    keys = "its one top-level key is not" if len(data) == 1 else f"none of its {len(data)} top-level keys is"
    raise SpecError([Problem("", f"this is not a kvplan spec: {keys} a spec section ({', '.join(sections[:4])}, ...) "
                                 "or close to one",
                             fix="give the path of a spec file (start from examples/chat-llama2-13b.yaml)")], source)


def from_mapping(data: Any, base_dir: str | Path | None = None, source: str | None = None) -> Topology:
    """Validate an already-parsed spec; relative file paths in it are read from `base_dir`."""
    if not isinstance(data, dict):
        kind = "an empty file" if data is None else f"a {type(data).__name__}"
        raise SpecError([Problem("", f"a spec is a YAML mapping of sections, but this is {kind}",
                                 fix="start from examples/chat-llama2-13b.yaml (name, model, serving, workload, ...)")], source)
    _a_spec_at_all(data, source)
    base = str(base_dir) if base_dir is not None else None
    try:
        return Topology.model_validate(data, context={"base_dir": base})
    except ValidationError as exc:
        # pydantic skips the cross-field rules once a field failed: run those of the sections that parsed, so one
        # round reports every problem it can
        from . import partial, rules

        problems = problems_from(exc, Topology) + rules.check_sections(partial.sections(data, base))
        raise SpecError(problems, source) from None
    except SpecError as exc:
        raise exc.with_source(source) if source else exc


# ---- pydantic errors -> Problems -------------------------------------------------------------

_TAGS = {"name", "inline"}  # tags of the model: union, which pydantic puts into error locations


def problems_from(exc: ValidationError, root: type[BaseModel]) -> list[Problem]:
    problems = []
    for err in exc.errors(include_url=False):
        loc = list(err["loc"])
        if len(loc) > 1 and loc[0] == "model" and loc[1] in _TAGS:
            del loc[1]
        problems.append(_problem(err, loc, root))
    return problems


def _path(loc: list) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _model_at(root: type[BaseModel], loc: list) -> type[BaseModel] | None:
    """The model class that holds the field at `loc` (for listing its keys)."""
    current: Any = root
    for part in loc:
        if isinstance(part, int):
            continue  # a list item: unwrapping list[Model] below finds the item's model
        model = _unwrap_model(current)
        if model is None or part not in model.model_fields:
            return None
        current = model.model_fields[part].annotation
    return _unwrap_model(current)


def _unwrap_model(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in typing.get_args(tp):
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def _field_help(root: type[BaseModel], loc: list) -> str | None:
    if not loc or not isinstance(loc[-1], str):
        return None
    parent = _model_at(root, loc[:-1])
    if parent is None or loc[-1] not in parent.model_fields:
        return None
    return field_doc(parent, loc[-1])


def _range(root: type[BaseModel], loc: list) -> str | None:
    """A number field's bounds in words ('from 1 to 2147483647'), or None where `loc` is not a model's field."""
    parent = _model_at(root, loc[:-1])
    field = parent.model_fields.get(str(loc[-1])) if parent else None
    if field is None:
        return None
    low = high = None
    for bound in field.metadata:
        for attr, words in (("ge", "from {}"), ("gt", "more than {}")):
            if getattr(bound, attr, None) is not None:
                low = words.format(getattr(bound, attr))
        for attr, words in (("le", "to {}"), ("lt", "below {}")):
            if getattr(bound, attr, None) is not None:
                high = words.format(getattr(bound, attr))
    if low and high and low.startswith("from") and high.startswith("to"):
        return f"{low} {high}"
    return " and ".join(w for w in (low, high and high.replace("to ", "at most ")) if w) or None


def _problem(err: dict, loc: list, root: type[BaseModel]) -> Problem:
    kind, path, value = err["type"], _path(loc), err.get("input")
    message = err["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        parent = _model_at(root, loc[:-1])
        known = sorted(parent.model_fields) if parent else []
        key = str(loc[-1])
        guess = did_you_mean(key, known)
        return Problem(path, f"unknown key '{key}'", None, ", ".join(known) or None,
                       f"did you mean '{guess}'?" if guess else "remove it")
    if kind == "missing":
        help_text = _field_help(root, loc)
        return Problem(path, "required key is missing", None, help_text, f"add {loc[-1]}: <value>")
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        choices = [c.strip().strip("'") for c in expected.replace(" or ", ", ").split(",") if c.strip()]
        guess = did_you_mean(str(value), choices) if isinstance(value, str) else None
        return Problem(path, "not one of the allowed values", value, expected,
                       f"did you mean '{guess}'?" if guess else "use one of the allowed values")
    if kind in ("union_tag_invalid", "model_attributes_type", "model_type", "dict_type"):
        return Problem(path, "expected a mapping of keys", value, _field_help(root, loc),
                       "write this as a nested block of key: value lines")
    if kind == "unit":
        ctx = err.get("ctx", {})
        return Problem(path, message, value, ctx.get("help"), f"write it like '{ctx.get('example')}'")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        span = _range(root, loc)
        return Problem(path, message, value, span or _field_help(root, loc),
                       f"use a value {span}" if span else "change the value to what is allowed")
    if kind in ("value_error", "assertion_error"):
        message, _, fix = message.partition("; fix: ")
        # a whole-section check: the section's own text says nothing the message does not
        return Problem(path, message, None if isinstance(value, dict) else value, None, fix or None)
    return Problem(path, message, value, _field_help(root, loc), "change the value to what is allowed")
