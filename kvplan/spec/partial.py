"""The sections of a spec that does not validate: what one validation round can still check.

A spec with a field error is not a Topology, and pydantic skips the Topology's cross-field rules
once a field failed; so four mistakes used to take four rounds of `kvplan validate`. Here each
top-level section (serving, lmcache, workload, ...) is validated on its own, and `Sections`
offers those that parsed to the rules (spec/rules.py) and the catalog checks (kvplan/validation.py)
as a Topology would. A check that reads a section that did not parse raises `Unparsed` and is
left out: that section's own problems are already reported, and a rule or a catalog check
would only guess at what the section meant.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

from ..errors import SpecError
from .rules import Unparsed
from .topology import Topology


class Sections:
    """A spec's top-level sections that validated on their own, read as a Topology's attributes; a section the
    spec leaves out has its default. Reading one that did not validate raises Unparsed."""

    def __init__(self, parsed: dict[str, Any]):
        self._parsed = parsed

    def parsed(self, name: str) -> bool:
        """Whether the section `name` validated (or was left out, and so has its default)."""
        return name in self._parsed

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in Topology.model_fields:
            raise AttributeError(name)
        if name not in self._parsed:
            raise Unparsed(name)
        return self._parsed[name]


@lru_cache(maxsize=None)
def _adapter(name: str) -> TypeAdapter:
    field = Topology.model_fields[name]
    return TypeAdapter(Annotated[field.annotation, field])


def sections(data: dict, base_dir: str | None) -> Sections:
    """Each top-level section of the spec mapping `data` validated by itself (relative file paths read from
    `base_dir`, as spec.load reads them)."""
    context = {"base_dir": base_dir}
    parsed: dict[str, Any] = {}
    for name, field in Topology.model_fields.items():
        if name not in data:
            if not field.is_required():
                parsed[name] = field.get_default(call_default_factory=True)
            continue
        try:
            parsed[name] = _adapter(name).validate_python(data[name], context=context)
        except (ValidationError, SpecError):
            continue   # the whole spec's validation reports this section's problems, with their paths
    return Sections(parsed)
