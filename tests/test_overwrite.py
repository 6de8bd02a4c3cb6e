"""Every command that writes a file replaces only a file kvplan wrote itself (kvplan/cli/files.py).

A file someone else put at the output path is refused with a usage error (exit 2) that names the option and
the fix, and is left byte for byte as it was; `--overwrite` replaces it. A file kvplan wrote earlier is
replaced without asking, so running a command again keeps working. A folder or a symbolic link at the path
is refused even with --overwrite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import REPO
from kvplan.cli.app import app
from kvplan.cli.files import written_by_kvplan

FOREIGN = b"my notes, not kvplan's\n"
"""What a user keeps at the path a command is told to write."""


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """examples/local.yaml with 20 requests: every command that writes runs in a second or two."""
    spec = yaml.safe_load((REPO / "examples" / "local.yaml").read_text())
    spec["workload"]["requests"] = 20
    path = tmp_path_factory.mktemp("spec") / "small.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def kvplan(*args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def result_file(small: Path, tmp_path: Path) -> Path:
    path = tmp_path / "result.json"
    assert kvplan("simulate", small, "--out", path).exit_code == 0
    return path


# Each command that writes a file: (output name, the command line writing it to OUT, the option named).
COMMANDS = {
    "simulate --out": ("run.json", lambda s, t: ["simulate", s, "--out"], "--out"),
    "sweep --out": ("sweep.json", lambda s, t: ["sweep", s, "--vary", "serving.max_num_seqs=4", "--no-cache", "--out"],
                    "--out"),
    "sweep --csv": ("sweep.csv", lambda s, t: ["sweep", s, "--vary", "serving.max_num_seqs=4", "--no-cache", "--csv"],
                    "--csv"),
    "capacity --out": ("capacity.json", lambda s, t: ["capacity", s, "--slo", "ttft_p99=5s", "--seeds", "1", "--low",
                                                      "1/s", "--high", "4/s", "--tolerance", "0.5", "--no-cache",
                                                      "--out"], "--out"),
    "size --out": ("size.json", lambda s, t: ["size", s, "--out"], "--out"),
    "plan --out": ("winner.yaml", lambda s, t: ["plan", s, "--rate", "2/s", "--slo", "ttft_p99=5s", "--max-runs", "3",
                                                "--cache-dir", t / "cache", "--out"], "--out"),
    "doctor --write": ("fixed.yaml", lambda s, t: ["doctor", s, "--seeds", "1", "--cache-dir", t / "cache", "--write"],
                       "--write"),
    "report -o (.html)": ("report.html", lambda s, t: ["report", result_file(s, t), "-o"], "-o/--out"),
    "report -o (.md)": ("report.md", lambda s, t: ["report", result_file(s, t), "-o"], "-o/--out"),
    "import -o": ("imported.yaml", lambda s, t: ["import", "--vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct",
                                                 "--gpu", "H100-SXM", "-o"], "-o/--out"),
    "render --format production-stack -o": (
        "values.yaml", lambda s, t: ["render", REPO / "docs" / "examples" / "production-stack.yaml", "--format",
                                     "production-stack", "--request-cpu", "8", "--request-memory", "64Gi", "-o"],
        "-o/--out"),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_a_file_kvplan_did_not_write_is_refused_then_replaced_with_overwrite_and_a_rerun_replaces_its_own(
        name, small, tmp_path):
    filename, command, option = COMMANDS[name]
    args = command(small, tmp_path)
    out = tmp_path / filename
    out.write_bytes(FOREIGN)

    refused = kvplan(*args, out)
    assert refused.exit_code == 2, refused.output
    assert out.read_bytes() == FOREIGN                                    # untouched, byte for byte
    said = " ".join(refused.output.split())
    assert option in said and "kvplan did not write it" in said
    assert "pass --overwrite to replace it, or choose another path" in said

    replaced = kvplan(*args, out, "--overwrite")
    assert replaced.exit_code in (0, 6), replaced.output                  # doctor exits 6 on a finding
    assert out.read_bytes() != FOREIGN and written_by_kvplan(out)

    again = kvplan(*args, out)                                            # kvplan's own file: no --overwrite needed
    assert again.exit_code in (0, 6), again.output


def test_calibrate_refuses_a_foreign_profile_path_before_reading_any_benchmark(small, tmp_path):
    out = tmp_path / "profile.yaml"
    out.write_bytes(FOREIGN)
    refused = kvplan("calibrate", small, "--vllm-result", tmp_path / "absent.json", "-o", out)
    assert refused.exit_code == 2 and "kvplan did not write it" in " ".join(refused.output.split())
    assert out.read_bytes() == FOREIGN


def test_a_profile_calibrate_wrote_is_its_own(tmp_path):
    from kvplan.spec.profile import Profile, write_profile
    from kvplan.spec.serving import StepModel

    path = tmp_path / "h100.yaml"
    write_profile(Profile(device="H100-SXM", model="llama", step_model=StepModel(), fitted=[], fitted_on=[], fit={}),
                  path)
    assert written_by_kvplan(path)


@pytest.mark.parametrize("what", ["folder", "symlink"])
def test_a_folder_or_a_symbolic_link_at_the_path_is_refused_even_with_overwrite(what, small, tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_bytes(FOREIGN)
    out = tmp_path / "run.json"
    if what == "folder":
        out.mkdir()
    else:
        out.symlink_to(target)
    refused = kvplan("simulate", small, "--out", out, "--overwrite")
    assert refused.exit_code == 2, refused.output
    assert ("is a folder" if what == "folder" else "is a symbolic link") in " ".join(refused.output.split())
    assert target.read_bytes() == FOREIGN and (out.is_dir() if what == "folder" else out.is_symlink())


def test_the_refusal_comes_before_the_run(small, tmp_path):
    """A long plan or sweep is not run only to be refused at the end: nothing is simulated, no cache is made."""
    out = tmp_path / "winner.yaml"
    out.write_bytes(FOREIGN)
    refused = kvplan("plan", small, "--rate", "2/s", "--cache-dir", tmp_path / "cache", "--out", out)
    assert refused.exit_code == 2 and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("text", [
    "# my spec; I run it with kvplan\nname: mine\n",               # mentions kvplan, is not written by it
    "name: mine\n",
    json.dumps({"spec_hash": "x"}),                                  # JSON kvplan report does not recognise
    "a,b,c\n1,2,3\n",
    "<html><head><title>kvplan</title></head></html>\n",
])
def test_what_is_not_kvplans_is_not_taken_for_it(text, tmp_path):
    path = tmp_path / "file"
    path.write_text(text)
    assert not written_by_kvplan(path)


def test_an_empty_file_holds_nothing_to_lose_and_is_written(small, tmp_path):
    """The `out=$(mktemp); kvplan simulate SPEC --out "$out"` idiom."""
    out = tmp_path / "tmp.XXXX"
    out.touch()
    assert kvplan("size", small, "--out", out).exit_code == 0 and json.loads(out.read_text())["kind"] == "SizeResult"


def test_dev_null_is_written_into_not_replaced(small):
    assert kvplan("size", small, "--out", "/dev/null").exit_code == 0


def test_a_dash_is_stdout_and_never_checked(small, tmp_path):
    done = CliRunner().invoke(app, ["size", str(small), "--out", "-"])
    assert done.exit_code == 0 and json.loads(done.stdout)["kind"] == "SizeResult"


def test_bench_out_refuses_a_folder_whose_spec_yaml_is_the_users(small, tmp_path):
    """`kvplan bench SPEC --out .` in a project folder would have replaced the project's own spec.yaml."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "spec.yaml").write_bytes(FOREIGN)
    refused = kvplan("bench", small, "--target", "http://127.0.0.1:1", "--out", project)
    assert refused.exit_code == 2 and "kvplan did not write it" in " ".join(refused.output.split())
    assert (project / "spec.yaml").read_bytes() == FOREIGN and not (project / "run.json").exists()


