"""The simulator's hot modules type-check with the types their values really have.

They are the candidates for a compiled core (mypyc compiles typed Python and enforces the
annotations at run time), so an annotation that does not hold would turn into a crash there;
mypy holds them to it here. Imported modules are read for their types, not checked
(`--follow-imports=silent`).
"""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

HOT = ["prefix_cache", "content", "clock", "links", "decoding", "seq", "engine", "lmcache", "native", "fabric", "eviction", "policies",
       "steptime"]


def test_the_simulators_hot_modules_have_no_type_errors():
    paths = [str(REPO / "kvplan" / "sim" / f"{name}.py") for name in HOT]
    result = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-incremental", *paths],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"no issues found in {len(HOT)} source files" in result.stdout
