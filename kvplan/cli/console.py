"""The terminal: where kvplan's commands print, and the rule that text is printed as text.

Everything kvplan prints passes through the two consoles here, `out` (results, on stdout) and
`err` (errors, warnings and progress, on stderr). Much of it came from a user or a server: spec
names, paths, model ids, error bodies, metric labels. So these consoles read no rich markup
(`[red]` prints as `[red]`), expand no emoji codes (`:smile:` stays), and print control
characters other than newline and tab as visible escapes (`\\x1b`), so a string can neither
style, break nor take over the terminal. Styling is kvplan's own and explicit: `styled` builds
a `rich.text.Text` with a style, never a markup string. `fail` prints an invalid input's
problems and exits with EXIT_INVALID.

Off a terminal (a pipe, a file, CI) nothing is cut to fit a width: tables and lines print whole,
so `kvplan catalog | grep` sees full names, unless COLUMNS asks for a width. On a terminal rich
fits tables to its width.
"""

from __future__ import annotations

import os
import re
from typing import NoReturn

import typer
from rich.console import Console
from rich.segment import Segment
from rich.text import Text

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
WIDE = 100_000
"""Columns a console has off a terminal: wide enough that no table or line is ever cut."""


def visible(text: str) -> str:
    """`text` with every control character but newline and tab written as a visible escape."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class TextConsole(Console):
    """A rich console that prints strings as text (see the module docstring)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, soft_wrap=True, **kwargs)
        if not self.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
            self.width = WIDE

    def render_str(self, text: str, **kwargs) -> Text:
        """A string becomes Text made `visible` first, so tables measure what will be printed."""
        return super().render_str(visible(text), **kwargs)

    def render(self, renderable, options=None):
        """Every segment rich renders, its text made `visible` (rich's own control segments pass as they are):
        the last guard, for Text built elsewhere."""
        for segment in super().render(renderable, options):
            yield segment if segment.control else Segment(visible(segment.text), segment.style)


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text from plain strings and (string, style) pairs: `styled(("valid:", "bold green"), " ", path)`."""
    out = Text()
    for part in parts:
        if isinstance(part, tuple):
            out.append(visible(part[0]), style=part[1])
        else:
            out.append(visible(part))
    return out


out = TextConsole()
err = TextConsole(stderr=True)


def warn(message: str) -> None:
    """A warning on stderr: the input is valid, but something in it deserves a look."""
    err.print(styled(("warning:", "bold yellow"), " ", message))


EXIT_INVALID = 1
"""The exit code of a command whose input (spec, flags, files) is invalid."""


GIVEN_SETS: list = []
"""The --set overrides of the command running (cli/common.py `overrides`; the app's callback empties it), so that a
problem `fail` prints of a field they set says so, whichever check (fields, rules, catalog) found it."""


def fail(exc) -> NoReturn:
    """Print a SpecError's problems (each with its field, value and fix) and exit EXIT_INVALID."""
    if GIVEN_SETS:
        from ..spec.overrides import attributed

        exc = attributed(exc, GIVEN_SETS)
    err.print(styled(("invalid:", "bold red"), " ", exc.render()))
    raise typer.Exit(EXIT_INVALID)
