"""The docs are part of the feature: generated references are current, and every console
example in docs/ prints what the page says it prints.

Set KVPLAN_UPDATE_DOCS=1 to rewrite the generated files and console outputs after a change.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.catalog import load_catalog
from kvplan.reference import catalog_reference, schema_json, spec_reference

from conftest import REPO

DOCS = REPO / "docs"
UPDATE = os.environ.get("KVPLAN_UPDATE_DOCS") == "1"
CONSOLE = re.compile(r"```console\n\$ (?P<cmd>[^\n]+)\n(?P<out>.*?)```", re.S)


def check_generated(path: Path, text: str) -> None:
    if UPDATE:
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} is stale: run `python -m kvplan.reference docs/`"


def test_spec_reference_is_current():
    check_generated(DOCS / "spec-reference.md", spec_reference())


def test_catalog_reference_is_current():
    check_generated(DOCS / "catalog.md", catalog_reference(load_catalog()))


def test_schema_file_is_current():
    check_generated(DOCS / "topology.schema.json", schema_json())
    assert json.loads((DOCS / "topology.schema.json").read_text())["title"] == "Topology"


def run_console(cmd: str) -> str:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", f"{cmd} 2>&1"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return result.stdout


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_console_examples_print_what_the_docs_say(page):
    text = page.read_text()
    blocks = list(CONSOLE.finditer(text))
    for block in reversed(blocks) if UPDATE else blocks:
        actual = run_console(block["cmd"])
        if UPDATE:
            text = text[:block.start("out")] + actual + text[block.end("out"):]
        else:
            assert actual == block["out"], f"{page.name}: `{block['cmd']}` printed:\n{actual}"
    if UPDATE:
        page.write_text(text)


def test_every_command_has_a_tested_example():
    from kvplan.cli import app

    commands = [m["cmd"] for m in CONSOLE.finditer((DOCS / "commands.md").read_text())]
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    names += [f"{group.name} {c.name or c.callback.__name__}" for group in app.registered_groups
              for c in group.typer_instance.registered_commands]
    for name in names:
        assert any(re.search(rf"(^|[;&|] *)kvplan {name}\b", cmd) for cmd in commands), \
            f"kvplan {name} has no tested example in docs/commands.md"
