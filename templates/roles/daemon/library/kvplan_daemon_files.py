#!/usr/bin/python
"""Ansible module: everything a daemon-role service runs from, made so in one step, and what runs now.

A service of the daemon role needs its directories, its environment files, (without systemd) the
daemonctl helper and its log file; and to decide whether to start or restart it, the role reads the
stamp of what last started it and (without systemd) asks daemonctl whether it runs. As separate
file, template, copy, stat and command tasks that was about fifteen module runs per service, each a
new Python process on the target importing Ansible's module code from source (half a second on a
small host), so a deploy that changed nothing spent most of its time here. This module does the same
in one run, with the same modes and the same change reporting.

Python standard library only; under check mode it writes nothing and says what it would change. Under
diff mode (`--diff`, which `kvplan deploy --diff` asks for) it also returns each changed file's content before
and after, as Ansible's file modules do, except the secret environment file's: that one is named, its content
never shown. The command file holds the service's arguments for reading (one option and its value per line),
so that a changed argument shows as a changed line in both the pid-file and the systemd mode.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: kvplan_daemon_files
short_description: The files a service of kvplan's daemon role runs from, and whether it runs what it should
description:
  - Creates each of C(directories) (mode 0755) and writes C(env) to C(env_file) (mode 0644), C(secret_env)
    to C(secret_env_file) (mode 0600) and, with C(command_file), C(command) there (mode 0644, one option and its
    value per line, for reading: the service runs the argument list itself), each only if its content or mode differs.
  - Under diff mode, returns the content before and after of each file it changes or would change; the secret
    environment file's content (and the helper's) is replaced by a note.
  - With C(helper_file), installs C(helper) there (mode 0755) and makes sure C(log_file) exists (mode 0640,
    owned by C(log_owner) if given), keeping an existing log's content and times.
  - Compares the stamp file's content with C(stamp) (C(stamp_current)) and, with C(pidfile), asks the helper
    whether the service runs (C(running)); a helper that is not installed yet, under check mode, means not running.
options:
  name: {description: Service name (for messages), type: str, required: true}
  directories: {description: Directories to create, mode 0755, type: list, elements: path, default: []}
  env_file: {description: The environment file, type: path, required: true}
  env: {description: Its content, type: str, required: true}
  secret_env_file: {description: The secret environment file, type: path, required: true}
  secret_env: {description: Its content (no_log), type: str, required: true}
  command_file: {description: Where the service's arguments are written for reading, type: path}
  command: {description: The service's arguments, type: list, elements: str, default: []}
  stamp_file: {description: The stamp of what last started the service, type: path, required: true}
  stamp: {description: The stamp of what should run, type: str, required: true}
  helper_file: {description: Where the daemonctl helper goes (pid-file mode), type: path}
  helper: {description: The helper's content, type: str}
  log_file: {description: The service's log file (pid-file mode), type: path}
  log_owner: {description: Owner of the log file; empty keeps the connection's user, type: str, default: ""}
  pidfile: {description: The service's pid file, for the helper's status (pid-file mode), type: path}
author: kvplan
"""

RETURN = r"""
changed_paths: {description: The paths created or changed (or that would be, under check mode), type: list, returned: always}
diff: {description: Under diff mode, before and after of each changed file (a note for the secret one), type: list, returned: when diff mode}
stamp_current: {description: The stamp file holds C(stamp), type: bool, returned: always}
running: {description: The helper says the service runs (always false without C(pidfile)), type: bool, returned: always}
"""

import os
import pwd
import shlex
import stat
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule


