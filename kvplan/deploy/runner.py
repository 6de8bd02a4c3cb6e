"""Apply a rendered private_data_dir with ansible-runner and summarise what happened.

Every run uses `suppress_env_files=True` (otherwise ansible-runner writes --check and extravars
into env/ and a later real apply silently inherits them) and the `ansible-playbook` installed next
to kvplan's Python. Events become a per-host tally (ok, changed, failed, unreachable) and, for a
failure, the task, host and message; the full log stays in the run directory's artifacts/. Under
Ansible's diff mode the changed files' content before and after is kept too (`FileDiff`), as each
module reports it: tasks with `no_log` report none, and kvplan's daemon module names the secret file
without its content.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import Problem, SpecError


@dataclass
class Failure:
    host: str
    task: str
    message: str
    unreachable: bool = False


@dataclass
class FileDiff:
    """One file a task changed (or would change, under check mode), as Ansible's diff mode reports it."""

    host: str
    task: str
    path: str
    before: str
    after: str

    def unified(self) -> list[str]:
        """The change as unified-diff lines, headed by the host and the file."""
        import difflib

        return list(difflib.unified_diff(self.before.splitlines(), self.after.splitlines(),
                                         f"{self.host}:{self.path} (now)", f"{self.host}:{self.path} (after the deploy)",
                                         lineterm=""))


def file_diffs(host: str, task: str, reported) -> list[FileDiff]:
    """The FileDiffs in a result's `diff` (one mapping or a list of them; `prepared` is a module's own text)."""
    out = []
    for d in reported if isinstance(reported, list) else [reported]:
        if not isinstance(d, dict):
            continue
        if "prepared" in d:
            out.append(FileDiff(host, task, task, "", str(d["prepared"])))
        elif "before" in d or "after" in d:
            before, after = d.get("before", ""), d.get("after", "")
            if not isinstance(before, str) or not isinstance(after, str):    # e.g. a file's state, not its content
                before, after = f"{before}\n", f"{after}\n"
            path = d.get("after_header") or d.get("before_header") or task
            out.append(FileDiff(host, task, str(path), before, after))
    return out


@dataclass
class RunResult:
    """What one ansible-playbook run did."""

    playbook: str
    status: str
    rc: int
    artifacts: Path
    hosts: dict[str, dict[str, int]] = field(default_factory=dict)
    """host -> {ok, changed, failed, unreachable, skipped}."""
    changed_tasks: list[tuple[str, str]] = field(default_factory=list)
    """(host, task) of every task that changed something (or would, in check mode)."""
    failures: list[Failure] = field(default_factory=list)
    results: dict[str, dict] = field(default_factory=dict)
    """task name -> its result, for tasks named `State: ...` (read by cephdiff)."""
    diffs: list[FileDiff] = field(default_factory=list)
    """Under diff mode: every file a task changed or would change, before and after."""

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0


def _message(res: dict) -> str:
    if "censored" in res:
        return "output hidden (no_log: the task handles secrets); rerun with ANSIBLE_DEBUG to see it"
    msg = res.get("msg") or ""
    stderr = (res.get("stderr") or "").strip()
    if stderr:
        msg = f"{msg}: {stderr.splitlines()[-1]}" if msg else stderr.splitlines()[-1]
    return msg or str({k: v for k, v in res.items() if k in ("rc", "stdout")})[:300]


DEPLOY_TOOLS = ("run ./install.sh deploy in the kvplan checkout (it adds ansible-core and ansible-runner to kvplan's "
                f"venv), or {Path(sys.executable).parent / 'pip'} install 'ansible-core>=2.19' 'ansible-runner>=2.4'")
"""The fix when kvplan's Python lacks the deploy tools."""


def ansible_playbook() -> str:
    """The ansible-playbook beside this Python (kvplan[deploy]), else the one on PATH."""
    here = Path(sys.executable).parent / "ansible-playbook"
    found = str(here) if here.exists() else shutil.which("ansible-playbook")
    if not found:
        raise SpecError([Problem("deploy", "ansible-playbook is not installed", None, fix=DEPLOY_TOOLS)])
    return found


def run(root: Path, playbook: str = "site.yml", tags: list[str] | None = None, skip_tags: list[str] | None = None,
        check: bool = False, on_event: Callable[[str, str], None] | None = None, ident: str = "apply",
        diff: bool = False) -> RunResult:
    """Run one playbook of the rendered directory; `on_event(host, task)` is told of each task start; `check`:
    Ansible's check mode (changes nothing); `diff`: its diff mode (RunResult.diffs)."""
    try:
        import ansible_runner
    except ImportError:
        raise SpecError([Problem("deploy", "ansible-runner is not installed", None, fix=DEPLOY_TOOLS)]) from None
    binary = ansible_playbook()
    result = RunResult(playbook=playbook, status="unstarted", rc=-1, artifacts=root / "artifacts" / ident)

    def handle(event: dict) -> bool:
        kind, data = event.get("event", ""), event.get("event_data", {})
        host, task = data.get("host", ""), data.get("task", "")
        if kind == "playbook_on_task_start" and on_event:
            on_event(data.get("play", ""), task)
        if kind == "playbook_on_stats":
            # Authoritative per-host counts (no_log results hide `changed` from the task events).
            for key, name in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"), ("dark", "unreachable"),
                              ("skipped", "skipped")):
                for h, n in (data.get(key) or {}).items():
                    result.hosts.setdefault(h, {})[name] = n
        if kind.startswith("runner_on_") and host:
            res = data.get("res", {}) or {}
            if kind == "runner_on_ok":
                if res.get("changed"):
                    result.changed_tasks.append((host, task))
                    result.diffs.extend(file_diffs(host, task, res.get("diff") or []))
                if task.startswith("State: "):
                    result.results[task] = res
            elif kind == "runner_on_failed" and not data.get("ignore_errors"):
                result.failures.append(Failure(host, task, _message(res)))
            elif kind == "runner_on_unreachable":
                result.failures.append(Failure(host, task, _message(res), unreachable=True))
            elif kind == "runner_on_skipped":
                if task.startswith("State: "):
                    result.results[task] = {"skipped": True}
        return True

    env = {"ANSIBLE_CONFIG": str(root / "project" / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0", "PATH": f"{Path(binary).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmdline = " ".join(flag for flag, on in (("--check", check), ("--diff", diff)) if on) or None
    # ansible-runner starts whichever ansible-playbook its own PATH finds first.
    os.environ["PATH"] = env["PATH"]
    r = ansible_runner.run(private_data_dir=str(root), playbook=playbook, ident=ident, tags=",".join(tags or []) or None,
                           skip_tags=",".join(skip_tags or []) or None, cmdline=cmdline, envvars=env,
                           suppress_env_files=True, quiet=True, event_handler=handle)
    result.status, result.rc = r.status, r.rc
    if not result.ok and not result.failures:
        stdout = (result.artifacts / "stdout")
        tail = stdout.read_text().strip().splitlines()[-3:] if stdout.is_file() else []
        result.failures.append(Failure("-", "ansible-playbook", " / ".join(tail) or f"exit code {r.rc}"))
    return result
