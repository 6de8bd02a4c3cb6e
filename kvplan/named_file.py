"""A file the user names (a command's argument, a path in a spec): read only when it is a regular file.

A FIFO would hold the command until something writes into it, a device such as /dev/zero never ends, a folder
is no file: each is refused by what it is, from `os.stat` (which neither opens nor blocks), before anything
opens it for reading. A missing file is left to the reader, which says what it was looking for.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import Problem, SpecError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def not_regular(path: str | Path) -> str | None:
    """What `path` is when it exists and is not a regular file (a link is followed): "a FIFO (named pipe)", ...;
    None for a regular file or nothing at all."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def check_regular(path: str | Path, field: str, fix: str) -> None:
    """SpecError naming `field` when `path` exists and is not a regular file."""
    kind = not_regular(path)
    if kind is not None:
        raise SpecError([Problem(field, f"{path} is {kind}, not a file kvplan reads", fix=fix)])
