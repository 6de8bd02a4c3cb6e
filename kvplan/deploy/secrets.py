"""Deployment secrets: the RGW user's S3 keys that LMCache signs its requests with.

They are generated once per spec name and kept in `<state dir>/secrets/<name>.yml` (mode 0600),
so every later render and deploy reuses the same keys. They reach Ansible only through files of
mode 0600, tasks that handle them are `no_log`, and kvplan never prints them.
"""

from __future__ import annotations

import os
import secrets as _random
import string
from pathlib import Path

import yaml

from ..spec.base import SpecModel


class Secrets(SpecModel):
    ceph_rgw_access_key: str
    ceph_rgw_secret_key: str


def write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner only (created 0600, never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def load_or_create(state_dir: Path, name: str) -> Secrets:
    """The spec's keys, generated on first use."""
    path = state_dir / "secrets" / f"{name}.yml"
    if path.is_file():
        return Secrets(**yaml.safe_load(path.read_text()))
    upper = string.ascii_uppercase + string.digits
    fresh = Secrets(ceph_rgw_access_key="".join(_random.choice(upper) for _ in range(20)),
                    ceph_rgw_secret_key=_random.token_urlsafe(30))
    write_private(path, yaml.safe_dump(fresh.model_dump(), sort_keys=False))
    return fresh
