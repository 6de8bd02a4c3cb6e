"""What `kvplan render` and `kvplan deploy` may touch on disk, written as the attacks they resist.

- An output directory is replaced only when kvplan provably rendered it: its `.kvplan-render.json`
  marker lists every file there, unchanged (ansible-runner's artifacts/ aside). A directory that
  merely holds a `kvplan.json` (a simulation result), has a file of the user's, a symbolic link, or
  is reached through one, or a regular file given as -o, is refused and left exactly as it was.
- Everything that can hold a secret (the inventory copy, secrets.yml, the kept keys) is owner-only,
  in owner-only folders.
- The kept keys are trusted only from a regular 0600 file of the user's, and written only into a
  new file, never through a symbolic link; a refused render generates no keys at all.
- A directory kvplan did not make keeps its mode; a FIFO or a folder where kvplan expects a file (the
  marker, the keys) is refused at once, neither waited on nor crashed over.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from conftest import REPO, example_data, spec, with_changes
from kvplan.cli.deploy import _run_dir
from kvplan.deploy import inventory as inventory_mod
from kvplan.deploy import output as output_mod
from kvplan.deploy.output import MARKER
from kvplan.deploy.render import render
from kvplan.deploy.secrets import Secrets, load_or_create
from kvplan.errors import SpecError
from kvplan.resolve import resolve

KVPLAN = str(Path(sys.executable).parent / "kvplan")
SPEC = REPO / "examples" / "local.yaml"
INVENTORY = REPO / "inventories" / "local"
LOCAL = inventory_mod.load(INVENTORY)
KEYS = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")


def kvplan(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([KVPLAN, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def snapshot(root: Path) -> dict[str, object]:
    """Every path under `root` with what it is: a link's target, a file's bytes and mode, or a folder."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_file():
            found[rel] = ("file", path.read_bytes(), stat.S_IMODE(path.stat().st_mode))
        else:
            found[rel] = ("dir",)
    return found


def refusal(exc: pytest.ExceptionInfo, field: str = "output") -> str:
    (problem,) = [p for p in exc.value.problems if p.path == field]
    return f"{problem.message} / fix: {problem.fix}"


def a_users_project(where: Path) -> Path:
    """The layout of the report: a spec, notes, data, and a simulation result saved as kvplan.json."""
    where.mkdir()
    (where / "spec.yaml").write_text(SPEC.read_text())
    (where / "NOTES.md").write_text("my notes\n")
    (where / "data").mkdir()
    (where / "data" / "keep.csv").write_text("a,b\n1,2\n")
    simulated = kvplan("simulate", "spec.yaml", "--out", "kvplan.json", cwd=where)
    assert simulated.returncode == 0, simulated.stderr
    return where


def an_earlier_render(where: Path) -> Path:
    return render(resolve(spec("local")), LOCAL, where, KEYS).root


# --- The output directory ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["relative -o . from inside it", "absolute -o"])
def test_a_simulation_result_named_kvplan_json_does_not_make_a_directory_replaceable(tmp_path, how):
    project = a_users_project(tmp_path / "project")
    before = snapshot(project)
    if how == "absolute -o":
        result = kvplan("render", project / "spec.yaml", "-i", INVENTORY, "-o", project, cwd=tmp_path)
    else:
        result = kvplan("render", "spec.yaml", "-i", INVENTORY, "-o", ".", cwd=project)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "output:" in result.stderr and "is not a kvplan render" in result.stderr
    assert "choose a new directory with -o" in result.stderr
    assert "Traceback" not in result.stderr
    # Every file is still there, unchanged, and nothing was added (not even a .kvplan/ with keys).
    assert snapshot(project) == before


def test_a_symlink_to_a_directory_is_refused_even_when_it_points_at_a_render(tmp_path):
    target = an_earlier_render(tmp_path / "real")
    before = snapshot(target)
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, link, KEYS)
    assert "is a symbolic link" in refusal(exc)
    assert snapshot(target) == before


def test_a_dangling_symlink_as_output_is_refused_and_its_target_not_created(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, link, KEYS)
    assert "is a symbolic link" in refusal(exc)
    assert not (tmp_path / "nowhere").exists()


def test_an_earlier_render_reached_through_a_symlinked_parent_is_refused_and_kept(tmp_path):
    target = an_earlier_render(tmp_path / "real" / "run")
    before = snapshot(target)
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, tmp_path / "link" / "run", KEYS)
    assert f"is reached through a symbolic link ({tmp_path / 'link'})" in refusal(exc)
    assert snapshot(target) == before


