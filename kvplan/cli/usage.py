"""How kvplan's commands present themselves, as vLLM, Helm, kubectl and Ansible users expect.

- `-h` and `--help` both print help; `-V` and `--version` the version (cli.py);
- usage lines name what goes there in capitals: `kvplan simulate [OPTIONS] SPEC`,
  `--seed N`, `--out FILE`, `--state-dir DIR`, `--format [table|md|json]`; never the Python
  type (`<str>`, `<list[str]>`, `{spec}`);
- the command list shows each command's first clause whole, never cut with "...".

`Conventional` is the Typer group class that applies this to every command and subcommand when
Typer builds the click commands (so both the installed `kvplan` and test runners get it).
"""

from __future__ import annotations

import re
import typing

from typer.core import TyperArgument, TyperGroup

FILES = {"out", "out_file", "csv_file", "profile", "inventory", "trace", "result", "spec", "lmcache_log"}
"""Option names whose value is a file (their metavar is FILE)."""


def metavar(param) -> str | None:
    """The metavar to show for a Typer parameter; None for a flag, which takes no value."""
    if param.param_type_name == "argument":
        return param.name.upper()
    if getattr(param, "is_flag", False):
        return None
    kind = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    kind = next(iter(typing.get_args(kind)), kind) if typing.get_origin(kind) in (list, typing.List) else kind
    if kind is int:
        return "N"
    if kind is float:
        return "NUMBER"
    if param.name.endswith("dir"):
        return "DIR"
    return "FILE" if param.name in FILES else "TEXT"


def summary(help_text: str | None) -> str:
    """A command's summary for the command list: its help's first sentence, whole."""
    first = (help_text or "").strip().split("\n\n")[0].replace("\n", " ")
    return re.split(r"(?<=[a-z0-9)])\. ", first + " ", maxsplit=1)[0].rstrip(". ")


class PlainArgument(TyperArgument):
    """A positional argument shown as `SPEC` (`[SPEC]` when optional), with no Python type beside it."""

    def _usage_display_name(self) -> str:
        name = self.metavar or self.name.upper()
        return (name if self.required else f"[{name}]") + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx) -> None:
        return None


def conventional(command) -> None:
    """Apply the conventions above to `command` and, for a group, to every command in it."""
    if command.help and not command.short_help:
        command.short_help = summary(command.help)
    for param in command.params:
        if param.metavar is None:
            param.metavar = metavar(param)
        if type(param) is TyperArgument:      # Typer built it; only how it is shown changes
            param.__class__ = PlainArgument
    for sub in getattr(command, "commands", {}).values():
        conventional(sub)


class Conventional(TyperGroup):
    """A Typer group whose commands follow the conventions in the module docstring."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        conventional(self)
