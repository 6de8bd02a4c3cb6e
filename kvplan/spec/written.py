"""A spec written back as a person would write it: human units, defaults left out.

kvplan holds every quantity in base units (bytes, seconds, requests per second), so a spec dumped
as it is reads `size: 64000000000` and `window: 0.05`, and repeats every default. `human_mapping`
writes each quantity in the largest unit of kvplan's grammar that reads back exactly
(`units.spelled`: `64GB`, `50ms`, `0.8/s`), and leaves out every field whose value is its default
(compared after validation, so `osd_size: 3840000000000` is the default `3.84TB`). Loading the
mapping again gives the same Topology.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticUndefined

from ..units import UNIT_KINDS, spelled


def human_mapping(model: BaseModel) -> dict[str, Any]:
    """The model's fields that differ from their defaults, quantities in human units."""
    out: dict[str, Any] = {}
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        # pydantic keeps a field's own Annotated metadata (unit parsers, constraints) apart from its type
        annotation = typing.Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
        default = field.get_default(call_default_factory=True)
        if default is not PydanticUndefined and _same(value, default, annotation):
            continue
        out[name] = _written(value, annotation)
    return out


def _same(value: Any, default: Any, annotation: Any) -> bool:
    if value == default:
        return True
    try:
        return value == TypeAdapter(annotation).validate_python(default)
    except Exception:  # a default that does not validate on its own (it needs context) is never equal
        return False


def _written(value: Any, annotation: Any) -> Any:
    if isinstance(value, BaseModel):
        return human_mapping(value)
    kind = _unit_kind(annotation)
    if kind is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return spelled(kind, value)
    if isinstance(value, list):
        item = _inner(annotation, list)
        return [_written(v, item) for v in value]
    if isinstance(value, dict):
        item = _inner(annotation, dict)
        return {k: _written(v, item) for k, v in value.items()}
    return value


def _unit_kind(annotation: Any) -> str | None:
    """'size', 'duration', 'rate' or 'bandwidth' when the annotation (or its non-None member) is a unit type."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        for meta in annotation.__metadata__:
            kind = UNIT_KINDS.get(getattr(meta, "func", None))
            if kind is not None:
                return kind
        return _unit_kind(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        kinds = {_unit_kind(a) for a in typing.get_args(annotation) if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    return None


def _inner(annotation: Any, container: type) -> Any:
    """The item annotation of a list (or the value annotation of a dict) inside `annotation`."""
    origin = typing.get_origin(annotation)
    if origin is container:
        return typing.get_args(annotation)[-1]
    for arg in typing.get_args(annotation):
        found = _inner(arg, container)
        if found is not None:
            return found
    return None
