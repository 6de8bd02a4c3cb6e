"""YAML for Ansible's variable files, in which every string is data and never a template.

Ansible templates every string it reads from group_vars and host_vars when a task uses it, so a
spec value such as `{{ lookup('pipe', 'id') }}` would run on the controller. kvplan therefore
writes each string value it renders for Ansible with Ansible's `!unsafe` tag: the tasks receive
the exact characters, and `{{`, `{%` and `{#` inside them stay text. Mapping keys are kvplan's
own variable names and option keys (validated), written plainly. Numbers, booleans and nulls
carry no template and are written as they are, and so is a string whose text reads as one
('false', '8'): Ansible would give an `!unsafe` scalar that type, and such text holds no template.

The output is ordinary YAML for any other reader: `yaml.safe_load` needs the `!unsafe`
constructor, which `load` below provides (tests and `kvplan deploy --check` read the files back).
"""

from __future__ import annotations

from typing import Any

import yaml

UNSAFE_TAG = "!unsafe"
_STR = "tag:yaml.org,2002:str"


WIDTH = 100
"""PyYAML folds longer quoted strings at their spaces (losslessly), so that a line, its indentation and
one long word included, stays within yamllint's 160 columns."""


class _Dumper(yaml.SafeDumper):
    """Indents list items under their key (as yamllint, and so ansible-lint, expects) and tags strings."""

    def increase_indent(self, flow: bool = False, indentless: bool = False):
        return super().increase_indent(flow, False)

    def process_tag(self):
        """A long string without spaces (a JSON argument) goes on its own line after its tag: yamllint
        allows an unbreakable word of any length there, but not after `- !unsafe `."""
        super().process_tag()
        event = self.event
        if (isinstance(event, yaml.ScalarEvent) and event.tag == UNSAFE_TAG and " " not in event.value
                and len(event.value) > WIDTH // 2):
            indent = self.indent
            self.indent = (indent or 0) + self.best_indent
            self.write_indent()
            self.indent = indent

    def represent_mapping(self, tag, mapping, flow_style=None):
        node = super().represent_mapping(tag, mapping, flow_style)
        for key_node, _ in node.value:
            if key_node.tag == UNSAFE_TAG:
                key_node.tag, key_node.style = _STR, None
        return node


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else "'"
    if dumper.resolve(yaml.ScalarNode, value, (True, False)) != _STR:
        # ansible-core 2.19 gives an !unsafe scalar the type its text resolves to ('false' -> False,
        # '8' -> 8), so text that reads as a number, boolean, null or date is written quoted and
        # untagged: it cannot hold a template ({{ }}, {% %}, {# #} or a #jinja2: header) anyway.
        return dumper.represent_scalar(_STR, value, style="'")
    return dumper.represent_scalar(UNSAFE_TAG, value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump(value: Any) -> str:
    """`value` as YAML whose every string value is tagged `!unsafe` (no trailing newline)."""
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=WIDTH).rstrip("\n")


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads `!unsafe` strings back as plain strings."""


_Loader.add_constructor(UNSAFE_TAG, lambda loader, node: loader.construct_scalar(node))


def load(text: str) -> Any:
    """Read a file written by `dump` (or any YAML that uses `!unsafe` on scalars)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
