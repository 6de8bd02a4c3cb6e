"""`kvplan import --inference-perf CONFIG` and `--vllm-bench "vllm bench serve ..."`: the benchmark a team runs, as a
spec's workload, with every option that does not map listed and every difference said.

Load stages and closed-loop concurrency (`workload.stages`, `workload.arrivals.concurrency`) are the load-stages
branch's spec keys: the tests that emit them check the emitted mapping, and validate a whole spec only where it has
neither.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvplan.errors import SpecError
from kvplan.interop import from_inference_perf, from_vllm_bench, spec_of
from kvplan.interop.vllm_bench import DEFAULTS, FLAGS, LISTS, OTHER_DATASETS, SWITCHES
from kvplan.resolve import resolve
from kvplan.sim.workload import requests
from kvplan.spec import from_mapping, read_yaml

from conftest import REPO

KVPLAN = str(Path(sys.executable).parent / "kvplan")
EXAMPLES = REPO / "docs" / "examples" / "inference-perf"
ROLEPLAY = read_yaml(EXAMPLES / "roleplay.yaml")
CODEGEN = read_yaml(EXAMPLES / "codegen.yaml")


def config(**changes) -> dict:
    """The BLIS roleplay run's config with sections replaced (a key set to None is removed)."""
    data = copy.deepcopy(ROLEPLAY)
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


def keys(pairs: list[tuple[str, str]]) -> list[str]:
    return [what for what, _ in pairs]


# ------------------------------------------------------------------ inference-perf: what maps

def test_a_one_stage_shared_prefix_run_is_its_prompt_set_at_its_rate_with_its_request_count():
    imported = from_inference_perf(ROLEPLAY)
    assert imported.workload == {
        "kind": "shared_prefix", "requests": 7200, "arrivals": {"process": "poisson", "rate": "6/s"},
        "shared_prefix": {"num_groups": 10, "num_prompts_per_group": 10, "system_prompt_len": 150, "question_len": 600,
                          "output_len": 251}}
    assert imported.model == "meta-llama/Llama-2-7b-hf"
    assert keys(imported.approximated) == ["load.type constant"]
    assert "rescaled to fill the stage" in imported.approximated[0][1]


def test_the_imported_spec_sends_every_prompt_of_the_set_as_often_as_the_run_did():
    spec = spec_of(from_inference_perf(ROLEPLAY), "H100-SXM", "roleplay")
    reqs = requests(resolve(from_mapping(spec.spec)))
    assert len(reqs) == 7200 and reqs.rejected == 0
    sent = [r.content.parts[1][0][1] for r in reqs]                    # (QUESTION, prompt)
    assert sorted(set(sent)) == list(range(100)) and all(sent.count(p) == 72 for p in range(0, 100, 9))
    assert {r.prompt_tokens for r in reqs} == {750} and {r.output_tokens for r in reqs} == {251}


def test_several_stages_become_workload_stages_and_the_wait_between_them_is_said():
    """Needs the load-stages branch to validate: the emitted mapping is checked here."""
    imported = from_inference_perf(CODEGEN)
    assert imported.workload["arrivals"] == {"process": "poisson"}
    assert imported.workload["stages"] == [{"rate": "5/s", "duration": "600s"}, {"rate": "10/s", "duration": "600s"}]
    assert "requests" not in imported.workload and "duration" not in imported.workload
    assert keys(imported.approximated) == ["load.type constant", "load.interval 1"]
    assert "waits until a stage's requests have finished" in imported.approximated[1][1]


def test_a_poisson_load_keeps_its_duration():
    imported = from_inference_perf(config(load={"type": "poisson", "stages": [{"rate": 2.5, "duration": 90}]}))
    assert imported.workload["duration"] == "90s" and imported.workload["arrivals"] == {"process": "poisson",
                                                                                        "rate": "2.5/s"}
    assert imported.approximated == []


