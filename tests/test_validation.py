"""One round of `kvplan validate` reports every problem it can find: the field problems, the rules of the
sections that parsed, and the catalog checks those sections allow (kvplan/validation.py, spec/partial.py)."""

from __future__ import annotations

import pytest

from kvplan.errors import Problem, SpecError
from kvplan.validation import load

from conftest import REPO, example_data, with_changes
from test_cli import run

FOUR_MISTAKES = "docs/examples/mistakes/four-mistakes.yaml"


def problems(tmp_path, example: str = "chat-llama2-13b", **changes) -> list[Problem]:
    """The problems one validation round finds in an example with changes applied."""
    import yaml

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(with_changes(example_data(example), **changes)))
    with pytest.raises(SpecError) as info:
        load(path)
    return info.value.problems


def test_four_mistakes_in_four_layers_are_four_problems_of_one_run():
    """The issue's case: a unit, a choice, a rule and a catalog name wrong; one run names all four, numbered."""
    result = run("validate", FOUR_MISTAKES)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.splitlines()
    assert lines[0] == f"invalid: 4 problems in {FOUR_MISTAKES}:"
    numbered = [line for line in lines if line[:1].isdigit()]
    assert [line.split(":")[0] for line in numbered] == ["1. lmcache.ddr.size", "2. workload.output.dist",
                                                       "3. serving.tensor_parallel", "4. serving.gpu"]
    assert "unknown unit 'parsecs'" in numbered[0] and "must divide serving.gpus_per_node (8)" in numbered[2]
    assert "     fix: did you mean 'H100-SXM'?" in lines


def test_a_rule_is_checked_beside_a_field_error_in_another_section(tmp_path):
    found = problems(tmp_path, serving__tensor_parallel=3, workload__prompt__dist="zipf")
    assert [p.path for p in found] == ["workload.prompt.dist", "serving.tensor_parallel"]


def test_a_rule_that_reads_a_section_that_did_not_parse_is_left_out(tmp_path):
    """lmcache.ceph with a broken ceph section: the rule 'lmcache.ceph needs a ceph section' would guess, so it is not
    made; the lmcache rules that read only what parsed still are."""
    found = problems(tmp_path, ceph__hosts="three", lmcache__chunk_size=200)
    assert [p.path for p in found] == ["ceph.hosts", "lmcache.chunk_size"]


def test_catalog_names_are_checked_beside_a_rule_problem(tmp_path):
    found = problems(tmp_path, serving__gpu="A100-80G", ceph__pool__pg_num=100, ceph__network="25GbF")
    assert [p.path for p in found] == ["ceph.pool.pg_num", "serving.gpu", "ceph.network"]
    assert found[1].fix == "did you mean 'A100-80GB'?"


def test_the_model_is_fitted_to_its_accelerator_beside_a_workload_mistake(tmp_path):
    found = problems(tmp_path, model="Llama-3.1-70B", serving__gpu="L4", workload__sessions__think_time="20 fortnights")
    assert [p.path for p in found] == ["workload.sessions.think_time", "serving.tensor_parallel"]
    assert "weights" in found[1].message


def test_a_serving_section_with_a_problem_is_not_fitted_as_well(tmp_path):
    """TP 3 on 8 GPUs per node is one mistake: its rule says so, and no second opinion on the heads follows."""
    found = problems(tmp_path, "chat-llama2-13b", serving__gpus_per_node=8, serving__tensor_parallel=3,
                     workload__prompt__dist="zipf")
    assert [p.path for p in found] == ["workload.prompt.dist", "serving.tensor_parallel"]


def test_one_problem_reads_as_before():
    error = SpecError([Problem("serving.gpu", "unknown accelerator 'X'", "X", fix="pick one")], "a.yaml")
    assert error.render() == "a.yaml: 1 problem found\nserving.gpu: unknown accelerator 'X'\n  got: 'X'\n  fix: pick one"


def test_many_problems_are_numbered_with_their_details_under_them():
    error = SpecError([Problem(f"f{i}", "wrong", i, fix="change it") for i in range(10)], "a.yaml")
    lines = error.render().splitlines()
    assert lines[:4] == ["10 problems in a.yaml:", "1.  f0: wrong", "      got: 0", "      fix: change it"]
    assert lines[-3:] == ["10. f9: wrong", "      got: 9", "      fix: change it"]


def test_a_valid_spec_loads_as_before():
    assert load(REPO / "examples" / "chat-llama2-13b.yaml").name == "chat-llama2-13b"
