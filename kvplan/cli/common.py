"""What every kvplan command module shares: the app's help options, the output conventions (--json and
--out - print the result itself on stdout, a file gets a line on stderr), the option help texts, the
--set option of every command that reads a spec, spec warnings, a progress bar that only long runs show, and tables
that fit the terminal unless --wide.

Machine-readable output: every command that prints a result takes `--format` with `json` and `yaml` beside
its human formats (`table`, and `md` where it has it), and `--json` as the short form of `--format json`.
Both print one document carrying `kind` and `schema_version` (kvplan/report/kinds.py). `-o` is not the
format option, as it is in kubectl: report, calibrate, import and render had taken `-o` for an output file.
Files written with --out stay JSON, whatever --format says: that is what `kvplan report` reads."""

from __future__ import annotations

import typer
from rich.console import Console

from . import files
from .console import err, out, styled
from .files import STDOUT

HELP = {"help_option_names": ["-h", "--help"]}

JSON_HELP = "Print the result as JSON on stdout instead of tables (the same JSON --out writes); short for --format json."
STATE_HELP = ("Where runs and generated keys are kept (default: KVPLAN_STATE_DIR, else $XDG_STATE_HOME/kvplan, "
              "~/.local/state/kvplan).")
CACHE_HELP = ("Where finished runs are kept (default: KVPLAN_STATE_DIR/cache, else $XDG_CACHE_HOME/kvplan, "
              "~/.cache/kvplan).")
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


DATA_FORMATS = ("json", "yaml")
"""The formats that print a result as data, beside a command's human ones."""


def format_option(*human: str):
    """The --format option of a command whose human formats are `human` (the first is the default), with json and
    yaml beside them."""
    names = (*human, *DATA_FORMATS)
    return typer.Option(human[0], "--format", help=f"{', '.join(names[:-1])} or {names[-1]}: json and yaml print "
                                                   "the result as one document with its kind and schema_version "
                                                   "(kvplan schema --kind KIND: its JSON Schema).")


def data_format(fmt: str, as_json: bool, human: tuple[str, ...] = ("table",)) -> str | None:
    """'json' or 'yaml' when the result is printed as data (--json is --format json), None for the human formats;
    a usage error for a format the command does not print, or --json beside another --format."""
    names = (*human, *DATA_FORMATS)
    if fmt not in names:
        raise typer.BadParameter(f"'{fmt}' is not a format; use {', '.join(names[:-1])} or {names[-1]}",
                                 param_hint="--format")
    if as_json and fmt not in (human[0], "json"):
        raise typer.BadParameter(f"--json is --format json; it cannot go with --format {fmt}: give one of them",
                                 param_hint="--json/--format")
    return "json" if as_json else fmt if fmt in DATA_FORMATS else None


def emit_document(kind: str, payload, out_file: str | None, fmt: str | None, what: str, overwrite: bool,
                  option: str = "--out") -> None:
    """The result as a `kind` document: printed on stdout in `fmt` (json or yaml; --out - prints JSON), and
    written as JSON into the file --out names (see `emit`)."""
    from ..report.kinds import dump

    if fmt is not None:
        typer.echo(dump(kind, payload, fmt), nl=False)
    elif out_file == STDOUT:
        typer.echo(dump(kind, payload), nl=False)
    if out_file and out_file != STDOUT:
        emit(dump(kind, payload), out_file, False, what, overwrite, option)


WIDE = typer.Option(False, "--wide", help="Print every table whole, wider than the terminal if it must be (by "
                                          "default a table leaves out or shortens the columns its footer names, to "
                                          "fit).")
"""The --wide option of the commands whose tables narrow to fit the terminal (kvplan.report.terminal)."""


def table_width(wide: bool) -> int | None:
    """The columns a table may take: the terminal's (COLUMNS off a terminal; unlimited when neither says), or
    none for --wide."""
    return None if wide else out.width


def print_tables(tables, wide: bool = False) -> None:
    """Print the tables on stdout; with --wide each at its whole width, wider than the terminal if it must be."""
    from ..report.terminal import natural_width

    for table in tables:
        width = out.width
        if wide and natural_width(table) > width:
            out.width = natural_width(table)
        try:
            out.print(table)
        finally:
            out.width = width


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
