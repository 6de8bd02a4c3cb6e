"""The installed simulator core is compiled (mypyc, hatch_build.py) and predicts exactly what the
interpreted modules predict.

The compiled modules run the same typed Python as C: every result must be the same, bit for bit.
The interpreted side is a copy of the package's sources without any compiled module, run in its
own process; both fingerprint the complete results (every counter and summary, every column of the
per-request table) of every shipped example, also with preemption forced
(benchmarks/result_digest.py's fingerprint).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from conftest import REPO

import pytest

pytestmark = pytest.mark.compiled

HOOK = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"][
    "custom"]
COMPILED = HOOK["compile"] + HOOK["extensions"]     # mypyc's modules and the C twins of Python ones

FINGERPRINTS = """
import importlib, json, runpy, sys
from pathlib import Path

digest = runpy.run_path(sys.argv[1])
found = {}
for name, spec, base_dir in digest["cases"](Path("unused")):
    if Path(name.split(" (")[0]).parent == Path("examples") and "5,000" not in name:
        found[name] = digest["fingerprint"](spec, base_dir)
files = {m: importlib.import_module(m).__file__ for m in sys.argv[2:]}
print(json.dumps({"files": files, "fingerprints": found}))
"""


def _modules() -> list[str]:
    return [path.removesuffix(".py").removesuffix(".c").replace("/", ".") for path in COMPILED]


def fingerprints(pythonpath: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, "-c", FINGERPRINTS, str(REPO / "benchmarks" / "result_digest.py"),
                          *_modules()], cwd="/", env=env, capture_output=True, text=True, timeout=900, check=True)
    return json.loads(out.stdout)


def test_the_installed_simulator_core_is_the_compiled_one():
    import importlib

    assert COMPILED, "pyproject.toml names no module to compile"
    for module in _modules():
        path = importlib.import_module(module).__file__
        assert path.endswith(tuple(EXTENSION_SUFFIXES)), f"{module} is not compiled: {path}"


def test_compiled_and_interpreted_modules_predict_the_same_bit_for_bit(tmp_path):
    shutil.copytree(REPO / "kvplan", tmp_path / "kvplan",
                    ignore=shutil.ignore_patterns("__pycache__", *(f"*{s}" for s in EXTENSION_SUFFIXES)))
    for data in ("models", "templates", "inventories"):           # what an uninstalled checkout reads
        (tmp_path / data).symlink_to(REPO / data)
    compiled, interpreted = fingerprints(None), fingerprints(tmp_path)
    assert all(f.endswith(tuple(EXTENSION_SUFFIXES)) for f in compiled["files"].values()), compiled["files"]
    assert all(f.startswith(str(tmp_path)) and f.endswith(".py") for f in interpreted["files"].values())
    assert len(compiled["fingerprints"]) >= 10                    # 5 examples, each also with preemption
    assert compiled["fingerprints"] == interpreted["fingerprints"]


def test_every_function_of_the_compiled_core_is_typed():
    """mypy skips a function without any annotation, and mypyc then compiles it as untyped Python:
    every attribute and method through the generic lookup. The engine's step loop ran that way,
    at 1.27x the time of its typed form, until it was annotated."""
    import ast

    untyped = []
    for path in HOOK["compile"]:
        for node in ast.walk(ast.parse((REPO / path).read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is None:
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                if not any(a.annotation is not None for a in args):
                    untyped.append(f"{path}:{node.lineno} {node.name}")
    assert not untyped, f"annotate these (a return type is enough): {untyped}"