def test_concurrent_stages_become_closed_loop_concurrency():
    """inference-perf's newer load type concurrent. Needs the load-stages branch to validate."""
    one = from_inference_perf(config(load={"type": "concurrent", "stages": [{"num_requests": 500,
                                                                             "concurrency_level": 16}]}))
    assert one.workload["requests"] == 500 and one.workload["arrivals"] == {"concurrency": 16}
    two = from_inference_perf(config(load={"type": "concurrent", "stages": [
        {"num_requests": 500, "concurrency_level": 16}, {"num_requests": 800, "concurrency_level": 64}]}))
    assert two.workload["stages"] == [{"concurrency": 16, "requests": 500}, {"concurrency": 64, "requests": 800}]


def test_the_newer_names_and_options_of_shared_prefix_are_read():
    """A newer inference-perf names the fields num_unique_system_prompts and num_users_per_system_prompt, and has
    seed and enable_multi_turn_chat (the BLIS runs' profile.yaml asked for them; the older version that ran ignored
    them, which is why results/config.yaml is the one to import)."""
    data = config(data={"type": "shared_prefix", "shared_prefix": {
        "num_unique_system_prompts": 11, "num_users_per_system_prompt": 4, "system_prompt_len": 100,
        "question_len": 466, "output_len": 247, "seed": 42, "enable_multi_turn_chat": True}})
    imported = from_inference_perf(data)
    assert imported.workload["seed"] == 42
    assert imported.workload["shared_prefix"] == {"num_groups": 11, "num_prompts_per_group": 4,
                                                  "system_prompt_len": 100, "question_len": 466, "output_len": 247}
    assert "data.shared_prefix.enable_multi_turn_chat" in keys(imported.unmapped)


def test_inference_perfs_defaults_apply_to_what_a_config_leaves_out():
    imported = from_inference_perf({"data": {"type": "shared_prefix", "shared_prefix": {}},
                                    "load": {"stages": [{"rate": 1, "duration": 10}]}})
    assert imported.workload["shared_prefix"] == {"num_groups": 10, "num_prompts_per_group": 10,
                                                  "system_prompt_len": 100, "question_len": 50, "output_len": 50}
    assert imported.workload["requests"] == 10 and imported.model is None


@pytest.mark.parametrize("given, dist, approximated", [
    ({"type": "normal", "mean": 400, "std_dev": 100, "min": 50, "max": 900},
     {"dist": "normal", "mean": 400.0, "cv": 0.25, "min": 50, "max": 900}, []),
    ({"mean": 400, "std_dev": 100}, {"dist": "normal", "mean": 400.0, "cv": 0.25, "min": 10, "max": 1024}, []),
    ({"type": "lognormal", "mean": 200, "variance": 400, "min": 1, "max": 4000},
     {"dist": "lognormal", "mean": 200.0, "cv": 0.1, "min": 1, "max": 4000}, []),
    ({"type": "uniform", "min": 100, "max": 300}, {"dist": "uniform", "min": 100, "max": 300}, []),
    ({"type": "fixed", "mean": 128}, 128, []),
    ({"type": "skew_normal", "mean": 400, "std_dev": 100, "skew": 2}, {"dist": "normal", "mean": 400.0, "cv": 0.25,
                                                                      "min": 10, "max": 1024}, ["skew_normal"]),
    ({"type": "poisson", "mean": 100}, {"dist": "normal", "mean": 100.0, "cv": 0.1, "min": 10, "max": 1024},
     ["poisson"]),
])
def test_a_length_distribution_is_a_dist_with_the_same_bounds(given, dist, approximated):
    data = config(data={"type": "shared_prefix", "shared_prefix": {"question_len": given}})
    imported = from_inference_perf(data)
    assert imported.workload["shared_prefix"]["question_len"] == dist
    assert [k.split()[-1] for k in keys(imported.approximated) if "question_len" in k] == approximated
    shape = imported.workload["shared_prefix"]
    from_mapping({"name": "d", "model": "Llama-2-7B", "serving": {"gpu": "H100-SXM"}, "workload": {
        "kind": "shared_prefix", "requests": 10, "shared_prefix": shape}})


