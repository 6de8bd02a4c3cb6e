"""Bad input of every kind becomes a SpecError naming the field and a fix, never a traceback."""

from __future__ import annotations

import pytest

from kvplan.errors import SpecError
from kvplan.spec import load

from conftest import spec


def load_problems(path):
    with pytest.raises(SpecError) as info:
        load(path)
    return info.value.problems


def write(tmp_path, text: str):
    path = tmp_path / "topo.yaml"
    path.write_text(text)
    return path


def test_missing_file(tmp_path):
    [p] = load_problems(tmp_path / "nope.yaml")
    assert "file not found" in p.message


def test_a_folder_is_not_a_spec(tmp_path):
    [p] = load_problems(tmp_path)
    assert "not a file" in p.message


def test_yaml_syntax_error_names_the_line(tmp_path):
    [p] = load_problems(write(tmp_path, "name: x\nserving:\n  gpu: [A100\n"))
    assert "YAML syntax error at line" in p.message


def test_duplicate_keys_are_refused(tmp_path):
    [p] = load_problems(write(tmp_path, "name: a\nname: b\n"))
    assert "duplicate key 'name' (first given on line 1)" in p.message


def test_empty_file_and_non_mapping(tmp_path):
    assert "empty file" in load_problems(write(tmp_path, ""))[0].message
    assert "a list" in load_problems(write(tmp_path, "- a\n- b\n"))[0].message


def test_binary_file(tmp_path):
    path = tmp_path / "topo.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "UTF-8" in load_problems(path)[0].fix


def test_unknown_key_suggests_the_closest_known_one():
    with pytest.raises(SpecError) as info:
        spec(serving__block_sise=16)
    [p] = info.value.problems
    assert p.path == "serving.block_sise"
    assert p.fix == "did you mean 'block_size'?"
    assert "block_size" in p.allowed


def test_wrong_units_name_what_is_allowed():
    with pytest.raises(SpecError) as info:
        spec(lmcache__ddr__size="8 parsecs", workload__arrivals__rate="5GB", ceph__osd_size="-3TB")
    found = {p.path: p for p in info.value.problems}
    assert "a size in bytes such as" in found["lmcache.ddr.size"].allowed
    assert found["lmcache.ddr.size"].fix == "write it like '64GiB'"
    assert "not a request rate" in found["workload.arrivals.rate"].message
    assert "ceph.osd_size" in found


def test_wrong_types_and_choices():
    with pytest.raises(SpecError) as info:
        spec(serving__instances="four", workload__kind="chatt", serving__prefix_caching="maybe", slo="fast")
    found = {p.path: p for p in info.value.problems}
    assert "valid integer" in found["serving.instances"].message
    assert found["workload.kind"].fix == "did you mean 'chat'?"
    assert "serving.prefix_caching" in found
    assert "mapping" in found["slo"].message


def test_missing_required_keys():
    with pytest.raises(SpecError) as info:
        spec(serving__gpu=None, name=None)
    assert {p.path for p in info.value.problems} == {"name", "serving.gpu"}
    assert all(p.fix.startswith("add ") for p in info.value.problems)
    gpu = next(p for p in info.value.problems if p.path == "serving.gpu")
    assert gpu.allowed == "Accelerator, by catalog name (`kvplan catalog` lists them), e.g. H100-SXM."  # its docstring


def test_missing_trace_file():
    with pytest.raises(SpecError) as info:
        spec("mooncake-replay", workload__trace={"path": "traces/nope.jsonl"})
    [p] = info.value.problems
    assert p.path == "workload.trace.path" and "trace file not found" in p.message


def test_a_trace_block_size_the_trace_does_not_have_is_refused_when_validated():
    with pytest.raises(SpecError) as info:
        spec("mooncake-replay", workload__trace={"path": "traces/mooncake-conversation-first1000.jsonl",
                                                 "block_size": 256})
    [p] = info.value.problems
    assert p.path == "workload.trace"
    assert "first request has 14 hash_ids for input_length 6758, which needs a block size from 483 to 519" in p.message
    assert "512 for the Mooncake traces" in p.fix


def test_inline_model_errors_point_into_the_model_block():
    with pytest.raises(SpecError) as info:
        spec(model={"name": "mine", "attention": "gqa", "num_layers": 0})
    paths = {p.path for p in info.value.problems}
    assert "model.num_layers" in paths and "model.head_dim" in paths


def test_distribution_needs_its_parameters():
    with pytest.raises(SpecError) as info:
        spec(workload__prompt={"dist": "uniform"})
    [p] = info.value.problems
    assert p.path == "workload.prompt" and p.fix == "add max: <tokens>"


@pytest.mark.parametrize("text, line, says", [
    ("name: x\nserving:\n  max_num_seqs: !!int 0b102\n", 3, "!!int cannot be read from '0b102'"),
    ("name: x\nmodel: !!float 'x'\n", 2, "!!float cannot be read from 'x'"),
    ("name: !!bool maybe\n", 1, "!!bool cannot be read from 'maybe'"),
    ("name: x\ncreated: !!timestamp yesterday\n", 2, "!!timestamp cannot be read from 'yesterday'"),
    ("name: x\nlimits: [1, !!int '']\n", 2, "!!int cannot be read from ''"),
])
def test_a_value_its_yaml_tag_cannot_build_is_an_error_naming_the_line(tmp_path, text, line, says):
    # issue 49: PyYAML's constructors raised ValueError (KeyError, AttributeError, ...), a traceback (exit 70)
    [p] = load_problems(write(tmp_path, text))
    assert f"YAML error at line {line}" in p.message and says in p.message, p.message