class Files:
    """The module's changes, made (or, under check mode, only counted) one path at a time."""

    def __init__(self, module: AnsibleModule):
        self.module = module
        self.check = module.check_mode
        self.changed: list[str] = []
        self.diffs: list[dict] = []

    def directory(self, path: str) -> None:
        if os.path.isdir(path):
            self.mode(path, 0o755)
            return
        self.note(path)
        if not self.check:
            os.makedirs(path, mode=0o755, exist_ok=True)
            os.chmod(path, 0o755)

    def content(self, path: str, text: str, mode: int, hidden: str = "") -> None:
        """Write `text` to `path` with `mode` if either differs; `hidden`: under diff mode, show this note
        instead of the content (the secret file's, and the helper script's, which is kvplan's, not a setting)."""
        data = text.encode()
        try:
            with open(path, "rb") as f:
                before = f.read()
        except FileNotFoundError:
            before = None
        if before == data:
            self.mode(path, mode)
            return
        self.note(path)
        if self.module._diff:
            if hidden:
                note = f"({hidden}: its content is not shown)\n"
                shown = ("" if before is None else note, note)
            else:
                shown = ("" if before is None else before.decode("utf-8", "replace"), text)
            self.diffs.append({"before_header": path if before is not None else "/dev/null", "after_header": path,
                               "before": shown[0], "after": shown[1]})
        if self.check:
            return
        directory = os.path.dirname(path) or "."
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.")
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def log(self, path: str, owner: str) -> None:
        try:
            uid = pwd.getpwnam(owner).pw_uid if owner else None
        except KeyError:
            self.module.fail_json(msg=f"{self.module.params['name']}: the log file's owner {owner!r} is no user of this host")
        if not os.path.exists(path):
            self.note(path)
            if not self.check:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640))
                os.chmod(path, 0o640)
                if uid is not None:
                    os.chown(path, uid, -1)
            return
        self.mode(path, 0o640)
        if uid is not None and os.stat(path).st_uid != uid:
            self.note(path)
            if not self.check:
                os.chown(path, uid, -1)

    def mode(self, path: str, mode: int) -> None:
        if stat.S_IMODE(os.stat(path).st_mode) != mode:
            self.note(path)
            if not self.check:
                os.chmod(path, mode)

    def note(self, path: str) -> None:
        """`path` was (or, under check mode, would be) created or changed."""
        if path not in self.changed:
            self.changed.append(path)


def command_text(name: str, argv: list[str]) -> str:
    """The arguments for a reader: the program on the first line, then each option with its value (if the next
    argument is not an option itself) on a line of its own, shell-quoted."""
    lines = [f"# What kvplan's daemon role runs as {name}, for reading (the service gets the argument list itself)."]
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            lines.append(shlex.join([arg, argv[i + 1]]))
            i += 2
        else:
            lines.append(shlex.quote(arg))
            i += 1
    return "\n".join(lines) + "\n"


def stamp_current(path: str, stamp: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read() == stamp
    except (FileNotFoundError, UnicodeDecodeError):
        return False


def running(module: AnsibleModule, helper: str, pidfile: str) -> bool:
    if module.check_mode and not os.path.isfile(helper):
        return False                                    # nothing was installed, so nothing of it runs
    done = subprocess.run([helper, "status", pidfile], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        module.fail_json(msg=f"{module.params['name']}: `{helper} status {pidfile}` failed (exit code "
                             f"{done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip() == "running"


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            directories=dict(type="list", elements="path", default=[]),
            env_file=dict(type="path", required=True),
            env=dict(type="str", required=True),
            secret_env_file=dict(type="path", required=True),
            secret_env=dict(type="str", required=True, no_log=True),
            command_file=dict(type="path"),
            command=dict(type="list", elements="str", default=[]),
            stamp_file=dict(type="path", required=True),
            stamp=dict(type="str", required=True),
            helper_file=dict(type="path"),
            helper=dict(type="str"),
            log_file=dict(type="path"),
            log_owner=dict(type="str", default=""),
            pidfile=dict(type="path"),
        ),
        required_together=[("helper_file", "helper", "log_file", "pidfile")],
        supports_check_mode=True,
    )
    p = module.params
    files = Files(module)
    for directory in p["directories"]:
        files.directory(directory)
    files.content(p["env_file"], p["env"], 0o644)
    files.content(p["secret_env_file"], p["secret_env"], 0o600, hidden="the secret environment file")
    if p["command_file"]:
        files.content(p["command_file"], command_text(p["name"], p["command"]), 0o644)
    if p["helper_file"]:
        files.content(p["helper_file"], p["helper"], 0o755, hidden="kvplan's daemonctl helper")
        files.log(p["log_file"], p["log_owner"])
    extra = {"diff": files.diffs} if module._diff else {}
    module.exit_json(changed=bool(files.changed), changed_paths=files.changed, **extra,
                     stamp_current=stamp_current(p["stamp_file"], p["stamp"]),
                     running=running(module, p["helper_file"], p["pidfile"]) if p["pidfile"] else False)


if __name__ == "__main__":
    main()
