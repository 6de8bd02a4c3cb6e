"""The wheel carries models/, templates/ and inventories/, so an installed kvplan works anywhere.

The installed kvplan is the wheel `install.sh` built (`pip install .`), and its RECORD lists every file
the wheel held: the test reads that list rather than building a second wheel (a minute of mypyc)."""

from __future__ import annotations

import importlib.metadata

from conftest import REPO

import pytest

pytestmark = pytest.mark.compiled


def test_wheel_ships_the_data_folders_inside_the_package():
    dist = importlib.metadata.distribution("kvplan")
    names = {f.as_posix() for f in dist.files or []}
    assert names, "kvplan is installed without a RECORD: not from a wheel (an editable or source-tree install)"
    for model in (REPO / "models").rglob("*.yaml"):
        assert f"kvplan/_data/models/{model.relative_to(REPO / 'models').as_posix()}" in names
    assert "kvplan/_data/templates/README.md" in names
    assert "kvplan/_data/inventories/README.md" in names
    assert any(n.endswith("entry_points.txt") for n in names)
