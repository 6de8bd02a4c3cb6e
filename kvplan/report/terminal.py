"""Sections as rich tables for the terminal."""

from __future__ import annotations

from rich import box
from rich.table import Table

from .sections import Section


def tables(sections: list[Section]) -> list[Table]:
    out = []
    for section in sections:
        if section.headers is None:
            table = Table(title=section.title, show_header=False, title_justify="left")
            table.add_column(style="bold")
            if section.rows and len(section.rows[0]) > 1:
                table.add_column()
        else:
            table = Table(title=section.title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                          collapse_padding=True)
            for i, header in enumerate(section.headers):
                table.add_column(header, justify="left" if i == 0 else "right")
        for row in section.rows:
            table.add_row(*row)
        out.append(table)
    return out
