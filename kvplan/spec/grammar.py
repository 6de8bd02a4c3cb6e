"""The narrow grammars of spec strings that reach a deployment: hosts, paths, devices, option keys.

A string that kvplan writes into the Ansible it renders ends up in command lines, config files
and `/etc/hosts`. Each such field accepts only what its meaning allows, so a value can never
carry a line break, a shell word or a template into the deployment (docs/deploy.md, "Security"):

- a host is a DNS name (RFC 1123 labels) or an IPv4/IPv6 address; an IPv6 address carries a scope id
  (`fe80::1%eth0`) only where one is needed, on a link-local address, and then the scope id is an
  interface name (Python's `ipaddress` accepts any text after the `%`: spaces, line breaks, quotes,
  `$()` and `{{ }}` included, so its answer alone is not the grammar);
- a path is absolute, normalised (no `.`/`..` components, no `//`) and printable, without
  whitespace or characters a shell or config file would read specially;
- a block device is such a path under `/dev/`;
- a Ceph option key is `[a-z0-9_]+`, and its value a single printable word-list without line
  breaks that cannot be read as a command-line flag;
- a model id is a Hugging Face repository id (`org/name`) or an absolute local directory.

The checks are plain functions so the deploy side (inventory values) applies the same rules.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
import re
from typing import Annotated

from pydantic import AfterValidator

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*\.?$")
_PATH_CHARS = re.compile(r"^[A-Za-z0-9._@+=:,%/-]+$")
_OPTION_KEY = re.compile(r"^[a-z0-9_]{1,128}$")
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+=,-]{0,127}$")
_PRINTABLE = re.compile(r"^[\x20-\x7e]*$")
_INTERFACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
"""A network interface name as Linux allows one (at most 15 characters), in the plain characters real names use."""

HOST_FORMS = ("a DNS name (letters, digits, '-', labels joined by '.') or an IPv4/IPv6 address "
              "(a scope id only on a link-local IPv6 address, and then an interface name: fe80::1%eth0)")
PATH_FORMS = ("an absolute path such as /var/lib/lmcache/nvme: no '.' or '..' components, no '//', "
              "only letters, digits and . _ @ + = : , % / -")


@lru_cache(maxsize=4096)
def host_problem(value: str) -> str | None:
    """Why `value` is not a host name or address, or None (remembered: a planner validates the same hosts in
    thousands of candidate specs)."""
    if "%" in value:
        return _scoped_problem(value)
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    if len(value) > 253 or not _HOSTNAME.fullmatch(value):
        return f"is not {HOST_FORMS}"
    return None


def _scoped_problem(value: str) -> str | None:
    """Why `address%scope` is not a link-local IPv6 address with an interface name, or None."""
    address, _, scope = value.partition("%")
    try:
        ip = ipaddress.IPv6Address(address)
    except ValueError:
        return f"is not {HOST_FORMS}"
    if not (ip.is_link_local or (ip.is_multicast and (ip.packed[1] & 0x0F) <= 2)):
        return ("carries a scope id ('%' and what follows), which only a link-local IPv6 address needs; "
                f"write the address without it ({address})")
    if not _INTERFACE.fullmatch(scope):
        return ("has a scope id that is not an interface name (at most 15 letters, digits, '_', '.' or '-', "
                "e.g. fe80::1%eth0)")
    return None


WILDCARDS = ("0.0.0.0", "::")
"""Bind addresses that mean every address: a client on the node reaches such a listener on loopback."""


def local_address(host: str) -> str:
    """Where a process on the same host reaches a server that listens on `host`: loopback for a wildcard."""
    return "127.0.0.1" if host in WILDCARDS else host


def host_port(host: str, port: int, url: bool = False) -> str:
    """`host:port` as a Prometheus target or (url=True) a URL's authority writes it: an IPv6 address in brackets
    (`[::1]:8000`), and in a URL its scope id's '%' escaped as '%25' (RFC 6874: `[fe80::1%25eth0]:8000`)."""
    if ":" not in host:
        return f"{host}:{port}"
    return f"[{host.replace('%', '%25') if url else host}]:{port}"


def path_problem(value: str) -> str | None:
    """Why `value` is not an absolute, normalised, plain path, or None."""
    if not value.startswith("/"):
        return "must be an absolute path (start with /)"
    if len(value) > 1024:
        return "is longer than 1024 characters"
    if not _PATH_CHARS.fullmatch(value):
        return "holds a character a path of kvplan's may not: whitespace, control characters, quotes, $, ` and the like"
    parts = value.split("/")[1:]
    if value != "/" and (any(p in ("", ".", "..") for p in parts[:-1]) or parts[-1] in (".", "..")):
        return "must be normalised: no '.' or '..' components and no '//'"
    return None