def test_the_legacy_distribution_fields_apply_where_the_length_is_a_number():
    data = config(data={"type": "shared_prefix", "shared_prefix": {
        "question_len": 50, "question_distribution": {"type": "uniform", "min": 10, "max": 90}}})
    assert from_inference_perf(data).workload["shared_prefix"]["question_len"] == {"dist": "uniform", "min": 10,
                                                                                   "max": 90}


def test_a_random_run_is_unique_prompts_of_its_lengths():
    data = config(data={"type": "random", "input_distribution": {"mean": 500, "std_dev": 50, "min": 100, "max": 900,
                                                                 "total_count": 8000},
                        "output_distribution": {"type": "fixed", "mean": 200, "total_count": 8000}})
    imported = from_inference_perf(data)
    assert imported.workload == {"kind": "chat", "requests": 7200, "arrivals": {"process": "poisson", "rate": "6/s"},
                                 "prompt": {"dist": "normal", "mean": 500.0, "cv": 0.1, "min": 100, "max": 900},
                                 "output": 200}
    from_mapping({"name": "r", "model": "Llama-2-7B", "serving": {"gpu": "H100-SXM"}, "workload": imported.workload})


# ------------------------------------------------------------------ inference-perf: what is listed and refused

def test_the_client_its_records_and_its_endpoint_are_listed_never_a_secret():
    data = config(server={"type": "vllm", "model_name": "meta-llama/Llama-2-7b-hf", "base_url": "http://10.1.2.3:8000",
                          "ignore_eos": False, "api_key": "sk-very-secret"},
                  tokenizer={"pretrained_model_name_or_path": "x", "token": "hf_secret_token"},
                  api={"type": "chat", "streaming": False, "headers": {"Authorization": "Bearer sk-header-secret"}})
    imported = from_inference_perf(data)
    listed = keys(imported.unmapped)
    for key in ("report", "storage", "server.base_url", "server.api_key", "tokenizer.token", "api.type chat",
                "api.streaming false", "api.headers", "load.num_workers 224", "load.worker_max_concurrency 100"):
        assert key in listed, key
    assert "server.ignore_eos false" in keys(imported.approximated)
    text = repr(imported)
    assert "secret" not in text and "10.1.2.3" not in text


@pytest.mark.parametrize("changes, where, says", [
    ({"data": {"type": "shareGPT", "path": "sharegpt.json"}}, "data.type", "shareGPT's prompts come from a dataset"),
    ({"data": {"type": "synthetic"}}, "data.type", "come from a dataset, a text corpus or a trace"),
    ({"data": {"type": "nonsense"}}, "data.type", "'nonsense' is not a data type"),
    ({"data": {"type": "shared_prefix"}}, "data.shared_prefix", "needs it"),
    ({"data": {"type": "random", "input_distribution": {"mean": 5}}}, "data.output_distribution", "needs it"),
    ({"data": {"type": "shared_prefix", "shared_prefix": {"num_groups": 0}}}, "data.shared_prefix.num_groups",
     "at least 1"),
    ({"data": {"type": "shared_prefix", "shared_prefix": {"system_prompt_len": 0}}},
     "data.shared_prefix.system_prompt_len", "at least 1 token"),
    ({"data": {"type": "shared_prefix", "shared_prefix": {"question_len": {"type": "zipf"}}}},
     "data.shared_prefix.question_len.type", "'zipf' is not a distribution"),
    ({"load": {"type": "trace_replay", "trace": {"file": "t.jsonl"}}}, "load.type", "takes its timing from a trace"),
    ({"load": {"type": "constant", "sweep": {"type": "linear"}}}, "load.sweep", "finds the stages at run time"),
    ({"load": {"type": "constant", "stages": []}}, "load.stages", "there are no stages"),
    ({"load": {"type": "constant", "stages": [{"rate": 5, "duration": 60}, {"rate": -1, "duration": 60}]}},
     "load.stages[1].rate", "above 0"),
    ({"load": {"type": "concurrent", "stages": [{"num_requests": 5.5, "concurrency_level": 2}]}},
     "load.stages[0].num_requests", "whole number"),
    ({"load": "fast"}, "load", "is not a mapping"),
])
def test_what_kvplan_cannot_know_is_refused_naming_the_key_and_a_fix(changes, where, says):
    with pytest.raises(SpecError) as err:
        from_inference_perf(config(**changes), "config.yaml")
    [problem] = err.value.problems
    assert problem.path == f"config.yaml: {where}" and says in problem.message and problem.fix


