"""The package's layers, lowest first, and the rule that holds them: a module imports only from its own
layer or below, and no modules import each other in a circle. For the layers every import counts: at
the top of a module, inside a function, or under `if TYPE_CHECKING:` (a type named in an annotation
is knowledge of the layer that defines it). For circles, the imports that run count, at the top or
inside a function; a type-only import back to the module that imports yours (a rule module naming the
Topology it checks) is not a circle.

This is the layer table of DESIGN.md and docs/architecture.md, read by a test so that a new import
that climbs (a simulator module reaching into a renderer, the doctor into the command line) fails
here with the import's file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "kvplan"

LAYERS = [
    ("ground", ["units", "errors", "paths", "named_file", "resources", "__init__"]),
    ("spine", ["spec", "catalog", "kv_capacity", "accelerator_fit", "step_coefficients", "resolved_tiers", "router_settings",
               "resolve", "offload", "tier_checks", "cost", "reference", "warmup", "validation", "node_storage"]),
    ("models", ["sim", "sizing", "deploy", "live", "interop", "gpufit"]),
    ("decisions", ["sweep", "plan", "doctor"]),
    ("renderers", ["report"]),
    ("interface", ["cli", "__main__"]),
]
"""Each layer and the top-level modules and packages it holds, lowest first."""

MODELS_APART = {"deploy": {"sim", "live"}, "live": {"deploy"}, "sim": {"deploy", "live", "sizing", "interop", "gpufit"}}
"""Inside the models layer the consumers of Resolved stand side by side; these pairs must not know each other:
the simulator knows no deployment, the deployment no simulator, and reading the live stack does not go
through the renderer of its configuration."""

LAYER_OF = {top: rank for rank, (_, tops) in enumerate(LAYERS) for top in tops}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, text: str | None = None, typing: bool = True) -> list[tuple[str, int]]:
    """(module imported, line) for every import in the file (or in `text`, as if it were the file), resolved to a
    kvplan module name; without those under `if TYPE_CHECKING:` when `typing` is False."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
                 for n in ast.walk(block)}
    found = []
    for node in ast.walk(tree):
        if not typing and id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "kvplan"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "kvplan":
                continue
            # `from . import x` names a module when x is one; otherwise it names something in the package
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub if _exists(sub) else target, node.lineno))
    return found


def _exists(name: str) -> bool:
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def top(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def graph(typing: bool = True) -> dict[str, list[tuple[str, int]]]:
    return {module_name(p): imports_of(p, typing=typing) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_top_level_module_and_package_has_a_layer():
    """A new module at the top of the package must be given its layer here (and in DESIGN.md)."""
    tops = {p.stem for p in PACKAGE.glob("*.py")} | {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert tops - {"_data"} == set(LAYER_OF), "place each new top-level module in LAYERS"


def test_the_top_level_holds_only_the_ground_and_the_spine():
    """`ls kvplan/` reads like the data flow: loose modules are the ground and the spine; every consumer,
    decision, renderer and the command line is a package."""
    loose = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert {m for m in loose if LAYER_OF[m] > LAYER_OF["resolve"]} == set()


def test_no_import_climbs_a_layer():
    climbs = []
    for module, imported in graph().items():
        for target, line in imported:
            if LAYER_OF[top(target)] > LAYER_OF[top(module)]:
                climbs.append(f"{module}:{line} imports {target} ({LAYERS[LAYER_OF[top(target)]][0]} over "
                              f"{LAYERS[LAYER_OF[top(module)]][0]})")
            elif top(target) in MODELS_APART.get(top(module), ()):
                climbs.append(f"{module}:{line} imports {target} ({top(module)} and {top(target)} stand apart)")
    assert climbs == []


def test_no_modules_import_each_other_in_a_circle():
    edges = {m: {t for t, _ in imported if t != m} for m, imported in graph(typing=False).items()}
    # a module importing its own package's __init__ (for a name it hands on) is not a circle of concepts
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}
    assert circles(edges) == []


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("source, expected", [
    ("from ..report.sections import Section\n", "kvplan.report.sections"),
    ("def f():\n    from ..cli import app\n", "kvplan.cli.app"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..report import sections\n", "kvplan.report.sections"),
])
def test_the_check_sees_every_kind_of_import(source, expected):
    """The check is not blind: a climbing import at the top, in a function and under TYPE_CHECKING is found."""
    assert (expected, source.count("\n")) in imports_of(PACKAGE / "sim" / "probe.py", source)
