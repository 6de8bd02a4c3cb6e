"""The wheel carries models/, templates/ and inventories/, so an installed kvplan works anywhere."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from conftest import REPO

import pytest

pytestmark = pytest.mark.compiled


def test_wheel_ships_the_data_folders_inside_the_package(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(tmp_path), str(REPO)], check=True, timeout=300)
    [wheel] = tmp_path.glob("kvplan-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for model in (REPO / "models").rglob("*.yaml"):
        assert f"kvplan/_data/models/{model.relative_to(REPO / 'models').as_posix()}" in names
    assert "kvplan/_data/templates/README.md" in names
    assert "kvplan/_data/inventories/README.md" in names
    assert any(n.endswith("entry_points.txt") for n in names)