def test_a_file_that_is_not_a_mapping_is_refused():
    with pytest.raises(SpecError, match="an inference-perf config is a YAML mapping"):
        from_inference_perf(["not", "a", "config"])


# ------------------------------------------------------------------ vllm bench serve

def bench(*flags: str):
    return from_vllm_bench("vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct " + " ".join(flags))


def test_the_default_random_dataset_sent_all_at_once_is_a_thousand_unique_prompts_in_flight_together():
    imported = bench("--ignore-eos")
    assert imported.workload == {"kind": "chat", "prompt": 1024, "output": 128, "requests": 1000,
                                 "arrivals": {"concurrency": 1000}}
    assert imported.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert imported.unmapped == [] and imported.approximated == []


def test_a_rate_and_a_prefix_every_prompt_starts_with():
    imported = bench("--random-input-len 2000 --random-output-len 100 --random-prefix-len 512 --num-prompts 300",
                     "--request-rate 5 --seed 9 --ignore-eos")
    assert imported.workload == {"kind": "chat", "seed": 9, "prompt": 2000, "output": 100,
                                 "shared_prefixes": {"count": 1, "tokens": 512}, "requests": 300,
                                 "arrivals": {"process": "poisson", "rate": "5/s"}}
    assert keys(imported.approximated) == ["--request-rate 5"]
    spec = from_mapping({"name": "b", "model": "Llama-3.1-8B", "serving": {"gpu": "H100-SXM"},
                         "workload": imported.workload})
    reqs = requests(resolve(spec))
    assert len(reqs) == 300 and all(r.content.parts[0] == ((1, 0), 512) for r in reqs)


@pytest.mark.parametrize("ratio, prompt, output", [
    ("0.1", {"dist": "uniform", "min": 921, "max": 1127}, {"dist": "uniform", "min": 115, "max": 141}),
    ('\'{"input": 0.25}\'', {"dist": "uniform", "min": 768, "max": 1280}, 128),
    ('\'{"output": 0.5}\'', 1024, {"dist": "uniform", "min": 64, "max": 192}),
])
def test_a_range_ratio_draws_lengths_from_vllms_interval(ratio, prompt, output):
    """vLLM's get_sampling_params: integers in [floor(len x (1 - r)), ceil(len x (1 + r))]."""
    imported = bench(f"--random-range-ratio {ratio} --ignore-eos")
    assert (imported.workload["prompt"], imported.workload["output"]) == (prompt, output)
    assert math.floor(1024 * 0.9) == 921 and math.ceil(1024 * 1.1) == 1127


@pytest.mark.parametrize("flags, arrivals", [
    ("--request-rate 4 --burstiness 0.25", {"process": "gamma", "cv": 2.0, "rate": "4/s"}),
    ("--request-rate 4 --burstiness inf", {"process": "constant", "rate": "4/s"}),
    ("--max-concurrency 8", {"concurrency": 8}),
    ("--request-rate 4 --max-concurrency 8", {"process": "poisson", "rate": "4/s"}),
])
def test_rate_burstiness_and_max_concurrency(flags, arrivals):
    """gamma gaps of shape burstiness have cv 1/sqrt(burstiness). A cap on requests in flight under a rate has no
    kvplan equivalent: the rate is imported, the cap listed as not imported."""
    imported = bench(flags, "--ignore-eos")
    assert imported.workload["arrivals"] == arrivals
    assert any(key.startswith("--max-concurrency") for key, _ in imported.unmapped) == ("rate" in arrivals
                                                                                          and "--max-concurrency" in flags)


