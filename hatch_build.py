"""The wheel's compiled core: the simulator's hot modules built with mypyc.

mypyc compiles typed Python into C extension modules that run the same code without the
interpreter's per-operation dispatch (benchmarks/README.md says what it buys); Python imports an
extension module ahead of the .py beside it. The modules to compile are listed in pyproject.toml
(`compile` of this hook); their types are held by tests/test_sim_types.py and their results to the
interpreted modules' by tests/test_compiled.py.

A module may also have a C twin (`extensions` of this hook: kvplan/sim/keyhash.c beside keyhash.py,
eventqueue.c beside eventqueue.py), written by hand where what the Python builds for each result is
the cost (each .py says why); it is built with setuptools into the same package and held to its
Python module by its own test.

They are compiled from a copy of the package in a temporary folder, so the checkout keeps no build
artefact (one left there would shadow an edited module for `python -m kvplan` run from the
checkout). The build fails when a module cannot be compiled; it never falls back to the interpreted
module. An editable install (`pip install -e .`) compiles nothing: its point is that edits to the
sources take effect.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

FIX = ("mypyc and the C extensions need a C compiler and the Python headers: on Debian, "
       "`apt-get install gcc python3-dev` (./install.sh installs them when they are missing)")


BUILD_EXTENSIONS = """
import sys
from setuptools import Extension, setup
setup(name="kvplan-extensions", script_args=["build_ext", "--inplace"],
      ext_modules=[Extension(name, [name.replace(".", "/") + ".c"]) for name in sys.argv[1:]])
"""


class CompiledCore(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        modules = self.config.get("compile", [])
        self._work = Path(tempfile.mkdtemp(prefix="kvplan-mypyc-"))
        shutil.copytree(Path(self.root) / "kvplan", self._work / "kvplan",
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
        result = subprocess.run([sys.executable, "-m", "mypyc", "--follow-imports=silent", *modules],
                                cwd=self._work, capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"mypyc could not compile {', '.join(modules)}; {FIX}.\n"
                               f"{result.stdout[-4000:]}{result.stderr[-4000:]}")
        suffix = EXTENSION_SUFFIXES[0]
        built = {}
        extensions = self.config.get("extensions", [])
        if extensions:
            for source in extensions:              # the copy above leaves out every .c (mypyc's, stale ones)
                shutil.copy2(Path(self.root) / source, self._work / source)
            names = [source.removesuffix(".c").replace("/", ".") for source in extensions]
            result = subprocess.run([sys.executable, "-c", BUILD_EXTENSIONS, *names], cwd=self._work,
                                    capture_output=True, text=True)
            if result.returncode:
                raise RuntimeError(f"could not build {', '.join(extensions)}; {FIX}.\n"
                                   f"{result.stdout[-4000:]}{result.stderr[-4000:]}")
            modules = [*modules, *extensions]
        for module in modules:
            path = self._work / (module.removesuffix(".py").removesuffix(".c") + suffix)
            if not path.is_file():
                raise RuntimeError(f"the build reported success but made no {path.name} for {module}")
            built[str(path)] = path.relative_to(self._work).as_posix()
        shared = list(self._work.glob(f"*__mypyc{suffix}"))    # the runtime the modules share, top level
        if len(shared) != 1:
            raise RuntimeError(f"expected one shared mypyc library, found {[p.name for p in shared]}")
        built[str(shared[0])] = shared[0].name
        build_data["force_include"].update(built)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
