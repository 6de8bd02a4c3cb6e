"""The output directory of a render: which directory kvplan may write into, and how it writes.

A render's directory is new, empty, or an earlier render that kvplan provably made, which is
replaced. Proof is the marker, `.kvplan-render.json` ("kind": "kvplan-render" and the sha256 of
every file that render wrote): an earlier render is replaced only when it holds nothing but those
files, unchanged, and ansible-runner's artifacts/. Then exactly those files are removed, and the
folders they leave empty. A directory without a marker, with a file the marker does not list or
a file changed since, with a symbolic link anywhere, or reached through one (-o itself or any folder
above it a link), is refused before anything is written or removed. A new or empty directory may be
reached through a linked folder (a symlinked home): nothing there is removed, and every file is created
new without following links. Whatever stands where a file is expected (a FIFO or a folder as the
marker) is looked at without opening it for reading, so it can neither block nor crash a render. The marker guards against mistakes, not against forgery: anyone
who can write a marker can delete the directory's files by hand.

Everything written is owner-only, since the inventory copy and secrets.yml hold secrets (an
`ansible_become_password`, the RGW keys): each file is created new with mode 0600 (0700 for the
roles' scripts) in folders of mode 0700 that the render makes, and nothing is written through a
symbolic link. A directory the render did not make (an existing empty -o) keeps its mode.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from ..errors import Problem, SpecError
from .secrets import create_private

MARKER = ".kvplan-render.json"
"""The proof that kvplan made a directory: its kind and every file it wrote, with their sha256."""
MARKER_KIND = "kvplan-render"
KNOWN_OUTPUTS = ("artifacts",)
"""Top-level folders that others write into a render and that go with it when it is replaced:
ansible-runner's artifacts/ (the logs of `kvplan deploy`, which runs in the rendered directory)."""


def _refused(out: Path, message: str, fix: str = "choose a new directory with -o") -> SpecError:
    return SpecError([Problem("output", message, str(out), fix=fix)])


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_regular(path: Path) -> bytes | None:
    """The bytes of a regular file; None when it is missing, a symbolic link or not a file (a FIFO is opened
    without waiting for a writer, and neither it nor a folder is read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _inside(rel: object) -> bool:
    """Whether a marker's entry names a path inside the render: relative, without '.' or '..'."""
    return (isinstance(rel, str) and not rel.startswith("/") and "\\" not in rel
            and all(part not in ("", ".", "..") for part in rel.split("/")))


def marker(out: Path) -> dict | None:
    """The marker of the render in `out` (its kind, what it was rendered from, and `files`: relative path ->
    sha256 of every file it wrote); None without a valid one."""
    raw = _read_regular(out / MARKER)
    try:
        found = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    files = found.get("files") if isinstance(found, dict) and found.get("kind") == MARKER_KIND else None
    if not isinstance(files, dict):
        return None
    if not all(_inside(rel) and isinstance(digest, str) and len(digest) == 64 for rel, digest in files.items()):
        return None
    return found


def _marker_files(out: Path) -> dict[str, str] | None:
    """Relative path -> sha256 of every file the render in `out` wrote; None without a valid marker."""
    found = marker(out)
    return found["files"] if found is not None else None


def _tree(root: Path) -> list[tuple[str, os.stat_result]]:
    """Everything under `root` as (relative path, lstat), sorted so that folders come before
    their contents; symbolic links are listed, never followed."""
    found, pending = [], [""]
    while pending:
        rel = pending.pop()
        with os.scandir(root / rel) as entries:
            for entry in entries:
                sub = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                found.append((sub, st))
                if stat.S_ISDIR(st.st_mode):
                    pending.append(sub)
    return sorted(found, key=lambda item: item[0])


def _not_kvplans(out: Path, rel: str, st: os.stat_result, files: dict[str, str], folders: set[str]) -> str | None:
    """Why `rel`, in an earlier render, is not kvplan's to remove; None when it is."""
    if stat.S_ISLNK(st.st_mode):
        return f"{rel} is a symbolic link"
    if rel.split("/")[0] in KNOWN_OUTPUTS:
        return None if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) else f"{rel} is not a file"
    if stat.S_ISDIR(st.st_mode):
        return None if rel in folders else f"{rel}/ was not made by kvplan"
    if rel == MARKER:
        return None
    if not stat.S_ISREG(st.st_mode) or rel not in files:
        return f"{rel} was not written by kvplan"
    if _sha256(_read_regular(out / rel) or b"") != files[rel]:
        return f"{rel} was changed since kvplan wrote it"
    return None


