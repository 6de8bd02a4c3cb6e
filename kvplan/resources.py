"""Where kvplan's data folders (models/, templates/, inventories/) are on this machine.

In the repository they are top-level folders; an installed wheel carries copies under
kvplan/_data/ (pyproject.toml maps them there), so the commands work from any directory.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_root() -> Path:
    """The folder holding models/, templates/ and inventories/."""
    for candidate in (_PACKAGE / "_data", _PACKAGE.parent):
        if (candidate / "models" / "llm").is_dir():
            return candidate
    raise FileNotFoundError(f"kvplan's data folders are missing (looked in {_PACKAGE / '_data'} and {_PACKAGE.parent}); "
                            "reinstall kvplan with `pip install .` from a full checkout")
