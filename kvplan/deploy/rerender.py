"""What a re-render changed: the files of an earlier render into the same directory, against the new ones.

`kvplan render -o DIR` replaces an earlier render that kvplan made there (deploy/output.py proves it
did). Before that earlier render is cleared, its files are read; after the new one is written, each
file is compared with its predecessor. Every file kvplan renders names the spec's hash and kvplan's
version in its header, so a changed spec changes every header: the comparison reads the earlier
files with the earlier hash (and its short form) and version replaced by the new ones, and a file whose only difference
was its header counts as unchanged. Files that hold secrets (the RGW keys, the inventory with its
`ansible_become_password`) are named when they change, their content never shown.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path

SECRET_FILES = ("project/group_vars/all/secrets.yml", "inventory/hosts.yml")
"""Rendered files that may hold secrets: a re-render names them, never shows them."""


@dataclass
class Earlier:
    """An earlier render's files, read before it is cleared."""

    files: dict[str, bytes]
    spec_hash: str
    version: str


@dataclass
class Changes:
    """What the new render changed against the earlier one in the same directory."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)
    """path -> (before, after), the earlier text read with the new hash and version; secret files: notes."""

    def summary(self) -> str:
        if not (self.added or self.removed or self.changed):
            return "replaced the earlier render here: no file changed (beyond the spec hash in the headers)"
        parts = [f"{len(self.changed)} file(s) changed" + (f" ({', '.join(self.changed)})" if self.changed else "")]
        for what, paths in (("added", self.added), ("removed", self.removed)):
            if paths:
                parts.append(f"{len(paths)} {what} ({', '.join(paths)})")
        return "replaced the earlier render here: " + ", ".join(parts)

    def unified(self) -> list[str]:
        """Each changed file as unified-diff lines."""
        lines: list[str] = []
        for rel, (before, after) in self.changed.items():
            lines += difflib.unified_diff(before.splitlines(), after.splitlines(), f"{rel} (earlier render)",
                                          f"{rel} (this render)", lineterm="")
        return lines


def read(out: Path, tree: list[tuple[str, object]], marker: dict | None) -> Earlier | None:
    """The earlier render's files (not ansible-runner's artifacts/), from `output.claim`'s tree and its marker."""
    if not tree or not marker:
        return None
    files = {}
    for rel in marker.get("files", {}):
        try:
            files[rel] = (out / rel).read_bytes()
        except OSError:
            continue
    return Earlier(files, str(marker.get("spec_hash", "")), str(marker.get("kvplan", "")))


def compare(earlier: Earlier, written: dict[str, bytes], spec_hash: str, version: str) -> Changes:
    """The changes from `earlier` to the files just `written`."""
    changes = Changes(added=sorted(set(written) - set(earlier.files)), removed=sorted(set(earlier.files) - set(written)))
    for rel in sorted(set(written) & set(earlier.files)):
        before = _as_new(earlier.files[rel].decode("utf-8", "replace"), earlier, spec_hash, version)
        after = written[rel].decode("utf-8", "replace")
        if before == after:
            continue
        if rel in SECRET_FILES:
            note = "(this file may hold secrets: its content is not shown)\n"
            before, after = note, note.replace("(", "(changed; ", 1)
        changes.changed[rel] = (before, after)
    return changes


def _as_new(text: str, earlier: Earlier, spec_hash: str, version: str) -> str:
    """The earlier text as if it had been rendered with the new spec hash and kvplan version."""
    if earlier.spec_hash:
        # the full hash, then its 12-character short form (the dashboard's uid, the summaries)
        text = text.replace(earlier.spec_hash, spec_hash).replace(earlier.spec_hash[:12], spec_hash[:12])
    if earlier.version and earlier.version != version:
        text = text.replace(f"kvplan {earlier.version}", f"kvplan {version}").replace(
            json.dumps(earlier.version), json.dumps(version))
    return text
