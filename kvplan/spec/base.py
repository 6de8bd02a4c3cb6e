"""The base class of every spec section: frozen, strict about unknown keys.

The docstring under each field is its description (`field_doc`), which feeds the JSON Schema
(`kvplan schema`), the generated spec reference in docs/ and the help of a spec's errors. It is read
from the source when one of those asks, not when the class is made: pydantic's
`use_attribute_docstrings` did that for every model at import, a tenth of a second of every command.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo


MAX_INT32 = 2**31 - 1
"""The largest count kvplan writes into a deployed command line or config (token counts, sequences, block and chunk
sizes): a 32-bit signed integer, far beyond any real setting, so no C, torch or Go integer the value reaches wraps
(99999999999999999999999 tokens, past int64, was accepted and rendered)."""

def field_doc(model: type[BaseModel], name: str) -> str | None:
    """The description of `model`'s field `name`: its `Field(description=...)`, else the docstring under
    it in the class that declares it (as pydantic's `use_attribute_docstrings` reads it)."""
    field = model.model_fields.get(name)
    if field is None:
        return None
    if field.description is not None:
        return field.description
    owner = next((k for k in model.__mro__ if name in getattr(k, "__annotations__", {})), None)
    return _docstrings(owner).get(name) if owner is not None else None


@cache
def _docstrings(cls: type) -> dict[str, str]:
    """Field name -> the string literal right after its annotated assignment in `cls`'s body."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):                   # no source (an interactive or generated class)
        return {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    found = {}
    for stmt, after in zip(body.body, body.body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            found[stmt.target.id] = inspect.cleandoc(after.value.value)
    return found


def _described(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """The JSON Schema of a spec model, each property with its field's description (over its type's: a
    size field says what it sizes, not how sizes are written)."""
    for name, prop in schema.get("properties", {}).items():
        doc = field_doc(cls, name)
        if doc:
            prop["description"] = doc


class SpecModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, allow_inf_nan=False,
                              json_schema_extra=_described)


def spec_file(value: str, info: ValidationInfo, what: str, fix: str) -> str:
    """A file a spec names: a relative path is read from the spec file's folder (validation context
    base_dir); the absolute path if it is a file, else ValueError saying `what` was not found, with `fix`."""
    base = (info.context or {}).get("base_dir")
    path = Path(value).expanduser()
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    if not path.is_file():
        raise ValueError(f"{what} not found: {path} (a relative path is read from the spec file's folder); fix: {fix}")
    return str(path.resolve())