def test_prefix_repetition_is_a_shared_prefix_set_each_prompt_sent_once():
    imported = bench("--dataset-name prefix_repetition --prefix-repetition-num-prefixes 4 --num-prompts 50",
                     "--prefix-repetition-prefix-len 300 --prefix-repetition-suffix-len 40 --output-len 32",
                     "--request-rate 2 --ignore-eos")
    assert imported.workload == {
        "kind": "shared_prefix", "requests": 48,
        "shared_prefix": {"num_groups": 4, "num_prompts_per_group": 12, "system_prompt_len": 300, "question_len": 40,
                          "output_len": 32},
        "arrivals": {"process": "poisson", "rate": "2/s"}}
    reqs = requests(resolve(from_mapping({"name": "p", "model": "Llama-3.1-8B", "serving": {"gpu": "H100-SXM"},
                                          "workload": imported.workload})))
    assert len({r.content.parts[1][0] for r in reqs}) == 48                   # every prompt once


def test_flags_are_read_as_vllms_parser_reads_them():
    """--flag=value and --flag value, underscores for dashes, lists up to the next flag, switches without a value."""
    imported = from_vllm_bench("vllm bench serve --model=m --random_input_len 64 --metadata a=1 b=2 "
                               "--ignore-eos --num-prompts=10 --save-result --request-rate inf")
    assert imported.workload == {"kind": "chat", "prompt": 64, "output": 128, "requests": 10,
                                 "arrivals": {"concurrency": 10}}
    assert keys(imported.unmapped) == ["--metadata a=1 b=2", "--save-result"]
    older = from_vllm_bench("python benchmarks/benchmark_serving.py --backend vllm --model m --num-prompts 5 "
                            "--ignore-eos")
    assert older.workload["requests"] == 5 and older.unmapped == []


def test_every_flag_that_does_not_map_is_listed_with_the_reason():
    imported = bench("--host 10.0.0.1 --port 8000 --temperature 0 --num-warmups 5 --backend openai-chat",
                     "--sharegpt-output-len 20 --prefix-repetition-num-prefixes 3 --disable-shuffle --swap-space 4",
                     "stray")
    reasons = dict(imported.unmapped)
    assert reasons["--host 10.0.0.1"].startswith("how vllm bench reaches the server")
    assert "sampling" in reasons["--temperature 0"] and "before the measured ones" in reasons["--num-warmups 5"]
    assert "completions" in reasons["--backend openai-chat"]
    assert reasons["--sharegpt-output-len 20"] == "read only by another dataset than this command's"
    assert "read only by the prefix_repetition dataset" in reasons["--prefix-repetition-num-prefixes 3"]
    assert "their order says nothing" in reasons["--disable-shuffle"]
    assert "not a flag of vllm bench serve" in reasons["--swap-space 4"]
    assert "does not take" in reasons["stray"]
    assert keys(imported.approximated) == ["no --ignore-eos"]


@pytest.mark.parametrize("flags, where, says", [
    ("--dataset-name sharegpt --dataset-path sg.json", "--dataset-name", "sharegpt's prompts come from a dataset"),
    ("--dataset-name oddball", "--dataset-name", "'oddball' is not a dataset"),
    ("--ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 9", "--ramp-up-strategy",
     "grows request by request"),
    ("--num-prompts many", "--num-prompts", "whole number"),
    ("--request-rate 0", "--request-rate", "above 0"),
    ("--request-rate fast", "--request-rate", "must be a number"),
    ("--random-range-ratio 1.5", "--random-range-ratio", "[0, 1)"),
    ("--dataset-name prefix_repetition --num-prompts 5", "--num-prompts", "fewer than the 10 prefixes"),
])
def test_what_kvplan_cannot_replay_is_refused_naming_the_flag_and_a_fix(flags, where, says):
    with pytest.raises(SpecError) as err:
        bench(flags)
    [problem] = err.value.problems
    assert problem.path == f"--vllm-bench: {where}" and says in problem.message and problem.fix


def test_a_command_that_cannot_be_split_is_refused():
    with pytest.raises(SpecError, match="cannot split the command line"):
        from_vllm_bench("vllm bench serve --model 'unclosed")


VLLM_PYTHON = Path("/opt/kvplan/vllm-venv/bin/python")
PARSER_FLAGS = """
import json
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args
parser = FlexibleArgumentParser()
add_cli_args(parser)
print(json.dumps([[a.option_strings, str(a.nargs), type(a).__name__, repr(a.default)] for a in parser._actions]))
"""