SYSTEM_DIRS = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt", "/opt",
    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/lib", "/var/log", "/var/tmp",
    "/var/cache", "/var/run", "/var/spool", "/var/mail", "/var/opt", "/var/local", "/usr/local"})
"""Directories of the operating system itself: never a tier's directory, whose mode kvplan may set."""

SYSTEM_TREES = ("/bin/", "/boot/", "/dev/", "/etc/", "/lib/", "/lib32/", "/lib64/", "/libx32/", "/proc/", "/run/",
                "/sbin/", "/sys/", "/usr/")
"""Trees that belong to the system, where no data directory lives."""


def data_dir_problem(value: str) -> str | None:
    """Why `value` is not a directory kvplan may dedicate to data (a tier's chunks), or None."""
    problem = path_problem(value)
    if problem:
        return problem
    clean = value.rstrip("/") or "/"
    if clean in SYSTEM_DIRS or (clean + "/").startswith(SYSTEM_TREES):
        return "is a system directory (or lies in one)"
    return None


def device_problem(value: str) -> str | None:
    """Why `value` is not a block device path under /dev/, or None."""
    problem = path_problem(value)
    if problem:
        return problem
    if not value.startswith("/dev/") or value.rstrip("/") == "/dev":
        return "must be a block device under /dev/"
    return None


def _check(problem, fix: str) -> AfterValidator:
    """A validator from a `*_problem` function; its error carries the fix (kvplan/spec/load.py reads '; fix: ')."""
    def validate(value: str) -> str:
        why = problem(value)
        if why:
            raise ValueError(f"{why}; fix: {fix}")
        return value
    return AfterValidator(validate)


def _option_key(value: str) -> str:
    if not _OPTION_KEY.fullmatch(value):
        raise ValueError("a Ceph option name is lowercase letters, digits and '_'; "
                         "fix: use the name `ceph config help <option>` knows, e.g. osd_memory_target")
    return value


def option_value_problem(value: object) -> str | None:
    """Why a Ceph option value cannot be passed to `ceph config set` as one argument, or None."""
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return None
    text = str(value)
    if not text or not _PRINTABLE.fullmatch(text):
        return "must be non-empty printable text without line breaks or control characters"
    if text.startswith("-"):
        try:
            float(text)
        except ValueError:
            return "may not start with '-' (ceph would read it as a flag)"
    return None


def _option_value(value: str | int | float | bool) -> str | int | float | bool:
    why = option_value_problem(value)
    if why:
        raise ValueError(f"{why}; fix: write the value as Ceph prints it back, e.g. 8589934592 or wpq")
    return value


def _model_id(value: str) -> str:
    if value.startswith("/"):
        why = path_problem(value)
        if why:
            raise ValueError(f"a local model directory {why}; fix: e.g. /var/lib/kvplan/models/tiny-llama")
        return value
    if not _HF_ID.fullmatch(value) or ".." in value:
        raise ValueError("must be a Hugging Face id (org/name: letters, digits, '.', '_', '-') "
                         "or an absolute local directory; fix: e.g. meta-llama/Llama-3.1-8B or /var/lib/models/llama")
    return value


def _word(value: str) -> str:
    if not _WORD.fullmatch(value):
        raise ValueError("must be one word of letters, digits and . _ : / @ + = , - (starting with a letter or digit); "
                         "fix: e.g. default")
    return value


HostName = Annotated[str, _check(host_problem, "write a host name such as ceph-1.example.com or an address such as 10.0.0.5")]
"""A DNS name or an IP address (`0.0.0.0` and `::` included, for listening on every address)."""

AbsPath = Annotated[str, _check(path_problem, "write an absolute path such as /mnt/cephfs/lmcache")]
"""An absolute, normalised path of plain characters."""

DataDir = Annotated[str, _check(data_dir_problem, "give the tier a directory of its own, e.g. /var/lib/lmcache/nvme")]
"""A directory dedicated to kvplan's data: absolute, normalised, not a system directory."""

DevicePath = Annotated[str, _check(device_problem, "write the device's path, e.g. /dev/nvme1n1 or /dev/disk/by-id/...")]
"""A block device path under /dev/."""

OptionKey = Annotated[str, AfterValidator(_option_key)]
"""A Ceph option name."""

OptionValue = Annotated[str | int | float | bool, AfterValidator(_option_value)]
"""A Ceph option value, passed to `ceph config set` as one argument."""

ModelId = Annotated[str, AfterValidator(_model_id)]
"""A Hugging Face repository id or an absolute local directory."""

Word = Annotated[str, AfterValidator(_word)]
"""One plain word: a name that reaches a command line (a served model name, an S3 region)."""
