"""What every kvplan command module shares: the app's help options, the output conventions (--json and
--out - print the result itself on stdout, a file gets a line on stderr), the option help texts, the
--set option of every command that reads a spec, spec warnings and a progress bar that only long runs show."""

from __future__ import annotations

import typer
from rich.console import Console

from . import files
from .console import err, styled
from .files import STDOUT

HELP = {"help_option_names": ["-h", "--help"]}

JSON_HELP = "Print the result as JSON on stdout instead of tables (the same JSON --out writes)."
STATE_HELP = ("Where runs and generated keys are kept (default: KVPLAN_STATE_DIR, else $XDG_STATE_HOME/kvplan, "
              "~/.local/state/kvplan).")
CACHE_HELP = "Where finished runs are kept (default: KVPLAN_STATE_DIR/cache, else ~/.cache/kvplan)."
SET_HELP = ("PATH=VALUE: change a spec field for this run, the file untouched, e.g. serving.max_num_seqs=128 "
            "(a field of the spec schema; VALUE as YAML, units allowed; null removes it); repeatable, applied "
            "left to right, the spec validated after.")


def set_option():
    """The --set option (a fresh one per command: Typer keeps one parameter object per use)."""
    return typer.Option(None, "--set", metavar="PATH=VALUE", help=SET_HELP)


def overrides(sets: list[str] | None) -> tuple:
    """The --set overrides, in order; one that cannot be read or names no spec field is a usage error (exit 2)
    that names the field, the keys allowed there and a guess."""
    from ..spec.overrides import SetUsageError, parse_all

    from .console import GIVEN_SETS

    try:
        given = parse_all(sets)
    except SetUsageError as exc:
        raise typer.BadParameter(str(exc), param_hint="--set") from None
    GIVEN_SETS[:] = given
    return given


def spec_words(spec: str, given) -> str:
    """The spec as a next command should name it: its path and the --set it was read with (shell-quoted where
    needed), so a suggested command runs the same spec."""
    import shlex

    return " ".join([spec, *(f"--set {shlex.quote(str(o))}" for o in given)])


def echo_change(change) -> None:
    """One line on stderr per --set: `set: serving.max_num_seqs 256 -> 128`."""
    err.print(change.line())


def emit(data: str, out_file: str | None, as_json: bool, what: str, overwrite: bool, option: str = "--out") -> None:
    """`data` (JSON or CSV text, ending in a newline) on stdout for --json or --out - (the caller then prints no
    tables), and into the file --out names (a file kvplan did not write only with --overwrite: cli/files.py)."""
    if as_json or out_file == STDOUT:
        typer.echo(data, nl=False)
    if out_file and out_file != STDOUT:
        files.write(out_file, data, option, overwrite)
        err.print(f"{what} written to {out_file}")


def run_cache(cache_dir: str | None, no_cache: bool):
    """The run cache the --cache-dir / --no-cache options ask for (None: off)."""
    from .. import paths
    from ..sweep.cache import RunCache
    from .console import warn

    return None if no_cache else RunCache(paths.cache_dir(cache_dir, warn=warn))


def print_warnings(warnings: list, console: Console) -> None:
    """Print warnings (Problems that do not make the input invalid)."""
    for problem in warnings:
        console.print(styled(("warning:", "bold yellow"), " ", problem.render()))


class ProgressBar:
    """A progress bar that appears only when a run lasts more than a couple of seconds."""

    DELAY_S = 2.0

    def __enter__(self):
        import time

        self._start, self._bar, self._task = time.monotonic(), None, None
        return self._update

    def _update(self, fraction: float) -> None:
        import time

        if self._bar is None:
            if time.monotonic() - self._start < self.DELAY_S or not err.is_terminal:
                return
            from rich.progress import Progress

            self._bar = Progress(console=err, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("simulating", total=1.0)
        self._bar.update(self._task, completed=fraction)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
