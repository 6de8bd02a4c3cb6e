"""Bounded input: the size, depth and number limits every YAML file kvplan reads must keep.

A real spec is a few kilobytes, nested five levels deep, with a few hundred values. The limits
below are far beyond that and far below what would make parsing slow or large:

- the file's size, checked before it is read;
- while YAML is parsed, before anything is built from it (PyYAML's parser yields events without
  recursing, so this scan is safe on any input): the nesting depth (PyYAML builds nested values
  recursively, and a 3,000-deep list overflows Python's stack), the number of values with every
  alias expanded (an "alias bomb" of nine nested aliases names 387 million values in 300 bytes),
  the length of one string, and the digits of one number (Python refuses to convert integers of
  more than 4,300 digits, and big ones are slow).

Each violation is a SpecError that names the limit, the line and the fix.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import Problem, SpecError

MAX_FILE_BYTES = 4 * 1024 * 1024
"""A YAML file kvplan reads (a spec, an inventory, a profile)."""
MAX_DEPTH = 64
"""Nested mappings and lists."""
MAX_VALUES = 200_000
"""Values in a document, counted with every alias expanded."""
MAX_STRING_CHARS = 100_000
"""Characters of one string."""
MAX_NUMBER_CHARS = 100
"""Characters of one number."""

_NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}


def _limit(what: str, line: int, fix: str) -> SpecError:
    return SpecError([Problem("", f"{what} at line {line + 1}", fix=fix)])


def check_size(size: int, what: str = "the file") -> None:
    if size > MAX_FILE_BYTES:
        raise SpecError([Problem("", f"{what} is {size:,} bytes, more than the {MAX_FILE_BYTES:,} kvplan reads",
                                 fix="a spec is a few kilobytes: check that this is the file you meant")])


def check_yaml(text: str, loader: type = yaml.SafeLoader) -> None:
    """Scan `text`'s YAML events against the limits; SpecError at the first one broken (a YAML syntax error is
    left to the parser that follows, which reports it with its line)."""
    check_size(len(text.encode("utf-8", errors="replace")), "the text")
    resolver = yaml.resolver.Resolver()
    depth = values = 0
    anchored: dict[str, int] = {}                 # anchor -> values it stands for
    open_at: list[tuple[str | None, int]] = []     # collections being read: (anchor, values before it)
    try:
        for event in yaml.parse(text, Loader=loader):
            line = event.start_mark.line if event.start_mark else 0
            if isinstance(event, yaml.AliasEvent):
                values += anchored.get(event.anchor, 1)
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _limit(f"values nested more than {MAX_DEPTH} deep", line,
                                 "a spec nests a few levels: check the brackets or the indentation")
                open_at.append((event.anchor, values))
                values += 1
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
                anchor, before = open_at.pop()
                if anchor is not None:
                    anchored[anchor] = values - before
            elif isinstance(event, yaml.ScalarEvent):
                values += 1
                if event.anchor is not None:
                    anchored[event.anchor] = 1
                if len(event.value) > MAX_STRING_CHARS:
                    raise _limit(f"a string of {len(event.value):,} characters (at most {MAX_STRING_CHARS:,})", line,
                                 "shorten it, or keep long text out of the spec")
                if (event.implicit[0] and len(event.value) > MAX_NUMBER_CHARS
                        and resolver.resolve(yaml.ScalarNode, event.value, event.implicit) in _NUMBER_TAGS):
                    raise _limit(f"a number of {len(event.value):,} characters (at most {MAX_NUMBER_CHARS})", line,
                                 "write the number with fewer digits (units such as 40GiB or 2h keep them short)")
            if values > MAX_VALUES:
                raise _limit(f"more than {MAX_VALUES:,} values (aliases expanded)", line,
                             "a spec holds hundreds of values: check for aliases (*name) that repeat large blocks")
    except yaml.YAMLError:
        return


def load(text: str, loader: type = yaml.SafeLoader) -> Any:
    """`text` parsed with `loader` once it is within the limits (yaml.YAMLError for a syntax error, as yaml.load)."""
    check_yaml(text, loader)
    return yaml.load(text, Loader=loader)  # noqa: S506 - callers pass SafeLoader subclasses
