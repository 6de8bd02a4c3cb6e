"""The files a command writes (--out, -o, --write, --csv): kvplan replaces only a file it wrote itself.

Where a command's output file already exists, kvplan looks at it first. A file kvplan wrote is
replaced, so running a command again keeps working, and so is an empty file (nothing is lost: the
`out=$(mktemp)` idiom); anything else is refused with a usage error
(exit 2) before the command runs, unless `--overwrite` says to replace it. A folder, a symbolic
link, a socket or a block device is refused even with --overwrite: kvplan never writes through a link
or over a folder. A pipe (a FIFO) or a character device (/dev/null) is written into, as it replaces
nothing. `-` (stdout) is never checked.

"Written by kvplan" is read from the file itself, from what each kind of output already holds:
- YAML (plan --out's winner, doctor --write, import -o, calibrate -o, render --format production-stack):
  a first line that is a comment naming kvplan as its writer (`# written by kvplan plan: ...`,
  `# made by kvplan import ...`, `# Helm values ..., rendered by kvplan ...`, `# ... fitted by `kvplan calibrate` ...`);
- an HTML report: `<meta name="generator" content="kvplan ...">` in its head;
- a Markdown report: a first line `<!-- written by kvplan report ... -->` (invisible when rendered);
- JSON (simulate, sweep, capacity, size --out): a result `kvplan report` reads back (kvplan.report.inputs): a
  document with one of kvplan's kinds (kvplan.report.kinds), or from a kvplan before kinds, its keys;
- CSV (sweep --csv): kvplan's header row (`..., spec_hash, seeds, ..., slo_met`).
The marker guards against mistakes, not against forgery: a file can be made to look like kvplan's.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import typer

STDOUT = "-"
"""--out - (and --csv -): write to standard output instead of a file."""

OVERWRITE_HELP = "Replace an existing output file that kvplan did not write (a file kvplan wrote is replaced without it)."

_YAML_HEADER = re.compile(r"# (written|made) by kvplan |# Helm values for vllm-project/production-stack, rendered by kvplan "
                          r"|# llm-d's EndpointPickerConfig \(.*\), rendered by kvplan |# Device profile of .*, fitted by "
                          r"`kvplan calibrate`")
"""The first line of each YAML file kvplan writes (plan, doctor, import; render's Helm values and llm-d config;
calibrate's profile), as each writer words it."""
_HTML_GENERATOR = '<meta name="generator" content="kvplan '
MARKDOWN_HEADER = "<!-- written by kvplan report"
"""How kvplan.report.html.MARKDOWN_MARK begins (the version follows)."""
_HEAD_BYTES = 4096


def _head(path: Path) -> bytes:
    """The first bytes of a file, opened without following a link or waiting on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return f.read(_HEAD_BYTES)


def written_by_kvplan(path: Path) -> bool:
    """Whether the regular file at `path` carries the mark of a file kvplan writes (see the module docstring)."""
    try:
        head = _head(path).decode("utf-8", errors="replace")
    except OSError:
        return False
    first = head.split("\n", 1)[0]
    if _YAML_HEADER.match(first) or first.startswith(MARKDOWN_HEADER) or _HTML_GENERATOR in head:
        return True
    cells = first.split(",")
    if "spec_hash" in cells and "seeds" in cells and cells[-1].strip() == "slo_met":
        return True
    if head.lstrip()[:1] in ("{", "["):
        from ..errors import SpecError
        from ..report.inputs import load

        try:
            load(path)
        except (SpecError, OSError, ValueError, RecursionError):
            return False
        return True
    return False


def _size(n: int) -> str:
    return "1 byte" if n == 1 else f"{n:,} bytes"


def check(path: str | None, option: str, overwrite: bool) -> None:
    """Refuse (a usage error naming `option`) to write `path` where something stands that kvplan may not replace."""
    if path is None or path == STDOUT:
        return
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise typer.BadParameter(f"{path} cannot be looked at ({exc.strerror}); choose another path",
                                 param_hint=option) from None
    if stat.S_ISLNK(st.st_mode):
        raise typer.BadParameter(f"{path} is a symbolic link; kvplan never writes through one, even with "
                                 "--overwrite: choose another path", param_hint=option)
    if stat.S_ISDIR(st.st_mode):
        raise typer.BadParameter(f"{path} is a folder; kvplan writes a file there and never replaces a folder, even "
                                 "with --overwrite: name a file (e.g. inside it)", param_hint=option)
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
        return                  # a pipe or /dev/null: written into, never replaced
    if not stat.S_ISREG(st.st_mode):
        raise typer.BadParameter(f"{path} exists and is neither a regular file, a pipe nor a character device (a "
                                 "socket or a disk); kvplan never writes one, even with --overwrite: choose another path",
                                 param_hint=option)
    if not overwrite and st.st_size and not written_by_kvplan(p):
        raise typer.BadParameter(f"{path} exists ({_size(st.st_size)}) and kvplan did not write it (it lacks the "
                                 "header or keys of kvplan's files); pass --overwrite to replace it, or choose another "
                                 "path", param_hint=option)


def write(path: str, text: str, option: str, overwrite: bool) -> None:
    """Write `text` to `path` after `check`: created or truncated without following a symbolic link."""
    check(path, option, overwrite)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


__all__ = ["MARKDOWN_HEADER", "OVERWRITE_HELP", "check", "write", "written_by_kvplan"]
