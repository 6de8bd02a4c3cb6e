"""Bounded input: the size, depth and number limits every YAML file kvplan reads must keep.

A real spec is a few kilobytes, nested five levels deep, with a few hundred values. The limits
below are far beyond that and far below what would make parsing slow or large:

- the file's size, checked before it is read;
- while YAML is composed into nodes, before any value is built from them (PyYAML's parser is a
  state machine that does not recurse; its composer recurses once a level, so it is stopped long
  before Python's stack is): the nesting depth (a 3,000-deep list would overflow the stack), the
  number of values with every alias expanded (an "alias bomb" of nine nested aliases names 387
  million values in 300 bytes), the length of one string, and the digits of one number (Python
  refuses to convert integers of more than 4,300 digits, and big ones are slow).

A value that its explicit tag cannot build (`!!int 0b102`, `!!float 'x'`) is a YAML error at its
line, like a syntax error, rather than the constructor's own ValueError.

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


class _Bounded:
    """A PyYAML Loader mixin that holds the document to the limits while it composes it, in the one pass that
    parses it: the depth, the values (an alias counts what its anchor holds) and each scalar's length."""

    def compose_document(self):
        self._depth, self._values, self._anchored = 0, 0, {}
        return super().compose_document()

    def compose_node(self, parent, index):
        event = self.peek_event()
        line = event.start_mark.line if event.start_mark else 0
        if isinstance(event, yaml.AliasEvent):
            self._count(self._anchored.get(event.anchor, 1), line)
            return super().compose_node(parent, index)
        if isinstance(event, yaml.ScalarEvent):
            _check_scalar(event, line)
        before = self._values
        self._count(1, line)
        nested = isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent))
        if nested:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _limit(f"values nested more than {MAX_DEPTH} deep", line,
                             "a spec nests a few levels: check the brackets or the indentation")
        node = super().compose_node(parent, index)
        if nested:
            self._depth -= 1
        if event.anchor is not None:
            self._anchored[event.anchor] = self._values - before
        return node

    def construct_object(self, node, deep=False):
        """A value its tag cannot build (`!!int 0b102`, `!!float 'x'`, `!!bool x`, `!!timestamp x`: PyYAML's
        constructors raise ValueError, KeyError and the like for them) is a YAML error at the node's line."""
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, KeyError, IndexError, AttributeError, TypeError, OverflowError):
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise yaml.constructor.ConstructorError(
                None, None, f"{tag} cannot be read from {str(node.value)[:60]!r}: write the value without the tag, "
                f"or as that type writes it", node.start_mark) from None

    def _count(self, n: int, line: int) -> None:
        self._values += n
        if self._values > MAX_VALUES:
            raise _limit(f"more than {MAX_VALUES:,} values (aliases expanded)", line,
                         "a spec holds hundreds of values: check for aliases (*name) that repeat large blocks")


_RESOLVER = yaml.resolver.Resolver()


def _check_scalar(event: yaml.ScalarEvent, line: int) -> None:
    if len(event.value) > MAX_STRING_CHARS:
        raise _limit(f"a string of {len(event.value):,} characters (at most {MAX_STRING_CHARS:,})", line,
                     "shorten it, or keep long text out of the spec")
    if (event.implicit[0] and len(event.value) > MAX_NUMBER_CHARS
            and _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit) in _NUMBER_TAGS):
        raise _limit(f"a number of {len(event.value):,} characters (at most {MAX_NUMBER_CHARS})", line,
                     "write the number with fewer digits (units such as 40GiB or 2h keep them short)")


_LOADERS: dict[type, type] = {}


def load(text: str, loader: type = yaml.SafeLoader) -> Any:
    """`text` parsed with `loader` held to the limits (a SpecError naming the one broken; yaml.YAMLError for a
    syntax error, as yaml.load). The file's size is the caller's to check, before it reads it (check_size)."""
    bounded = _LOADERS.get(loader) or _LOADERS.setdefault(loader, type(f"Bounded{loader.__name__}", (_Bounded, loader), {}))
    return yaml.load(text, Loader=bounded)  # noqa: S506 - callers pass SafeLoader subclasses
