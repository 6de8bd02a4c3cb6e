"""User-facing errors: a bad spec is a list of problems, each naming a field and a fix.

Every way a spec can be wrong (YAML syntax, unknown keys, wrong units, wrong types, missing
files, rules of the real stack, names missing from the catalog) ends up as a `SpecError`
holding `Problem`s. The CLI prints them and exits 1; nothing else ever reaches the user as a
traceback for bad input.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input.

    path    -- dotted field path, e.g. ``lmcache.ddr.eviction`` ("" for the whole file)
    message -- what is wrong, in words
    value   -- the offending value, if there is one
    allowed -- what would be accepted
    fix     -- a concrete change that makes the input valid
    """

    path: str
    message: str
    value: Any = None
    allowed: str | None = None
    fix: str | None = None

    def render(self) -> str:
        where = self.path or "<spec>"
        lines = [f"{where}: {self.message}"]
        if self.value is not None:
            lines.append(f"  got: {_short(self.value)}")
        if self.allowed:
            lines.append(f"  allowed: {self.allowed}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


class SpecError(Exception):
    """The input is invalid; `problems` says where and how to fix it."""

    def __init__(self, problems: Iterable[Problem], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        """One problem as it is; several numbered under a title that counts them, e.g. "4 problems in mine.yaml:"."""
        n = len(self.problems)
        if n != 1:
            title = f"{n} problems in {self.source}:" if self.source else f"{n} problems found:"
            width = len(str(n)) + 2
            items = [f"{f'{i}.':<{width}}" + p.render().replace("\n", "\n" + " " * width)
                     for i, p in enumerate(self.problems, 1)]
            return "\n".join([title, *items])
        head = f"{self.source}: " if self.source else ""
        return "\n".join([f"{head}1 problem found", self.problems[0].render()])

    def with_source(self, source: str) -> "SpecError":
        return SpecError(self.problems, source=source)


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest known name to `word`, for "did you mean" hints."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    if word.lower() in lowered:
        return lowered[word.lower()]
    match = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
