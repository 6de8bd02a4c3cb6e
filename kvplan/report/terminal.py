"""Sections as rich tables for the terminal, each fitted to the terminal's width.

A table wider than the terminal would have rich wrap its cells into stacks of short lines. So a
section names how it narrows (`Section.narrow`): step by step, in its order, a column is left
out or printed shorter, until the table fits; its footer (the caption) names what was left out
and that `--wide` shows it. The columns that carry the answer (SLO figures, cost, verdicts) are
never left out. A key/value section keeps each key on one line and wraps its text as a paragraph.
Markdown, HTML and `--wide` show every column whole.
"""

from __future__ import annotations

import textwrap
from io import StringIO

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from .sections import Section

_MEASURE = Console(width=1_000_000, file=StringIO(), color_system=None)


def natural_width(table: Table) -> int:
    """The columns `table` takes when nothing in it wraps."""
    return Measurement.get(_MEASURE, _MEASURE.options, table).maximum


def tables(sections: list[Section], width: int | None = None) -> list[Table]:
    """The sections as tables; with `width` (the terminal's columns), each narrowed until it fits (None: whole)."""
    return [fitted(section, width) for section in sections]


def fitted(section: Section, width: int | None) -> Table:
    """The section's table within `width` columns, by as few of its narrowing steps as it takes."""
    table = _table(section, width)
    if width is None or not section.narrow:
        return table
    left_out: list[str] = []
    shortened: dict[str, list[str]] = {}
    for header, cells in section.narrow:
        if natural_width(table) <= width:
            break
        if cells is None:
            left_out.append(header)
            shortened.pop(header, None)
        else:
            shortened[header] = cells
        table = _table(section, width, set(left_out), shortened)
    if left_out or shortened:
        said = [f"left out: {', '.join(left_out)}"] if left_out else []
        said += [f"shortened: {', '.join(h.split(' (')[0] for h in shortened)}"] if shortened else []
        table.caption = Text("; ".join(said) + "; --wide shows all")
        table.caption_justify = "left"
    return table


def _title(title: str, width: int | None) -> Text:
    """The title, broken into lines at spaces where it is longer than `width` (rich would print it on one line)."""
    return Text(title if width is None or len(title) <= width else textwrap.fill(title, width))


def _table(section: Section, width: int | None, left_out: set[str] = frozenset(),
           shortened: dict[str, list[str]] | None = None) -> Table:
    shortened = shortened or {}
    if section.headers is None:
        table = Table(title=_title(section.title, width), show_header=False, title_justify="left")
        pairs = bool(section.rows) and len(section.rows[0]) > 1
        table.add_column(style="bold", no_wrap=pairs)          # a key never breaks; its text wraps
        if pairs:
            table.add_column()
        for row in section.rows:
            table.add_row(*(Text(cell) for cell in row))
        return table
    table = Table(title=_title(section.title, width), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    kept = [i for i, header in enumerate(section.headers) if header not in left_out]
    for i in kept:
        table.add_column(Text(section.headers[i]), justify="left" if i == 0 else "right")
    for r, row in enumerate(section.rows):
        table.add_row(*(Text(shortened[section.headers[i]][r] if section.headers[i] in shortened else row[i])
                        for i in kept))
    return table
