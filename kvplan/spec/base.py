"""The base class of every spec section: frozen, strict about unknown keys.

`use_attribute_docstrings` makes the docstring under each field its description, which feeds
the JSON Schema (`kvplan schema`) and the generated spec reference in docs/.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class SpecModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True,
                              validate_default=True, allow_inf_nan=False)