@pytest.mark.stack
@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="vLLM is not installed at /opt/kvplan/vllm-venv")
def test_every_flag_of_the_installed_vllm_bench_serve_is_known_and_read_with_its_defaults():
    """The flag table is vLLM 0.32's: every flag is classified, switches take no value, lists take several, and the
    defaults the mapping assumes are the parser's."""
    import json

    done = subprocess.run([str(VLLM_PYTHON), "-c", PARSER_FLAGS], capture_output=True, text=True, timeout=300)
    actions = json.loads(done.stdout.strip().splitlines()[-1])
    seen = set()
    for options, nargs, kind, default in actions:
        for flag in options:
            seen.add(flag)
            assert flag in FLAGS or flag.startswith(OTHER_DATASETS), flag
            assert (flag in SWITCHES) == (nargs == "0"), flag
            assert (flag in LISTS) == (nargs in ("*", "+")), flag
            if flag in DEFAULTS:
                assert repr(DEFAULTS[flag]) == default or default == repr(str(DEFAULTS[flag])), (flag, default)
    assert len(seen) > 90 and set(FLAGS) - seen == set(), "flags this module knows that vLLM 0.32 does not have"


# ------------------------------------------------------------------ the command

def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([KVPLAN, "import", *args], capture_output=True, text=True, timeout=120)


def test_a_benchmark_alone_prints_the_workload_and_with_gpu_a_spec_that_validates(tmp_path):
    done = run("--inference-perf", str(EXAMPLES / "roleplay.yaml"))
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout) == {"workload": from_inference_perf(ROLEPLAY).workload}
    assert "\n  server.base_url: " in done.stderr.split("not imported (")[1].split("imported with a difference (")[0]
    assert "\n  load.type constant: " in done.stderr.split("imported with a difference (")[1]
    out = tmp_path / "spec.yaml"
    done = run("--inference-perf", str(EXAMPLES / "roleplay.yaml"), "--gpu", "H100-SXM", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(out.read_text())["model"] == "Llama-2-7B"
    assert subprocess.run([KVPLAN, "validate", str(out)], capture_output=True).returncode == 0


def test_the_serving_from_vllm_and_the_workload_from_the_benchmark():
    done = run("--vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 64", "--gpu", "H100-SXM",
               "--vllm-bench", "vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct --request-rate 3 "
                               "--num-prompts 200 --ignore-eos")
    assert done.returncode == 0, done.stderr
    spec = yaml.safe_load(done.stdout)
    assert spec["serving"]["max_num_seqs"] == 64 and spec["workload"]["requests"] == 200
    assert done.stdout.startswith("# made by kvplan import from a vLLM command line and a vllm bench command\n")


@pytest.mark.parametrize("args, says", [
    (["--inference-perf", "a.yaml", "--vllm-bench", "vllm bench serve"], "give one of --inference-perf"),
    ([], "give --vllm"),
    (["--vllm", "vllm serve meta-llama/Llama-3.1-8B-Instruct"], "--gpu"),
    (["--vllm-bench", "vllm bench serve", "--lmcache", "lm.yaml"], "LMCache's settings go with the serving"),
])
def test_the_command_says_which_options_go_together(args, says):
    done = run(*args)
    assert done.returncode == 2 and says in done.stderr


@pytest.mark.parametrize("args, says", [
    (["--vllm-bench", "vllm bench serve --dataset-name sharegpt"], "sharegpt's prompts come from a dataset"),
    (["--vllm-bench", "vllm bench serve", "--gpu", "H100-SXM"], "the benchmark names no model"),
    (["--vllm-bench", "vllm bench serve --model not-a/model", "--gpu", "H100-SXM"], "the catalog has no model"),
])
def test_a_benchmark_kvplan_cannot_import_is_an_error_with_a_fix(args, says):
    done = run(*args)
    assert done.returncode == 1 and says in done.stderr and "fix:" in done.stderr and "Traceback" not in done.stderr
