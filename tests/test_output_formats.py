"""Machine-readable output, as kubectl has it: every command that prints a result prints it as JSON or YAML
(`--format json|yaml`, `--json` the short form) as one document whose first keys are its `kind` and
`schema_version`; `kvplan schema --kind KIND` prints the JSON Schema every such document validates against.

Readers keep working across the change: `kvplan report` and the overwrite check (cli/files.py) recognise a
document by its kind, and a file written before kinds existed by its keys, as they always did."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from conftest import REPO, example_data, with_changes
from kvplan.cli.app import app
from kvplan.cli.files import written_by_kvplan
from kvplan.report import kinds
from live_fakes import LOCAL, PLAIN_BENCH, fake_vllm, unused_port

pytestmark = pytest.mark.unit

NOBODY = unused_port()
"""A port nothing listens on: the live stack observe reads there is down."""
RECORDED = REPO / "tests" / "fixtures" / "fidelity-zen1"
"""A benchmark run recorded on a real stack: what compare reads."""


def kvplan(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """examples/local.yaml with 20 requests: every command answers in a second or two."""
    path = tmp_path_factory.mktemp("formats") / "small.yaml"
    path.write_text(yaml.safe_dump(with_changes(example_data("local"), workload__requests=20)))
    return path


# Each kind, the command line that prints it (before --format) and the exit codes it may end with.
COMMANDS = {
    "ResolvedSpec": (lambda s: ["validate", s], (0,)),
    "SimulateResult": (lambda s: ["simulate", s], (0,)),
    "SimulateRuns": (lambda s: ["simulate", s, "--seeds", "2", "--ablate"], (0,)),
    "SweepResult": (lambda s: ["sweep", s, "--vary", "serving.max_num_seqs=4,8", "--no-cache"], (0,)),
    "CapacityResult": (lambda s: ["capacity", s, "--slo", "ttft_p99=5s", "--seeds", "1", "--low", "1/s", "--high",
                                  "4/s", "--tolerance", "0.5", "--no-cache"], (0,)),
    "SizeResult": (lambda s: ["size", s], (0,)),
    "PlanResult": (lambda s: ["plan", s, "--rate", "2/s", "--slo", "ttft_p99=5s", "--max-instances", "1",
                              "--no-cache"], (0,)),
    "DoctorResult": (lambda s: ["doctor", s, "--seeds", "1", "--no-prove", "--no-cache"], (0, 6)),
    "ObserveSnapshot": (lambda s: ["observe", s, "--target", f"http://127.0.0.1:{NOBODY}", "--no-ceph",
                                   "--timeout", "0.5"], (5,)),       # nothing listens there: every component down
    "CompareResult": (lambda s: ["compare", RECORDED / "chat.yaml", "--observed", RECORDED / "run-chat"], (0,)),
    "Catalog": (lambda s: ["catalog"], (0,)),
}

MOMENT = {"ObserveSnapshot": "taken_at"}
"""The key that differs between two runs of a command (the moment the live stack was read)."""


FILED = ("BenchRun", "DeviceProfile")
"""The kinds of commands that write a file or a run directory beside what they print: tested on their own below."""


def test_every_kind_has_a_command_here_and_one_schema_version():
    assert set(COMMANDS) | set(FILED) == set(kinds.KINDS)
    assert all(k.version >= 1 for k in kinds.KINDS.values())


def check_document(kind: str, as_json: str, as_yaml: str, moment: str | None = None) -> dict:
    """The printed document begins with its kind and schema_version, YAML holds what JSON holds (but for the
    moment it was taken, which differs between two runs), and it validates against `kvplan schema --kind`."""
    document = json.loads(as_json)
    assert list(document)[:2] == ["kind", "schema_version"]
    assert document["kind"] == kind and document["schema_version"] == kinds.KINDS[kind].version
    same = yaml.safe_load(as_yaml)
    assert list(same) == list(document)                     # the same keys in the same order
    if moment:
        assert {k: v for k, v in same.items() if k != moment} == {k: v for k, v in document.items() if k != moment}
    else:
        assert same == document
    schema = json.loads(kvplan("schema", "--kind", kind).stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)
    return document


@pytest.fixture(scope="module")
def printed(small) -> dict[str, tuple[str, str]]:
    """Each kind as its command prints it with --format json and with --format yaml."""
    out = {}
    for kind, (command, codes) in COMMANDS.items():
        texts = []
        for fmt in ("json", "yaml"):
            result = kvplan(*command(small), "--format", fmt)
            assert result.exit_code in codes, (kind, fmt, result.output)
            texts.append(result.stdout)
        out[kind] = tuple(texts)
    return out


@pytest.mark.parametrize("kind", COMMANDS)
def test_each_result_begins_with_its_kind_and_schema_version_in_json_and_yaml_alike(printed, kind):
    check_document(kind, *printed[kind], moment=MOMENT.get(kind))


@pytest.mark.parametrize("kind", COMMANDS)
def test_schema_kind_refuses_a_document_of_another_kind(printed, kind):
    result = kvplan("schema", "--kind", kind)
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    document = json.loads(printed[kind][0])
    other = next(k for k in COMMANDS if k != kind)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "kind": other}, schema, cls=jsonschema.Draft202012Validator)


def test_bench_prints_its_run_as_a_document_and_still_writes_run_json(tmp_path):
    spec = tmp_path / "bench.yaml"
    spec.write_text(yaml.safe_dump(with_changes(example_data("local"), workload=PLAIN_BENCH)))
    printed = []
    with fake_vllm() as fake:
        for fmt in ("json", "yaml"):
            done = kvplan("bench", spec, "--target", fake.url, "--out", tmp_path / fmt, "--salt", 7, "--format", fmt)
            assert done.exit_code in (0, 5), done.output   # 5: the spec's LMCache server is not there to be read
            printed.append(done.stdout)
    # each run is its own (its timings and counters differ): each printed document is its own run.json
    runs = {fmt: json.loads((tmp_path / fmt / "run.json").read_text()) for fmt in ("json", "yaml")}
    assert json.loads(printed[0]) == {"kind": "BenchRun", "schema_version": 1, **runs["json"]}
    document = check_document("BenchRun", kinds.dump("BenchRun", runs["yaml"]), printed[1])
    assert document["name"] == "local" and document["salt"] == 7


def test_calibrate_prints_the_profile_it_writes_as_a_document(tmp_path):
    fidelity = REPO / "docs" / "fidelity"
    printed = []
    for fmt in ("json", "yaml"):
        done = kvplan("calibrate", fidelity / "chat.yaml", "--observed", fidelity / "run-chat", "-o",
                      tmp_path / f"{fmt}.yaml", "--format", fmt)
        assert done.exit_code == 0, done.output
        printed.append(done.stdout)
    document = check_document("DeviceProfile", *printed)
    written = yaml.safe_load((tmp_path / "json.yaml").read_text())
    assert document["fitted"] == written["fitted"] and document["device"] == written["device"]


def test_json_is_the_short_form_of_format_json(small):
    short, long = kvplan("size", small, "--json"), kvplan("size", small, "--format", "json")
    assert short.exit_code == long.exit_code == 0
    assert short.stdout == long.stdout


def test_out_writes_the_same_json_document_whatever_format_prints(small, tmp_path):
    out = tmp_path / "size.json"
    printed = kvplan("size", small, "--format", "yaml", "--out", out)
    assert printed.exit_code == 0, printed.output
    assert json.loads(out.read_text()) == yaml.safe_load(printed.stdout)
    assert json.loads(out.read_text())["kind"] == "SizeResult"


@pytest.mark.parametrize("args, message", [
    (["--format", "xml"], "'xml' is not a format; use table, json or yaml"),
    (["--json", "--format", "yaml"], "--json is --format json; it cannot go with --format yaml"),
])
def test_a_format_the_command_does_not_print_is_a_usage_error(small, args, message):
    result = kvplan("size", small, *args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


@pytest.mark.parametrize("command, message", [
    (["plan", "--rate", "2/s", "--json", "--out", "-"], "--out - prints the winner's spec on stdout, --format json the "
                                                        "plan: give one of them"),
    (["sweep", "--vary", "serving.max_num_seqs=4", "--format", "yaml", "--csv", "-"],
     "--csv - prints the sweep as CSV on stdout, --format yaml as a document: give one of them"),
])
def test_two_answers_on_stdout_at_once_are_a_usage_error_before_anything_runs(small, command, message):
    """Both on stdout, they would print one after the other, and neither would parse."""
    result = kvplan(command[0], small, *command[1:])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_simulate_keeps_its_markdown_beside_the_data_formats(small):
    result = kvplan("simulate", small, "--format", "mdx")
    assert result.exit_code == 2
    assert "use table, md, json or yaml" in " ".join(result.output.split())


def test_schema_without_kind_is_still_the_specs_schema():
    result = kvplan("schema")
    assert result.exit_code == 0 and json.loads(result.stdout)["title"] == "Topology"


def test_kinds_are_read_in_any_case_and_a_near_miss_is_named():
    assert json.loads(kvplan("schema", "--kind", "sizeresult").stdout)["title"] == "SizeResult"
    wrong = kvplan("schema", "--kind", "SimulateResults")
    assert wrong.exit_code == 1
    assert "did you mean SimulateResult?" in wrong.output and "allowed: ResolvedSpec, SimulateResult" in wrong.output


def test_schema_kinds_lists_every_kind_with_its_version_and_command():
    listed = kvplan("schema", "--kinds").stdout.splitlines()
    assert [line.split()[0] for line in listed] == list(kinds.KINDS)
    assert "schema_version 1  kvplan size:" in listed[list(kinds.KINDS).index("SizeResult")]


# --- readers: kvplan report and the overwrite check, on new files and on files from before kinds --------------

def _old(document: dict) -> dict | list:
    """The file as a kvplan before kinds wrote it: no kind nor schema_version (sizings and diagnoses carried their
    own lower-case kind; a comparison was a bare list of rows)."""
    body = {k: v for k, v in document.items() if k not in ("kind", "schema_version")}
    legacy = {"SizeResult": "size", "DoctorResult": "doctor"}
    if document["kind"] in legacy:
        body = {"kind": legacy[document["kind"]], **body}
    return body["rows"] if document["kind"] == "CompareResult" else body


ANSWERS = [k for k in COMMANDS if k not in ("ResolvedSpec", "Catalog")]


@pytest.mark.parametrize("kind", ANSWERS)
def test_report_reads_every_answer_with_its_kind_and_as_written_before_kinds(printed, kind, tmp_path):
    document = json.loads(printed[kind][0])
    pages = []
    for name, data in (("new", document), ("old", _old(document))):
        (tmp_path / name).mkdir()
        path = tmp_path / name / "answer.json"
        path.write_text(json.dumps(data))
        result = kvplan("report", path, "-o", tmp_path / name / "page.md")
        assert result.exit_code == 0, (name, result.output)
        assert written_by_kvplan(path)                  # so a rerun may replace it without --overwrite
        pages.append((tmp_path / name / "page.md").read_text().replace(str(tmp_path / name), "DIR"))
    assert pages[0] == pages[1]                         # the same page from either file


@pytest.mark.parametrize("kind", ["ResolvedSpec", "Catalog"])
def test_report_still_refuses_reference_data_named_by_its_kind(printed, kind, tmp_path):
    path = tmp_path / "reference.json"
    path.write_text(printed[kind][0])
    result = kvplan("report", path, "-o", tmp_path / "page.md")
    assert result.exit_code == 1
    assert "not an answer to show" in result.output
    assert not written_by_kvplan(path)


@pytest.mark.parametrize("kind, says", [("BenchRun", "is a bench run `kvplan bench --format json` prints"),
                                         ("DeviceProfile", "is a DeviceProfile document, which `kvplan report` does "
                                                           "not show")])
def test_report_refuses_a_bench_run_or_a_profile_saying_what_it_is(kind, says, tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"kind": kind, "schema_version": 1}))
    result = kvplan("report", path, "-o", tmp_path / "page.md")
    assert result.exit_code == 1 and says in " ".join(result.output.split()) and "fix:" in result.output


def test_a_document_from_a_newer_kvplan_is_refused_naming_both_versions(printed, tmp_path):
    document = json.loads(printed["SizeResult"][0])
    path = tmp_path / "newer.json"
    path.write_text(json.dumps({**document, "schema_version": kinds.KINDS["SizeResult"].version + 1}))
    result = kvplan("report", path, "-o", tmp_path / "page.md")
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "written by a newer kvplan (schema_version 2); this kvplan reads schema_version 1" in text
    assert not (tmp_path / "page.md").exists()


def test_an_unknown_kind_is_refused_with_the_kinds_there_are(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"kind": "Deployment", "schema_version": 1, "spec": {}}))
    result = kvplan("report", path, "-o", tmp_path / "page.md")
    assert result.exit_code == 1
    assert "kind: is not a kind of document kvplan writes" in result.output and "SimulateResult" in result.output
    assert not written_by_kvplan(path)          # another tool's file with a kind: never replaced without --overwrite


def test_a_result_of_kvplan_is_replaced_by_a_rerun_and_a_foreign_document_is_not(small, tmp_path):
    out = tmp_path / "size.json"
    assert kvplan("size", small, "--out", out).exit_code == 0
    again = kvplan("size", small, "--out", out)
    assert again.exit_code == 0, again.output
    out.write_text(json.dumps({"kind": "SizeResult", "schema_version": 1, "mine": True}))
    refused = kvplan("size", small, "--out", out)
    assert refused.exit_code == 2 and json.loads(out.read_text()) == {"kind": "SizeResult", "schema_version": 1,
                                                                    "mine": True}


def test_doctor_reads_a_simulate_result_with_its_kind(small, tmp_path):
    run = tmp_path / "run.json"
    assert kvplan("simulate", small, "--out", run).exit_code == 0
    assert json.loads(run.read_text())["kind"] == "SimulateResult"
    diagnosed = kvplan("doctor", small, "--result", run, "--no-prove", "--no-cache", "--json")
    assert diagnosed.exit_code in (0, 6), diagnosed.output
    assert json.loads(diagnosed.stdout)["kind"] == "DoctorResult"


def test_yaml_writes_what_json_writes_for_values_json_has_no_word_for():
    """inf and nan are null in both, as pydantic writes JSON: YAML's .inf would be a document JSON cannot carry."""
    payload = {"rows": [{"metric": "x", "unit": "s", "predicted": float("inf"), "observed": float("nan"),
                         "error": None}]}
    as_json = json.loads(kinds.dump("CompareResult", payload, "json"))
    assert as_json == yaml.safe_load(kinds.dump("CompareResult", payload, "yaml"))
    assert as_json["rows"][0]["predicted"] is None and as_json["rows"][0]["observed"] is None
