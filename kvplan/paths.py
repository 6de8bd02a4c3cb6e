"""Where kvplan keeps what it writes outside your files: the platform's user directories.

- **state** (deploy runs, bench runs, the RGW keys kvplan generated, kept owner-only):
  `$XDG_STATE_HOME/kvplan`, by default `~/.local/state/kvplan`;
- **cache** (finished simulation runs that `sweep` and `capacity` reuse): `$XDG_CACHE_HOME/kvplan`,
  by default `~/.cache/kvplan`.

One override moves both: `--state-dir DIR` on a command, or `KVPLAN_STATE_DIR=DIR` in the
environment (the cache is then DIR/cache); `--cache-dir` moves the cache alone. Earlier versions
kept everything in `.kvplan/` of the current directory: when that folder exists and nothing
overrides, kvplan keeps using it, says so on stderr and says how to move it, so keys a running
deployment uses are never silently replaced.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

ENV = "KVPLAN_STATE_DIR"
LEGACY = Path(".kvplan")
"""The state directory of earlier versions, relative to the current directory."""


def _xdg(variable: str, default: str) -> Path:
    base = os.environ.get(variable, "")
    return (Path(base) if os.path.isabs(base) else Path.home() / default) / "kvplan"


def state_dir(given: str | None = None, warn: Callable[[str], None] | None = None) -> Path:
    """The state directory: `given` (--state-dir), else KVPLAN_STATE_DIR, else a legacy ./.kvplan (with a warning),
    else XDG's."""
    if given:
        return Path(given)
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    xdg = _xdg("XDG_STATE_HOME", ".local/state")
    if LEGACY.is_dir() and not LEGACY.is_symlink():
        if warn is not None:
            warn(f"using {LEGACY}/ in this directory, where earlier kvplan versions kept their state; move it with "
                 f"`mv {LEGACY} {xdg}` (then kvplan finds it from any directory) or pass --state-dir {LEGACY}")
        return LEGACY
    return xdg


def cache_dir(given: str | None = None, warn: Callable[[str], None] | None = None) -> Path:
    """The run cache: `given` (--cache-dir), else KVPLAN_STATE_DIR/cache, else a legacy ./.kvplan/cache, else XDG's."""
    if given:
        return Path(given)
    if os.environ.get(ENV):
        return Path(os.environ[ENV]) / "cache"
    if (LEGACY / "cache").is_dir() and not LEGACY.is_symlink():
        if warn is not None:
            warn(f"using {LEGACY}/cache in this directory, where earlier kvplan versions kept finished runs; "
                 f"it can be deleted (runs are simulated again) or given as --cache-dir")
        return LEGACY / "cache"
    return _xdg("XDG_CACHE_HOME", ".cache")
