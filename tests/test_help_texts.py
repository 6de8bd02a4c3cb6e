"""The -h texts say only what is true: a page they point at exists, an option they name is the command's, and
--wide is offered exactly where a table can leave out columns."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from kvplan.cli import app

from conftest import REPO

pytestmark = pytest.mark.unit

NARROWING = {"simulate", "sweep", "capacity", "plan", "catalog"}
"""The commands whose tables leave out or shorten columns to fit the terminal (tests/test_table_width.py)."""


def commands() -> list[list[str]]:
    names = [[c.name or c.callback.__name__] for c in app.registered_commands]
    names += [[group.name, c.name or c.callback.__name__] for group in app.registered_groups
              for c in group.typer_instance.registered_commands]
    return names


def help_text(command: list[str]) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("command", commands(), ids=" ".join)
def test_every_page_a_help_text_names_exists(command):
    for page in re.findall(r"docs/[\w./-]+?\.md", help_text(command)):
        assert (REPO / page).is_file(), f"kvplan {' '.join(command)} -h points at {page}, which does not exist"


@pytest.mark.parametrize("command", commands(), ids=" ".join)
def test_wide_is_offered_where_tables_narrow(command):
    assert ("--wide" in help_text(command)) == (command[0] in NARROWING)


def test_ablate_promises_only_the_tiers_the_spec_has():
    text = " ".join(help_text(["simulate"]).split())
    assert "adding the spec's offload tiers one at a time" in text
