"""The renderer-neutral page of a report: a Document is a title and its Parts, and a Part holds tables
(`Section`s, the same ones `kvplan simulate` prints), figures (`figures.py`) and notes. document.py
and sizing.py build them; html.py and document.to_markdown render them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .figures import Figure
from .sections import Section


@dataclass
class Part:
    title: str
    intro: str = ""
    tables: list[Section] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Document:
    title: str
    subtitle: str
    parts: list[Part]

    @property
    def figures(self) -> list[Figure]:
        return [f for p in self.parts for f in p.figures]

    @property
    def tables(self) -> list[Section]:
        return [t for p in self.parts for t in p.tables]
