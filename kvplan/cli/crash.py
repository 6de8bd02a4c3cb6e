"""The last line of defence: an exception no command handled becomes a short message, not a traceback.

Every failure kvplan expects is a SpecError (bad input, with its field and fix) or a command's own
exit code. Anything else that reaches `main` is a bug in kvplan. It is reported in one line, with
the traceback and the command line saved to a report file in the state directory for the bug
report, and the process exits with EXIT_INTERNAL. The fuzz suite (tests/test_fuzz.py) holds that no
input reaches this point.
"""

from __future__ import annotations

import datetime as dt
import sys
import traceback
from pathlib import Path

EXIT_INTERNAL = 70
"""An internal error (sysexits' EX_SOFTWARE): kvplan failed, not the input."""


def save_report(exc: BaseException, argv: list[str], state_dir: Path) -> Path | None:
    """Write the traceback and command line to state_dir/crash/<time>.txt; None when it cannot be written."""
    from .. import __version__

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = state_dir / "crash" / f"{stamp}.txt"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"kvplan {__version__}\ncommand: {' '.join(argv)}\n\n"
                        + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    except OSError:
        return None
    return path


def report(exc: BaseException) -> int:
    """Print the internal error in one line (and where its report is) and return EXIT_INTERNAL."""
    from ..paths import state_dir
    from .console import err

    try:
        where = save_report(exc, sys.argv, state_dir())
    except Exception:        # noqa: BLE001 - the report is best effort; the message below is not
        where = None
    err.print(f"kvplan: internal error: {type(exc).__name__}: {str(exc)[:300]}")
    err.print(f"  this is a bug in kvplan, not in your input; the details are in {where}" if where else
              "  this is a bug in kvplan, not in your input (the details could not be saved)")
    return EXIT_INTERNAL