def test_an_existing_empty_directory_keeps_its_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)                        # a sticky, world-writable folder the user gave as -o
    root = render(resolve(spec("local")), LOCAL, shared, KEYS).root
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o1777
    assert stat.S_IMODE(os.stat(root / "project").st_mode) == 0o700       # what kvplan made is owner-only
    assert stat.S_IMODE(os.stat(root / "project" / "group_vars" / "all" / "secrets.yml").st_mode) == 0o600


def without_blocking(function, *args):
    """`function(*args)`, failing the test (instead of hanging it) when it has not returned within 20 s; the
    SpecError it raised, or None."""
    outcome: list = []

    def call():
        try:
            function(*args)
            outcome.append(None)
        except SpecError as exc:
            outcome.append(exc)
        except BaseException as exc:             # noqa: BLE001 - the test reports what it was
            outcome.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), f"{function.__name__} blocked"
    if outcome and not isinstance(outcome[0], (SpecError, type(None))):
        raise outcome[0]
    return outcome[0]


def unblock(fifo: Path) -> None:
    """Open the FIFO's other end for a moment, so that a reader a failed test left waiting on it goes on."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:                              # no reader waits: nothing to unblock
        pass


@pytest.mark.parametrize("what", ["fifo", "folder"])
def test_a_fifo_or_folder_as_the_render_marker_is_refused_without_blocking(tmp_path, what):
    out = tmp_path / "run"
    out.mkdir()
    marker = out / MARKER
    os.mkfifo(marker) if what == "fifo" else marker.mkdir()
    try:
        refused = without_blocking(render, resolve(spec("local")), LOCAL, out, KEYS)
    finally:
        if what == "fifo":
            unblock(marker)
    assert refused is not None and "is not a kvplan render" in refused.render()
    assert [p.name for p in out.iterdir()] == [MARKER]


def test_a_regular_file_as_output_is_refused_and_kept(tmp_path):
    mine = tmp_path / "results.json"
    mine.write_text('{"mine": true}\n')
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, mine, KEYS)
    assert "is not a directory" in refusal(exc)
    assert mine.read_text() == '{"mine": true}\n'


def test_an_earlier_render_with_a_file_of_the_users_added_is_refused_and_the_file_kept(tmp_path):
    root = an_earlier_render(tmp_path / "run")
    (root / "project" / "group_vars" / "gpu").mkdir()
    (root / "project" / "group_vars" / "gpu" / "overrides.yml").write_text("vllm_bin: /opt/mine/vllm\n")
    before = snapshot(root)
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, root, KEYS)
    why = refusal(exc)
    assert "project/group_vars/gpu/overrides.yml was not written by kvplan" in why and "move those out" in why
    assert snapshot(root) == before


def test_an_earlier_render_with_an_edited_file_is_refused_and_the_edit_kept(tmp_path):
    root = an_earlier_render(tmp_path / "run")
    site = root / "project" / "site.yml"
    site.write_text(site.read_text() + "# my tweak\n")
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, root, KEYS)
    assert "project/site.yml was changed since kvplan wrote it" in refusal(exc)
    assert site.read_text().endswith("# my tweak\n")


def test_a_symlink_inside_an_earlier_render_is_refused_and_never_followed(tmp_path):
    root = an_earlier_render(tmp_path / "run")
    mine = tmp_path / "my-roles"
    mine.mkdir()
    (mine / "precious.yml").write_text("keep me\n")
    (root / "project" / "extra").symlink_to(mine, target_is_directory=True)
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, root, KEYS)
    assert "project/extra is a symbolic link" in refusal(exc)
    assert (mine / "precious.yml").read_text() == "keep me\n"
    assert (root / "project" / "site.yml").is_file()


def test_kvplan_replaces_its_own_render_and_the_artifacts_of_a_deploy_from_it(tmp_path):
    other = tmp_path / "hosts.yml"
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())
    hosts["all"]["children"]["gpu"]["hosts"] = {"node1": {"ansible_host": "127.0.0.1"}}
    other.write_text(yaml.safe_dump(hosts))
    root = render(resolve(spec("local")), inventory_mod.load(other), tmp_path / "run", KEYS).root
    (root / "artifacts" / "apply" / "job_events").mkdir(parents=True)     # what ansible-runner leaves
    (root / "artifacts" / "apply" / "stdout").write_text("PLAY RECAP\n")
    (root / "artifacts" / "apply" / "job_events" / "1-abc.json").write_text("{}\n")

    again = render(resolve(spec("local")), LOCAL, root, KEYS)

    assert (again.root / "project" / "host_vars" / "localhost.yml").is_file()
    assert not (again.root / "project" / "host_vars" / "node1.yml").exists(), "replaced, not merged"
    assert not (again.root / "artifacts").exists()
    marker = json.loads((again.root / MARKER).read_text())
    assert marker["kind"] == "kvplan-render"
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {MARKER}
    assert set(marker["files"]) == on_disk
    assert render(resolve(spec("local")), LOCAL, root, KEYS).root == root   # and again


def test_kvplan_json_is_still_written_but_decides_nothing(tmp_path):
    root = an_earlier_render(tmp_path / "run")
    manifest = json.loads((root / "kvplan.json").read_text())
    assert manifest["spec"] == "local" and "stack" in manifest
    (root / MARKER).unlink()
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, root, KEYS)
    assert "is not a kvplan render" in refusal(exc)


def test_a_marker_copied_next_to_the_users_files_frees_none_of_them(tmp_path):
    """A marker is evidence, not a key: it can be forged by anyone who can write the directory
    (who could as well delete the files), so it guards against carelessness. Copied by mistake, it
    lists files that are not there, and the user's files are neither listed nor kvplan's."""
    root = an_earlier_render(tmp_path / "run")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "NOTES.md").write_text("my notes\n")
    (mine / MARKER).write_bytes((root / MARKER).read_bytes())
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, mine, KEYS)
    assert "NOTES.md was not written by kvplan" in refusal(exc)
    assert (mine / "NOTES.md").read_text() == "my notes\n"


def test_a_marker_that_names_a_path_outside_the_directory_is_no_marker(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    forged = {"kind": "kvplan-render", "files": {"../outside.txt": hashlib.sha256(b"keep\n").hexdigest()}}
    (sub / MARKER).write_text(json.dumps(forged))
    with pytest.raises(SpecError) as exc:
        render(resolve(spec("local")), LOCAL, sub, KEYS)
    assert "is not a kvplan render" in refusal(exc)
    assert outside.read_text() == "keep\n"


def test_a_render_that_fails_halfway_takes_back_what_it_wrote(tmp_path, monkeypatch):
    def broken(self, source, rel):
        raise OSError("disk full")

    monkeypatch.setattr(output_mod.Output, "copy", broken)
    with pytest.raises(OSError, match="disk full"):
        render(resolve(spec("local")), LOCAL, tmp_path / "run", KEYS)
    assert not (tmp_path / "run").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(OSError, match="disk full"):
        render(resolve(spec("local")), LOCAL, tmp_path / "empty", KEYS)
    assert list((tmp_path / "empty").iterdir()) == []


# --- Secrets in the render and the state directory ------------------------------------------


def test_an_inventory_with_a_become_password_stays_owner_only(tmp_path):
    password = "hunter2-become-secret"
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())
    hosts["all"]["vars"]["ansible_become_password"] = password
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(hosts))
    inv.chmod(0o600)

    root = render(resolve(spec("local")), inventory_mod.load(inv), tmp_path / "run", KEYS).root

    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for folder in ("inventory", "project", "project/group_vars", "project/group_vars/all", "env"):
        assert stat.S_IMODE((root / folder).stat().st_mode) == 0o700, folder
    copy = root / "inventory" / "hosts.yml"
    assert password in copy.read_text() and stat.S_IMODE(copy.stat().st_mode) == 0o600
    holding = [p for p in root.rglob("*") if p.is_file() and password in p.read_text(errors="ignore")]
    assert holding == [copy]
    assert not [p for p in root.rglob("*") if p.stat().st_mode & 0o077], "everything rendered is owner-only"
    assert os.access(root / "project" / "roles" / "daemon" / "files" / "daemonctl", os.X_OK)


def test_the_state_directory_keeps_keys_and_runs_in_owner_only_folders(tmp_path):
    state = tmp_path / "state"
    (state / "secrets").mkdir(parents=True)
    (state / "secrets").chmod(0o755)                      # as an older kvplan left it
    result = kvplan("render", SPEC, "-i", INVENTORY, "-o", tmp_path / "out", "--state-dir", state, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE((state / "secrets").stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "secrets" / "local.yml").stat().st_mode) == 0o600
    run = _run_dir(str(state), "local")
    assert run.parent == state / "runs" and stat.S_IMODE(run.parent.stat().st_mode) == 0o700


def test_a_refused_render_generates_no_keys(tmp_path):
    refused = tmp_path / "simulate-only.yaml"
    refused.write_text(yaml.safe_dump(with_changes(example_data("local"), simulate_only=True)))
    state = tmp_path / "state"
    for command in (["render", refused, "-i", INVENTORY, "-o", tmp_path / "out"], ["deploy", refused, "-i", INVENTORY]):
        result = kvplan(*command, "--state-dir", state, cwd=tmp_path)
        assert result.returncode == 1 and "simulate_only" in result.stderr, result.stderr
    assert not state.exists(), "no secrets/ and no runs/ for a spec that cannot be deployed"
    assert not (tmp_path / "out").exists()


# --- The kept keys: <state dir>/secrets/<name>.yml -------------------------------------------


def keys_file(state: Path) -> Path:
    (state / "secrets").mkdir(parents=True, exist_ok=True)
    return state / "secrets" / "local.yml"


def well_formed(path: Path, mode: int = 0o600) -> Secrets:
    path.write_text(yaml.safe_dump(KEYS.model_dump()))
    path.chmod(mode)
    return KEYS


def test_a_well_formed_owner_only_keys_file_is_reused(tmp_path):
    kept = well_formed(keys_file(tmp_path))
    assert load_or_create(tmp_path, "local") == kept


def test_a_dangling_symlink_at_the_keys_path_is_refused_and_its_target_not_created(tmp_path):
    bait = tmp_path / "elsewhere" / "stolen.yml"
    bait.parent.mkdir()
    keys_file(tmp_path).symlink_to(bait)
    with pytest.raises(SpecError) as exc:
        load_or_create(tmp_path, "local")
    assert "is a symbolic link" in refusal(exc, "secrets") and "remove the link" in refusal(exc, "secrets")
    assert not bait.exists()


def test_a_symlink_to_an_existing_keys_file_is_refused(tmp_path):
    real = tmp_path / "real.yml"
    well_formed(real)
    keys_file(tmp_path).symlink_to(real)
    with pytest.raises(SpecError) as exc:
        load_or_create(tmp_path, "local")
    assert str(tmp_path / "secrets" / "local.yml") in refusal(exc, "secrets")
    assert "is a symbolic link" in refusal(exc, "secrets")


def test_a_keys_file_others_can_read_is_refused(tmp_path):
    well_formed(keys_file(tmp_path), mode=0o644)
    with pytest.raises(SpecError) as exc:
        load_or_create(tmp_path, "local")
    why = refusal(exc, "secrets")
    assert "can be read or changed by other users (mode 0644)" in why and "chmod 600" in why


@pytest.mark.parametrize("text", ["ceph_rgw_access_key: AKIA\n",
                                  # issue 49: the tag's ValueError escaped as a traceback
                                  "ceph_rgw_access_key: !!int 0b102\nceph_rgw_secret_key: x\n"])
def test_a_keys_file_without_the_two_keys_is_refused(tmp_path, text):
    path = keys_file(tmp_path)
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(SpecError) as exc:
        load_or_create(tmp_path, "local")
    assert "does not hold the two keys" in refusal(exc, "secrets")


def test_a_symlinked_secrets_folder_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "secrets").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(SpecError) as exc:
        load_or_create(tmp_path / "state", "local")
    assert "is a symbolic link" in refusal(exc, "state_dir")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("what", ["fifo", "folder"])
def test_a_fifo_or_folder_as_the_keys_file_is_refused_without_blocking(tmp_path, what):
    path = keys_file(tmp_path)
    os.mkfifo(path, 0o600) if what == "fifo" else path.mkdir(mode=0o700)
    try:
        refused = without_blocking(load_or_create, tmp_path, "local")
    finally:
        if what == "fifo":
            unblock(path)
    assert refused is not None
    assert "is not a regular file" in refused.render() and "remove it" in refused.render()


# --- What reaches the deploy's output ---------------------------------------------------------


def test_an_escape_sequence_in_a_warm_up_template_name_is_refused_at_validate():
    # The deploy prints each warm-up prompt's name as its step's label: this one would retitle the terminal.
    with pytest.raises(SpecError) as exc:
        spec("local", lmcache__warmup={"templates": [{"name": "faq\x1b]0;owned\x07", "tokens": 64}]})
    (problem,) = exc.value.problems
    assert problem.path == "lmcache.warmup.templates[0].name"
    assert "must be printable text on one line" in problem.message
