"""A file a spec or command names is read only as what it claims to be, and an error never prints it back.

A spec is a YAML mapping of spec sections; a trace is JSON lines; a `kvplan report` input is a kvplan result. Pointed at some other file (a password
file, /proc/self/environ with the cloud keys of the environment, a JSON file of someone's credentials), kvplan
says what is wrong with it by line number and kind, never by quoting it. A FIFO or device where a file belongs
is refused at once instead of blocking the command.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import REPO, example_data, with_changes
from kvplan.cli.app import app
from kvplan.errors import SpecError
from kvplan.report.inputs import load as load_report_input
from kvplan.sim.trace import read_trace

SECRET = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI-K7MDENG"
SHADOW = "root:$6$saltsalt$" + "S3cretHashS3cretHash" + ":19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"


def simulate_with_trace(tmp_path, trace_path) -> str:
    """`kvplan simulate` of the Mooncake example with its trace path replaced; the output it prints."""
    data = with_changes(example_data("mooncake-replay"), workload__trace={"path": str(trace_path), "block_size": 512})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["simulate", str(spec)])
    assert result.exit_code == 1, result.output             # refused as bad input, not a traceback
    return result.output


def test_a_password_file_given_as_the_spec_is_not_a_spec_and_is_not_printed(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.write_text(SHADOW)              # YAML reads each line as a key: "unknown key 'root:$6$...'" printed it
    result = CliRunner().invoke(app, ["validate", str(shadow)])
    assert result.exit_code == 1
    assert "this is not a kvplan spec: none of its 2 top-level keys is a spec section" in result.output
    assert "S3cretHash" not in result.output and "daemon" not in result.output


def test_a_spec_with_misspelled_sections_still_hears_did_you_mean(tmp_path):
    typo = tmp_path / "typo.yaml"
    typo.write_text("nmae: x\nmodle: y\n")
    result = CliRunner().invoke(app, ["validate", str(typo)])
    assert "unknown key 'nmae'" in result.output and "did you mean 'name'?" in result.output


def test_a_password_file_as_the_trace_is_refused_by_line_number_and_kind_without_printing_it(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.write_text(SHADOW)
    out = simulate_with_trace(tmp_path, shadow)
    assert f"{shadow}:1: not JSON" in out and f"{shadow}:2: not JSON" in out
    assert "S3cretHash" not in out and "root:" not in out and "daemon" not in out


def test_the_environment_file_as_the_trace_does_not_print_the_environment(tmp_path):
    environ = tmp_path / "environ"              # /proc/self/environ's shape: NUL-separated, no newline, size 0 on /proc
    environ.write_bytes(f"{SECRET}\0HOME=/root\0".encode())
    out = simulate_with_trace(tmp_path, environ)
    assert f"{environ}:1: not JSON" in out
    assert "wJalrXUtnFEMI" not in out and "AWS_SECRET" not in out


def test_the_real_proc_environ_is_never_printed(tmp_path, monkeypatch):
    assert os.path.exists("/proc/self/environ"), "the test needs Linux's /proc (a skip would not be a pass)"
    monkeypatch.setenv("KVPLAN_TEST_CANARY", "canary-7f3a9c")
    with pytest.raises(SpecError) as exc:
        read_trace("/proc/self/environ")
    assert "canary-7f3a9c" not in str(exc.value) and "KVPLAN_TEST_CANARY" not in str(exc.value)


def test_a_json_line_with_strings_where_numbers_belong_is_described_by_kind_not_content(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": "' + SECRET + '", "input_length": 1, "output_length": 1, "hash_ids": [0]}\n'
                     '["' + SECRET + '"]\n')
    with pytest.raises(SpecError) as exc:
        read_trace(str(trace))
    text = str(exc.value)
    assert "timestamp must be an integer, got a JSON string" in text
    assert "expected a JSON object, got a JSON array" in text
    assert "wJalrXUtnFEMI" not in text


def test_a_fifo_as_the_trace_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    outcome: list = []
    reader = threading.Thread(target=lambda: outcome.append(_raised(read_trace, str(fifo))), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():                        # unblock the reader before failing
        with open(fifo, "w"):
            pass
        pytest.fail("reading a FIFO as the trace blocked")
    assert "not a regular file" in outcome[0]


def test_a_report_input_that_is_some_other_json_is_named_by_kind_not_printed(tmp_path):
    other = tmp_path / "credentials.json"
    other.write_text('["' + SECRET + '"]\n')
    with pytest.raises(SpecError) as exc:
        load_report_input(other)
    assert "holds a JSON array, not a kvplan result object" in str(exc.value)
    assert "wJalrXUtnFEMI" not in str(exc.value)


def test_a_fifo_as_a_report_input_is_refused_without_blocking(tmp_path):
    assert "not a regular file" in _raised_on_a_fifo(load_report_input, tmp_path / "result.json")


def _raised_on_a_fifo(reader, fifo) -> str:
    """What `reader(fifo)` raises for a FIFO made at `fifo`; fails the test if reading it blocks for 10 s."""
    os.mkfifo(fifo)
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(_raised(reader, fifo)), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        with open(fifo, "w"):
            pass
        pytest.fail(f"reading the FIFO {fifo.name} blocked")
    return outcome[0]


def _raised(function, *args) -> str:
    """The SpecError text `function(*args)` raises ("" when it returns)."""
    try:
        function(*args)
    except SpecError as exc:
        return str(exc)
    return ""



def _read_vllm_result(path):
    from kvplan.gpufit.benchmarks import read_vllm_result
    from kvplan.spec import load

    return read_vllm_result(path, load(REPO / "examples" / "chat-llama2-13b.yaml"))


def _doctor_results(path):
    from kvplan.cli.doctor import _results

    return _results(str(path), None)


def _read_profile(path):
    from kvplan.spec.profile import read_profile

    return read_profile(path)


def _read_run(path):
    from kvplan.live.observed import read_run

    return read_run(path)


def _read_log(path):
    from kvplan.sim.replay import read_log

    return read_log(str(path))


@pytest.mark.parametrize("reader", [_read_vllm_result, _doctor_results, _read_profile, _read_run, _read_log,
                                    lambda path: read_trace(str(path))],
                         ids=["calibrate --vllm-result", "doctor --result", "--profile", "--observed",
                              "workload.replay.path", "workload.trace.path"])
def test_a_fifo_a_command_or_spec_names_is_refused_without_blocking(tmp_path, reader):
    raised = _raised_on_a_fifo(reader, tmp_path / "named.json")
    assert "FIFO" in raised or "not a regular file" in raised, raised


@pytest.mark.parametrize("reader", [_read_log, lambda path: read_trace(str(path))], ids=["replay log", "trace"])
def test_a_device_that_never_ends_is_refused_not_read(reader):
    assert "device" in _raised(reader, Path("/dev/zero"))
