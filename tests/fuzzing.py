"""Fuzz cases for kvplan's inputs, as Hypothesis strategies: the spec examples mutated, YAML texts bent
out of shape, and Mooncake trace lines. tests/test_fuzz.py runs them on every CI with a fixed budget and
seed; benchmarks/fuzz.py runs many more by hand and prints the figures.

What a case must do is `outcome`'s rule: a spec, trace or text is either accepted or refused with a
SpecError. Any other exception escaping the library is a bug (a traceback for the user).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import yaml
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted([*(REPO / "examples").glob("*.yaml"), *(REPO / "examples" / "claims").glob("*.yaml"),
                   *(REPO / "docs" / "examples").glob("*.yaml"),
                   *(REPO / "docs" / "examples" / "benchmarks").glob("*.yaml")])
"""Every shipped spec example: the seeds the mutations start from."""
PARSED = {p.name: yaml.safe_load(p.read_text()) for p in EXAMPLES}
REGRESSIONS = REPO / "tests" / "fixtures" / "fuzz"
"""Inputs that once broke kvplan (each must now give a clean error), kept as files."""

ODD_TEXT = ["", " ", "[/]", "[/b]x[red]y", "[bold]", ":smile:", "\x1b[31mred\x1b[0m", "\x00", "\u202e", "é" * 50,
            "💥", "0", "-1", "1e309", "nan", "inf", "40GiB", "40 GiB", "40GB/s", "1/s", "1h", "-5s", "0s", "~", "null",
            "yes", "no", "!!python/object:os.system", "*alias", "&anchor x", "{a: 1}", "[1, 2]", "x" * 5000]
"""Strings a fuzzer finds interesting: rich markup, control characters, units bent, YAML words."""

values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10 ** 40), max_value=10 ** 40),
              st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(ODD_TEXT), st.text(max_size=30)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
"""Any value a YAML file can hold."""


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a parsed spec (mapping keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _parent(data: Any, path: tuple) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


def mutate(data: Any, draw: Callable) -> Any:
    """One change at a random place: delete, replace with any value, nudge a number, or rename a key."""
    paths = _paths(data)
    if not paths:
        return draw(values)
    path = draw(st.sampled_from(paths))
    parent, key = _parent(data, path), path[-1]
    kind = draw(st.sampled_from(["delete", "replace", "nudge", "rename"]))
    if kind == "delete":
        del parent[key]
    elif kind == "nudge" and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
        parent[key] = draw(st.sampled_from([0, -1, 1, 10 ** 12, 1e-300, -0.0, float("inf"), parent[key] * 1000,
                                            parent[key] / 1000, parent[key] + 1]))
    elif kind == "rename" and isinstance(parent, dict):
        parent[draw(st.sampled_from(ODD_TEXT + ["serving", "model", "name"]))] = parent.pop(key)
    else:
        parent[key] = draw(values)
    return data


@st.composite
def mutated_specs(draw, names: list[str] | None = None) -> tuple[str, Any]:
    """(example name, its parsed spec with one to four mutations); `names` picks the examples (default all)."""
    name = draw(st.sampled_from(names or sorted(PARSED)))
    data = copy.deepcopy(PARSED[name])
    for _ in range(draw(st.integers(1, 4))):
        data = mutate(data, draw)
    return name, data


@st.composite
def yaml_texts(draw) -> str:
    """A YAML text made from an example: cut, spliced with odd text, nested, aliased, or tagged."""
    text = EXAMPLES[draw(st.integers(0, len(EXAMPLES) - 1))].read_text()
    kind = draw(st.sampled_from(["cut", "splice", "nest", "alias", "tag", "number", "garbage"]))
    at = draw(st.integers(0, len(text)))
    if kind == "cut":
        return text[:at]
    if kind == "splice":
        return text[:at] + draw(st.sampled_from(ODD_TEXT)) + text[at:]
    if kind == "nest":
        depth = draw(st.sampled_from([10, 63, 65, 500, 3000]))
        return text + "\nextra: " + "[" * depth + "]" * depth + "\n"
    if kind == "alias":
        levels = draw(st.integers(1, 9))
        lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
        return "\n".join(lines) + "\n" + text
    if kind == "tag":
        tag = draw(st.sampled_from(["!!python/object/apply:os.system ['true']", "!!binary aGVsbG8=", "!!set {a, b}",
                                    "!!timestamp 2001-12-14", "!custom x", "!!float 1e999", "!!int 0x1F"]))
        return text + f"\nextra: {tag}\n"
    if kind == "number":
        digits = draw(st.sampled_from([99, 101, 4301, 10_000]))
        return text.replace("seed: ", "seed: " + "9" * digits + "#", 1)
    return draw(st.text(max_size=200))


trace_values = st.one_of(st.integers(-5, 10 ** 6), st.integers(min_value=2 ** 53 - 2, max_value=2 ** 64),
                         st.floats(), st.none(), st.text(max_size=5), st.lists(st.integers(-1, 100), max_size=5))


@st.composite
def trace_texts(draw) -> str:
    """A Mooncake JSONL text with some lines valid, some bent (fields missing, wrong, huge; not JSON)."""
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        n_in = draw(st.integers(1, 3000))
        row: dict[str, Any] = {"timestamp": draw(st.integers(0, 10 ** 7)), "input_length": n_in,
                               "output_length": draw(st.integers(0, 500)), "hash_ids": list(range(-(-n_in // 512)))}
        kind = draw(st.sampled_from(["valid", "valid", "field", "drop", "text", "digits", "deep"]))
        if kind == "field":
            row[draw(st.sampled_from(sorted(row)))] = draw(trace_values)
        elif kind == "drop":
            del row[draw(st.sampled_from(sorted(row)))]
        elif kind == "text":
            lines.append(draw(st.sampled_from(ODD_TEXT)))
            continue
        elif kind == "digits":
            lines.append('{"timestamp": ' + "9" * 5000 + ', "input_length": 1, "output_length": 1, "hash_ids": [0]}')
            continue
        elif kind == "deep":
            lines.append("[" * 100_000 + "]" * 100_000)
            continue
        lines.append(json.dumps(row))
    return "\n".join(lines) + "\n"


@st.composite
def replay_texts(draw) -> str:
    """A per-request log (kind: replay) with some lines valid, some bent (fields missing, wrong, unknown, huge,
    contradicting an earlier line; not JSON)."""
    lines = []
    for _ in range(draw(st.integers(0, 8))):
        n_in = draw(st.integers(1, 3000))
        row: dict[str, Any] = {"arrival": draw(st.floats(0, 1e6)), "prompt_tokens": n_in,
                               "output_tokens": draw(st.integers(1, 500))}
        if draw(st.booleans()):
            row.update(prompt=draw(st.integers(0, 3)), prefix=draw(st.integers(0, 2)),
                       prefix_tokens=draw(st.integers(1, n_in)))
        kind = draw(st.sampled_from(["valid", "valid", "field", "drop", "extra", "text", "digits", "deep"]))
        if kind == "field":
            row[draw(st.sampled_from(sorted(row)))] = draw(trace_values)
        elif kind == "drop":
            del row[draw(st.sampled_from(sorted(row)))]
        elif kind == "extra":
            row[draw(st.sampled_from(ODD_TEXT))] = draw(trace_values)
        elif kind == "text":
            lines.append(draw(st.sampled_from(ODD_TEXT)))
            continue
        elif kind == "digits":
            lines.append('{"arrival": ' + "9" * 5000 + ', "prompt_tokens": 1, "output_tokens": 1}')
            continue
        elif kind == "deep":
            lines.append("[" * 100_000 + "]" * 100_000)
            continue
        lines.append(json.dumps(row))
    return "\n".join(lines) + "\n"


NUDGES = [0, 1, 2, 5e-324, 1e-300, 1e-9, 1e-3, 0.5, 1000, 10 ** 6]
STEP_MODEL = {"compute_efficiency": [1e-9, 1e-4, 0.01, 1.0], "memory_efficiency": [1e-9, 1e-4, 1.0],
              "step_overhead": ["0s", "1ns", "1us", "10s", "1d"], "request_overhead": ["0s", "1ns", "1h"],
              "layer_overhead": ["0s", "1ns", "1ms"], "allreduce_latency": ["0s", "1ns", "1s"],
              "allreduce_efficiency": [1e-9, 1.0], "small_gemm_params": [0.0, 1e12]}
"""Odd but valid step-time coefficients (serving.step_model), the kind that once made runs take hours."""


@st.composite
def odd_specs(draw, name: str = "local.yaml") -> dict:
    """A spec that is likely valid but odd: numbers scaled or set to edges, a strange step model, few requests."""
    data = copy.deepcopy(PARSED[name])
    numeric = [p for p in _paths(data) if isinstance(_parent(data, p)[p[-1]], (int, float))
               and not isinstance(_parent(data, p)[p[-1]], bool)]
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(numeric))
        parent = _parent(data, path)
        factor = draw(st.sampled_from(NUDGES))
        parent[path[-1]] = type(parent[path[-1]])(parent[path[-1]] * factor) if factor >= 1 else factor
    step = {k: draw(st.sampled_from(v)) for k, v in STEP_MODEL.items() if draw(st.booleans())}
    if step:
        data["serving"]["step_model"] = step
    workload = data["workload"]
    workload["requests"] = min(int(workload.get("requests") or 300), 300)
    if draw(st.booleans()):
        process = draw(st.sampled_from(["poisson", "gamma", "constant"]))
        workload["arrivals"] = {"process": process, "rate": draw(st.sampled_from(
            ["0.001/s", "1/s", "100/s", "1000000/s", "1e-6/s"]))}
        if process == "gamma":
            workload["arrivals"]["cv"] = draw(st.sampled_from([5e-324, 1e-300, 1e-6, 0.001, 1.0, 100.0]))
    return data
