"""The base class of every spec section: frozen, strict about unknown keys.

`use_attribute_docstrings` makes the docstring under each field its description, which feeds
the JSON Schema (`kvplan schema`) and the generated spec reference in docs/.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationInfo


class SpecModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True,
                              validate_default=True, allow_inf_nan=False)


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
