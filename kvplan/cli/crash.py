"""The last line of defence: an exception no command handled becomes a short message, not a traceback.

Every failure kvplan expects is a SpecError (bad input, with its field and fix) or a command's own
exit code. Anything else that reaches `main` is a bug in kvplan. It is reported in one line, with
the traceback and the command line saved to a report file in the state directory for the bug
report, and the process exits with EXIT_INTERNAL. The fuzz suite (tests/test_fuzz.py) holds that no
input reaches this point.

A report keeps no secret: the value of every option that carries one (SECRET_WORDS: --api-key and
its like) is replaced by REDACTED in the command line, and that value, and the value of every
environment variable whose name says it is a secret (OPENAI_API_KEY, HF_TOKEN, ...), is replaced
wherever else it appears (an exception's message may quote a header). The file is the owner's
only (0600, in a 0700 folder) and its path is printed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import sys
import traceback
from pathlib import Path

EXIT_INTERNAL = 70
"""An internal error (sysexits' EX_SOFTWARE): kvplan failed, not the input."""

SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "pass", "credential", "credentials", "auth"}
"""An option or environment variable one of whose words (split at - and _) is one of these carries a secret:
--api-key, OPENAI_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY (not TOKENIZERS_PARALLELISM)."""


def secret_name(name: str) -> bool:
    return any(word in SECRET_WORDS for word in re.split(r"[-_]+", name.lower()))

REDACTED = "<redacted>"

MIN_SECRET = 4
"""A secret value shorter than this is not searched for in the rest of the report (it would blank out common
letters); the command line's own value is redacted whatever its length."""


def _quoted_secrets(arg: str) -> list[str]:
    """The secrets inside a command line given as one argument (`kvplan import --vllm "VLLM_API_KEY=K vllm serve M
    --api-key K"`): the values of its secret options and of its NAME=value words whose name says secret."""
    if not any(c.isspace() for c in arg):
        return []
    try:
        words = shlex.split(arg)
    except ValueError:
        words = arg.split()
    found = redact_argv(words)[1]
    found += [value for name, eq, value in (w.partition("=") for w in words)
              if eq and value and not name.startswith("-") and secret_name(name)]
    return found


def redact_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(argv with the value of every secret option redacted, the values redacted). `--api-key VALUE` and
    `--api-key=VALUE` alike, also inside a command line quoted as one argument (_quoted_secrets)."""
    out: list[str] = []
    secrets: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            secrets.append(arg)
            hide_next = False
            continue
        name, eq, value = arg.partition("=")
        if arg.startswith("--") and secret_name(name):
            if eq:
                out.append(f"{name}={REDACTED}")
                secrets.append(value)
            else:
                out.append(arg)
                hide_next = True
            continue
        quoted = _quoted_secrets(arg)
        for secret in sorted(set(quoted), key=len, reverse=True):
            arg = arg.replace(secret, REDACTED)
        secrets += quoted
        out.append(arg)
    return out, secrets


def environment_secrets(environ: dict[str, str] | os._Environ = os.environ) -> list[str]:
    """The values of the environment variables whose names say they are secrets."""
    return [value for name, value in environ.items() if secret_name(name) and value]


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every secret of MIN_SECRET characters or more replaced by REDACTED (the longest first)."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def save_report(exc: BaseException, argv: list[str], state_dir: Path,
                environ: dict[str, str] | os._Environ = os.environ) -> Path | None:
    """Write the traceback and command line, secrets redacted, to state_dir/crash/<time>.txt (0600, the folder
    0700); None when it cannot be written."""
    from .. import __version__

    shown, secrets = redact_argv(argv)
    secrets += environment_secrets(environ)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    folder = state_dir / "crash"
    path = folder / f"{stamp}.txt"
    text = redact(f"kvplan {__version__}\ncommand: {' '.join(shown)}\n\n"
                  + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), secrets)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(folder, 0o700)             # kvplan's own folder: one an older kvplan made 0755 is closed too
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(text)
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
    secrets = redact_argv(sys.argv)[1] + environment_secrets()
    err.print(redact(f"kvplan: internal error: {type(exc).__name__}: {str(exc)[:300]}", secrets))
    err.print(f"  this is a bug in kvplan, not in your input; the details are in {where} (readable by you only, "
              "secrets removed)" if where else
              "  this is a bug in kvplan, not in your input (the details could not be saved)")
    return EXIT_INTERNAL
