"""What an import makes: a spec mapping from users' configs, the list of what did not map, and the readers every
source shares; a benchmark's workload, and the spec or the workload section it makes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PLACEHOLDER_WORKLOAD = {"kind": "chat", "duration": "10min", "arrivals": {"rate": "1/s"}}
"""The workload an imported spec starts with: a vLLM command says nothing of the traffic."""


@dataclass
class Imported:
    """A spec mapping made from users' configs, what did not map (flag or key, why) and what mapped with a difference
    (flag or key, what differs: an API key becomes a reference to where the deploy reads it)."""

    spec: dict[str, Any]
    unmapped: list[tuple[str, str]] = field(default_factory=list)
    approximated: list[tuple[str, str]] = field(default_factory=list)


def read_int(text: str) -> int:
    """An integer as vLLM reads one, with its k/m suffixes (32k = 32768 for lengths, as vLLM's parser has it)."""
    t = text.strip().lower()
    for suffix, factor in (("k", 1024), ("m", 1024 ** 2)):
        if t.endswith(suffix):
            return int(float(t[:-1]) * factor)
    return int(t)


@dataclass
class ImportedWorkload:
    """A spec's workload made from a benchmark's configuration: the workload mapping, the model the benchmark names
    (as it names it, a Hugging Face id as a rule; None when it does not say), what did not map (key, why) and what
    mapped with a difference (key, what differs)."""

    workload: dict[str, Any]
    model: str | None = None
    unmapped: list[tuple[str, str]] = field(default_factory=list)
    approximated: list[tuple[str, str]] = field(default_factory=list)


def spec_of(bench: ImportedWorkload, gpu: str, name: str) -> Imported:
    """A spec of the model the benchmark names, on `gpu`, with the benchmark's workload (the serving settings left to
    kvplan's defaults: the benchmark does not say how the server was started)."""
    from ..catalog import load_catalog
    from ..errors import Problem, SpecError

    if bench.model is None:
        raise SpecError([Problem("--gpu", "the benchmark names no model, so there is no spec to make",
                                 fix="drop --gpu to print the workload alone, or give the server's command: --vllm "
                                     "\"vllm serve MODEL ...\"")])
    entry = load_catalog().llm(bench.model)
    if entry is None:
        raise SpecError([Problem("model", f"the catalog has no model {bench.model!r}, which the benchmark names",
                                 bench.model, fix="use a model `kvplan catalog` lists, or drop --gpu to print the "
                                                  "workload alone")])
    return Imported({"name": name, "model": entry.name, "serving": {"gpu": gpu}, "workload": bench.workload})


def check_workload(workload: dict[str, Any], source: str) -> None:
    """Validate a workload section on its own: a SpecError naming workload.<field> for what is wrong."""
    from pydantic import ValidationError

    from ..errors import Problem, SpecError
    from ..spec.load import problems_from
    from ..spec.workload import Workload

    try:
        Workload.model_validate(workload)
    except ValidationError as exc:
        problems = [Problem(f"workload.{p.path}" if p.path else "workload", p.message, p.value, p.allowed, p.fix)
                    for p in problems_from(exc, Workload)]
        raise SpecError(problems, source) from None
