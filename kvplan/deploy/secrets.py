"""Deployment secrets: the RGW user's S3 keys that LMCache signs its requests with.

They are generated once per spec name and kept in `<state dir>/secrets/<name>.yml`, so every
later render and deploy reuses the same keys. They reach Ansible only through files of mode
0600, tasks that handle them are `no_log`, and kvplan never prints them.

Where secrets live, kvplan trusts nothing it did not make itself:
- its folders (`secrets/`, `runs/`) are real directories of mode 0700, never symbolic links;
- a file holding secrets is created new (`O_CREAT | O_EXCL | O_NOFOLLOW`, 0600 from its first
  byte), so a link or a file planted at its path is never written through or overwritten;
- the keys file is reused only when it is a regular file (not a link) of the current user that
  nobody else can read, holding the two keys; a folder or FIFO there is refused without reading it. Anything else is refused with the path and a fix.
"""

from __future__ import annotations

import errno
import os
import secrets as _random
import stat
import string
from pathlib import Path

import pydantic
import yaml
from pydantic import Field

from ..errors import Problem, SpecError
from ..spec import bounds
from ..spec.base import SpecModel


class Secrets(SpecModel):
    ceph_rgw_access_key: str = Field(min_length=1)
    ceph_rgw_secret_key: str = Field(min_length=1)


def _refuse(field: str, path: Path, message: str, fix: str) -> SpecError:
    return SpecError([Problem(field, f"{path} {message}", str(path), fix=fix)])


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner can enter: made 0700 when missing, tightened to 0700
    when it is ours; a symbolic link, a non-directory or another user's directory is refused."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    fix = "remove it (kvplan makes this folder itself), or use another --state-dir"
    if stat.S_ISLNK(st.st_mode):
        raise _refuse("state_dir", path, "is a symbolic link; kvplan keeps secrets only in a directory of its own", fix)
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse("state_dir", path, "exists and is not a directory", fix)
    if st.st_uid != os.getuid():
        raise _refuse("state_dir", path, f"belongs to another user (uid {st.st_uid})", "use a --state-dir of your own")
    os.chmod(path, 0o700)
    return path


def create_private(path: Path, data: str | bytes, mode: int = 0o600) -> None:
    """Create a new file only its owner can use (0600, or 0700 for a script, from the first byte).
    Whatever already is at `path`, a file or a symbolic link (dangling or not), is an error: it is
    never followed or overwritten."""
    if mode & 0o077:
        raise ValueError(f"mode {mode:04o} is not owner-only")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(fd, mode)
        f.write(data.encode() if isinstance(data, str) else data)


def _load(path: Path) -> Secrets:
    """The keys in an existing file, if it is safe to trust; FileNotFoundError when there is none."""
    fix = "remove it (kvplan then generates new keys; deploy again so Ceph has them), or chmod 600 it if it is yours"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)     # a FIFO's open would wait for a writer
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise _refuse("secrets", path, "is a symbolic link; kvplan reads keys only from a file of its own",
                          "remove the link (kvplan then generates new keys), or put the keys file itself there") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):                  # a folder or FIFO: refused before it is read
        os.close(fd)
        raise _refuse("secrets", path, "is not a regular file (a folder, FIFO or device)",
                      "remove it (kvplan then generates new keys; deploy again so Ceph has them)")
    with os.fdopen(fd, "rb") as f:
        if st.st_uid != os.getuid():
            raise _refuse("secrets", path, f"belongs to another user (uid {st.st_uid})",
                          "remove it, or use a --state-dir of your own")
        if st.st_mode & 0o077:
            raise _refuse("secrets", path, f"can be read or changed by other users (mode {stat.S_IMODE(st.st_mode):04o})",
                          fix)
        text = f.read()
    try:
        return Secrets(**bounds.load(text))      # bounded: a tag that cannot build its value is a YAML error
    except (yaml.YAMLError, TypeError, pydantic.ValidationError, SpecError):
        raise _refuse("secrets", path, "does not hold the two keys kvplan writes (ceph_rgw_access_key, "
                      "ceph_rgw_secret_key)", "remove it (kvplan then generates new keys; deploy again so Ceph "
                      "has them)") from None


def _generate() -> Secrets:
    upper = string.ascii_uppercase + string.digits
    return Secrets(ceph_rgw_access_key="".join(_random.choice(upper) for _ in range(20)),
                   ceph_rgw_secret_key=_random.token_urlsafe(30))


def load_or_create(state_dir: Path, name: str) -> Secrets:
    """The spec's keys, generated on first use."""
    path = private_dir(Path(state_dir) / "secrets") / f"{name}.yml"
    try:
        return _load(path)
    except FileNotFoundError:
        fresh = _generate()
        create_private(path, yaml.safe_dump(fresh.model_dump(), sort_keys=False))
        return fresh