def test_bench_out_may_reuse_the_folder_of_an_earlier_bench_run(small, tmp_path):
    from kvplan.live.observed import write_run
    from live_fakes import bench_run, local

    write_run(tmp_path / "run", bench_run(local(), []), "name: local\n")
    again = kvplan("bench", small, "--target", "http://127.0.0.1:1", "--out", tmp_path / "run", "--timeout", "1")
    assert again.exit_code == 5 and "does not answer" in again.output     # on to the (absent) server, exit 5


def test_render_checks_the_llm_d_picker_file_beside_the_values_before_writing_either(tmp_path):
    args = ["render", REPO / "docs" / "examples" / "llm-d.yaml", "--format", "production-stack", "--request-cpu", "8",
            "--request-memory", "64Gi", "-o", tmp_path / "values.yaml"]
    picker = tmp_path / "values.endpoint-picker.yaml"
    picker.write_bytes(FOREIGN)
    refused = kvplan(*args)
    assert refused.exit_code == 2 and str(picker) in " ".join(refused.output.split())
    assert picker.read_bytes() == FOREIGN and not (tmp_path / "values.yaml").exists()
    assert kvplan(*args, "--overwrite").exit_code == 0 and written_by_kvplan(picker)
    assert kvplan(*args).exit_code == 0                                   # both are kvplan's now


def test_overwrite_does_not_reach_a_render_directory(small, tmp_path):
    """An Ansible render's directory is replaced only when its marker proves kvplan made it (deploy/output.py)."""
    done = kvplan("render", small, "-i", REPO / "inventories" / "local", "-o", tmp_path / "out", "--overwrite")
    assert done.exit_code == 2 and "a render directory is replaced only when kvplan made it" in " ".join(done.output.split())
    assert not (tmp_path / "out").exists()
