"""What an import makes: a spec mapping from users' configs, the list of what did not map, and the readers every
source shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PLACEHOLDER_WORKLOAD = {"kind": "chat", "duration": "10min", "arrivals": {"rate": "1/s"}}
"""The workload an imported spec starts with: a vLLM command says nothing of the traffic."""


@dataclass
class Imported:
    """A spec mapping made from users' configs, and what did not map: (flag or key, why)."""

    spec: dict[str, Any]
    unmapped: list[tuple[str, str]] = field(default_factory=list)


def read_int(text: str) -> int:
    """An integer as vLLM reads one, with its k/m suffixes (32k = 32768 for lengths, as vLLM's parser has it)."""
    t = text.strip().lower()
    for suffix, factor in (("k", 1024), ("m", 1024 ** 2)):
        if t.endswith(suffix):
            return int(float(t[:-1]) * factor)
    return int(t)