def _linked_folder(out: Path) -> Path | None:
    """The first folder above `out` (as given, made absolute) that is a symbolic link; None when none is."""
    for folder in reversed(Path(os.path.abspath(out)).parents):
        if folder.is_symlink():
            return folder
    return None


def claim(out: Path) -> list[tuple[str, os.stat_result]]:
    """What has to go before rendering into `out`: nothing for a new or empty directory, every
    entry of an earlier kvplan render. Anything else is refused, before anything is touched."""
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(st.st_mode):
        raise _refused(out, "is a symbolic link; kvplan never renders into a directory through one",
                       "give -o the directory itself, or choose a new directory with -o")
    if not stat.S_ISDIR(st.st_mode):
        raise _refused(out, "exists and is not a directory")
    tree = _tree(out)
    if not tree:
        return []
    link = _linked_folder(out)
    if link is not None:
        raise _refused(out, f"is reached through a symbolic link ({link}); kvplan never replaces a directory through one",
                       "give -o the directory's real path, or choose a new directory with -o")
    files = _marker_files(out)
    if files is None:
        raise _refused(out, f"exists, is not empty and is not a kvplan render (it has no valid {MARKER}); "
                       "kvplan will not overwrite it",
                       "choose a new directory with -o (kvplan only replaces a directory it rendered itself)")
    folders = {rel.rsplit("/", n)[0] for rel in files for n in range(1, rel.count("/") + 1)}
    strangers = [why for rel, entry in tree if (why := _not_kvplans(out, rel, entry, files, folders))]
    if strangers:
        shown = ", ".join(strangers[:5]) + (f" and {len(strangers) - 5} more" if len(strangers) > 5 else "")
        raise _refused(out, f"is an earlier kvplan render, but {shown}; kvplan will not overwrite it",
                       "move those out of it, or choose a new directory with -o")
    return tree


def clear(out: Path, tree: list[tuple[str, os.stat_result]]) -> None:
    """Remove what `claim` found, one entry at a time: the files, then the folders they leave empty."""
    for rel, st in reversed(tree):
        (os.rmdir if stat.S_ISDIR(st.st_mode) else os.unlink)(out / rel)


class Output:
    """The files of one render under `root`: each created new and owner-only, in folders of mode
    0700, and remembered with its sha256 for the marker. `discard` takes back a failed render."""

    def __init__(self, root: Path):
        self.root = root
        self.files: dict[str, str] = {}
        self.folders: list[Path] = []
        """The folders this render made, in the order made (the root first, if it was new)."""
        root.parent.mkdir(parents=True, exist_ok=True)
        self._folder(root)

    def _folder(self, path: Path) -> None:
        """Make `path` a folder of mode 0700; one that is there already (an empty -o) is left as it is."""
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            return
        self.folders.append(path)
        os.chmod(path, 0o700)

    def write(self, rel: str, data: str | bytes, executable: bool = False) -> None:
        path = self.root
        for part in rel.split("/")[:-1]:
            path = path / part
            self._folder(path)
        data = data.encode() if isinstance(data, str) else data
        create_private(self.root / rel, data, 0o700 if executable else 0o600)
        self.files[rel] = _sha256(data)

    def copy(self, source: Path, rel: str) -> None:
        """Copy a folder (the roles); a script that is executable there stays executable, for its owner."""
        for path in sorted(source.rglob("*")):
            if path.is_file():
                target = f"{rel}/{path.relative_to(source).as_posix()}"
                self.write(target, path.read_bytes(), executable=bool(path.stat().st_mode & stat.S_IXUSR))

    def seal(self, **about) -> None:
        """Write the marker, last: only a complete render is one kvplan may replace."""
        marker = {"kind": MARKER_KIND, **about, "files": dict(sorted(self.files.items()))}
        create_private(self.root / MARKER, json.dumps(marker, indent=2) + "\n")

    def discard(self) -> None:
        """Remove what this render wrote, and the folders it made (the directory was new, empty or
        cleared, so nothing else is there); best effort, the error that stopped the render matters."""
        for rel in [*self.files, MARKER]:
            (self.root / rel).unlink(missing_ok=True)
        for folder in reversed(self.folders):
            try:
                os.rmdir(folder)
            except OSError:
                return
