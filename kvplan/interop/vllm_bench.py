"""A `vllm bench serve ...` command line as a spec's workload: the prompts its dataset makes, how many, and when they
are sent; every flag that does not map is listed with the reason.

Read from vLLM 0.32 (the install kvplan's stack uses, /opt/kvplan/vllm-venv): vllm/benchmarks/serve.py
(`add_cli_args`, every flag; `get_request`, the arrival times; `benchmark`, the --max-concurrency semaphore),
vllm/benchmarks/datasets/datasets.py (`add_dataset_parser`, `get_samples`, `RandomDataset.sample`,
`PrefixRepetitionRandomDataset.sample`) and vllm/benchmarks/datasets/utils.py (`get_sampling_params`, the random
lengths). tests/test_import_benchmarks.py holds FLAGS to that parser's flags.

What maps:

- --dataset-name random (the default) -> kind chat with neither sessions nor shared prefixes: --num-prompts unique
  prompts of --random-input-len tokens (--input-len overrides it) and --random-output-len outputs (--output-len),
  each drawn uniformly from [floor(len x (1 - r)), ceil(len x (1 + r))] with r the --random-range-ratio (one number,
  or JSON {"input": r, "output": r}). vLLM draws the input around len minus the tokenizer's special tokens, which the
  server adds back, so the server sees prompts of about len tokens, as kvplan's. A --random-prefix-len prefix that
  every prompt starts with -> workload.shared_prefixes {count: 1, tokens: prefix_len}.
- --dataset-name prefix_repetition -> kind shared_prefix: --prefix-repetition-num-prefixes groups of
  num_prompts // num_prefixes prompts, each --prefix-repetition-prefix-len + --prefix-repetition-suffix-len tokens,
  --prefix-repetition-output-len out, each sent once (requests: groups x prompts) in a shuffled order.
- --request-rate r (default inf) and --burstiness b (default 1): gamma gaps of shape b and mean 1/r -> arrivals
  poisson (b = 1), gamma with cv 1/sqrt(b), or constant (b = inf); vLLM rescales the gaps so that the last request
  leaves at num_prompts / r, which kvplan does not (listed as approximated). A rate of inf sends every request at
  time 0: arrivals.concurrency num_prompts. --max-concurrency n -> arrivals.concurrency n; with a finite rate it
  caps the requests in flight, which kvplan's open or closed arrivals cannot say: listed as not imported.
- --seed -> workload.seed (kvplan's draws are its own: the same seed does not give vLLM's prompts).
- Without --ignore-eos a reply may stop early, at the model's end of sequence; kvplan generates every output token
  (listed as approximated).

What does not: datasets whose prompts come from files or Hugging Face (sharegpt, hf, custom, burstgpt, ...) and a
--ramp-up-strategy rate are refused (SpecError): replay the run's own per-request log (kind: replay). Flags about how
vllm bench reaches the server or reports the run, sampling parameters and the rest are listed as not imported.
"""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

from ..errors import Problem, SpecError
from .imported import ImportedWorkload, read_int

SWITCHES = {"--trust-remote-code", "--no-stream", "--no-oversample", "--skip-chat-template", "--enable-multimodal-chat",
            "--disable-shuffle", "--custom-ensure-client-side-data", "--no-reranker", "--use-beam-search",
            "--disable-tqdm", "--profile", "--save-result", "--save-detailed", "--append-result", "--ignore-eos",
            "--self-timed", "--no-self-timed", "--skip-tokenizer-init", "--insecure", "--plot-timeline",
            "--plot-dataset-stats", "-h", "--help"}
"""Flags of vllm bench serve that take no value."""
LISTS = {"--header", "--metadata", "--goodput", "--lora-modules"}
"""Flags that take every value up to the next flag."""
DATASET_FLAGS = {"random": {"--input-len", "--random-input-len", "--random-output-len", "--random-range-ratio",
                            "--random-prefix-len"},
                 "prefix_repetition": {"--prefix-repetition-prefix-len", "--prefix-repetition-suffix-len",
                                       "--prefix-repetition-num-prefixes", "--prefix-repetition-output-len"}}
"""Flags only one of the datasets kvplan imports reads."""
READ = {"--dataset-name", "--num-prompts", "--seed", "--model", "--output-len", "--request-rate", "--burstiness",
        "--max-concurrency", "--ignore-eos", "--ramp-up-strategy", "--ramp-up-start-rps", "--ramp-up-end-rps",
        "--disable-shuffle", *DATASET_FLAGS["random"], *DATASET_FLAGS["prefix_repetition"]}
"""Flags the mapping reads (the module docstring says how)."""
CLIENT = {flag: "how vllm bench reaches the server or reports the run: nothing to simulate" for flag in (
    "--label", "--base-url", "--host", "--port", "--endpoint", "--header", "--save-result", "--save-detailed",
    "--append-result", "--metadata", "--result-dir", "--result-filename", "--percentile-metrics",
    "--metric-percentiles",
    "--goodput", "--disable-tqdm", "--request-id-prefix", "--ready-check-timeout-sec", "--insecure", "--plot-timeline",
    "--timeline-itl-thresholds", "--plot-dataset-stats", "--profile", "--tokenizer", "--tokenizer-mode",
    "--trust-remote-code", "--served-model-name", "--skip-tokenizer-init", "-h", "--help")}
SAMPLING = {flag: "a sampling parameter: kvplan's step times do not depend on sampling" for flag in (
    "--top-p", "--top-k", "--min-p", "--temperature", "--frequency-penalty", "--presence-penalty",
    "--repetition-penalty")}
OTHER = {
    "--backend": "another request format than completions: kvplan simulates, and kvplan bench sends, completions "
                 "of the prompt alone",
    "--use-beam-search": "kvplan simulates one sequence per request",
    "--logprobs": "kvplan has no setting for it",
    "--num-warmups": "requests vllm bench sends before the measured ones; kvplan has no setting for them",
    "--probe-request-rate": "a second stream of one-token probes; kvplan simulates one workload",
    "--lora-modules": "LoRA adapters, which kvplan does not simulate",
    "--lora-assignment": "LoRA adapters, which kvplan does not simulate",
    "--self-timed": "timing from a trace dataset, which kvplan does not read",
    "--no-self-timed": "timing from a trace dataset, which kvplan does not read",
    "--chat-template-kwargs": "a chat template adds tokens kvplan does not know of",
    "--extra-body": "extra request parameters: kvplan has no setting for them",
    "--no-stream": "how vllm bench loads a dataset: nothing to simulate",
    "--dataset-path": "a dataset file; the random and prefix_repetition datasets read none",
    "--no-oversample": "how vllm bench samples a dataset file",
    "--skip-chat-template": "how vllm bench formats a dataset's prompts",
    "--enable-multimodal-chat": "kvplan simulates text prompts",
    "--random-batch-size": "embedding batches, which kvplan does not simulate",
    "--no-reranker": "reranking, which kvplan does not simulate",
}
"""Flags kvplan has no setting for, with the reason."""
COMPLETIONS = ("openai", "vllm")
"""--backend values that send completions (vllm/benchmarks/lib/endpoint_request_func.py, ASYNC_REQUEST_FUNCS), as
kvplan bench does."""
OTHER_DATASETS = ("--custom-", "--spec-bench-", "--sharegpt-", "--timed-trace-", "--blazedit-", "--asr-", "--hf-",
                  "--bfcl-", "--speed-bench-", "--random-mm-")
"""Prefixes of flags that only another dataset reads."""
FLAGS = SWITCHES | LISTS | READ | set(CLIENT) | set(SAMPLING) | set(OTHER)
"""Every flag of vllm bench serve this module knows, but for those of OTHER_DATASETS."""
DEFAULTS: dict[str, Any] = {
    "--dataset-name": "random", "--num-prompts": 1000, "--seed": 0, "--random-input-len": 1024,
    "--random-output-len": 128, "--random-range-ratio": "0.0", "--random-prefix-len": 0,
    "--prefix-repetition-prefix-len": 256, "--prefix-repetition-suffix-len": 256,
    "--prefix-repetition-num-prefixes": 10,
    "--prefix-repetition-output-len": 128, "--request-rate": math.inf, "--burstiness": 1.0}
"""vLLM 0.32's defaults of the flags the mapping reads (tests/test_import_benchmarks.py holds them to its parser)."""
DATASETS_REFUSED = ("sharegpt", "burstgpt", "random-mm", "random-rerank", "hf", "custom", "custom_audio",
                    "custom_image", "spec_bench", "speed_bench", "timed_trace")
"""--dataset-name values whose prompts come from files, Hugging Face or images (vLLM 0.32's choices)."""


def from_vllm_bench(command: str) -> ImportedWorkload:
    """The workload a `vllm bench serve ...` command line sends, and what did not map."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise _refused("--vllm-bench", f"cannot split the command line: {exc}",
                       "quote the whole command once: --vllm-bench \"vllm bench serve --model M ...\"") from None
    flags, out = _flags(_after_entrypoint(words)), ImportedWorkload({})
    for flag, value in flags.items():
        shown = flag if value is None else f"{flag} {value}"
        if flag in READ or (flag == "--backend" and value in COMPLETIONS):
            continue
        if flag.startswith(OTHER_DATASETS):
            out.unmapped.append((shown, "read only by another dataset than this command's"))
        elif flag in CLIENT or flag in SAMPLING or flag in OTHER:
            out.unmapped.append((shown, {**CLIENT, **SAMPLING, **OTHER}[flag]))
        elif flag.startswith("-"):
            out.unmapped.append((shown, "not a flag of vllm bench serve (vLLM 0.32)"))
        else:
            out.unmapped.append((shown, "a word vllm bench serve does not take (no flag before it takes a value)"))
    out.model = flags.get("--model")
    if "--ramp-up-strategy" in flags:
        raise _refused("--ramp-up-strategy", "a rate that grows request by request: kvplan's arrivals keep one rate "
                       "(or one per load stage)", "approximate the ramp with workload.stages by hand, or replay the "
                       "run's per-request log (kind: replay)")
    prompts = _int(flags, "--num-prompts", low=1)
    dataset = flags.get("--dataset-name", DEFAULTS["--dataset-name"])
    if dataset == "random":
        workload, sent = _random(flags), prompts
    elif dataset == "prefix_repetition":
        workload = _prefix_repetition(flags, prompts, out)
        sent = workload["shared_prefix"]["num_groups"] * workload["shared_prefix"]["num_prompts_per_group"]
    elif dataset in DATASETS_REFUSED:
        raise _refused("--dataset-name", f"{dataset}'s prompts come from a dataset the command only names, so kvplan "
                       "cannot know their lengths or what they share", "replay the run's per-request log (kind: "
                       "replay, docs/benchmarks.md), or describe the prompts with kind chat by hand")
    else:
        raise _refused("--dataset-name", f"'{dataset}' is not a dataset of vllm bench serve (vLLM 0.32)",
                       "use random or prefix_repetition")
    for other, read_by_it in DATASET_FLAGS.items():
        if other != dataset:
            why = f"read only by the {other} dataset, and this command's is {dataset}"
            out.unmapped += [(f"{flag} {flags[flag]}", why) for flag in flags if flag in read_by_it]
    if "--disable-shuffle" in flags and dataset != "prefix_repetition":
        out.unmapped.append(("--disable-shuffle", "the random dataset's prompts share nothing: their order says "
                                                  "nothing"))
    if "--seed" in flags:
        workload = {"seed": _int(flags, "--seed", low=0), **workload}
    workload = {"kind": workload.pop("kind"), **workload}
    workload.update(_arrivals(flags, sent, out))
    if "--ignore-eos" not in flags:
        out.approximated.append(("no --ignore-eos", "a reply may stop before its output length, at the model's end "
                                 "of sequence; kvplan generates every output token"))
    out.workload = workload
    return out


def _after_entrypoint(words: list[str]) -> list[str]:
    """The arguments after `vllm bench serve` (or an older `python benchmarks/benchmark_serving.py`)."""
    for k, word in enumerate(words):
        if word == "serve" and k > 1 and words[k - 1] == "bench":
            return words[k + 1:]
        if word.endswith("benchmark_serving.py"):
            return words[k + 1:]
    return words


def _flags(words: list[str]) -> dict[str, str | None]:
    """flag -> its value (None for a switch; the words joined by spaces for a list), in the order given. Flags are
    written as vLLM's parser reads them: --flag value or --flag=value, underscores or dashes alike."""
    flags: dict[str, str | None] = {}
    k = 0
    while k < len(words):
        word = words[k]
        k += 1
        if not word.startswith("-"):
            flags[word] = None                       # a stray word: listed as not a flag
            continue
        name, _, value = word.partition("=")
        flag = "--" + name.lstrip("-").replace("_", "-") if name.startswith("--") else name
        if "=" in word:
            flags[flag] = value
        elif flag in SWITCHES:
            flags[flag] = None
        elif flag in LISTS:
            values = []
            while k < len(words) and not words[k].startswith("--"):
                values.append(words[k])
                k += 1
            flags[flag] = " ".join(values)
        elif k < len(words) and not words[k].startswith("--"):
            flags[flag] = words[k]
            k += 1
        else:
            flags[flag] = None
    return flags


def _random(flags: dict) -> dict[str, Any]:
    in_len = _int(flags, "--input-len", low=1) or _int(flags, "--random-input-len", low=1)
    out_len = _int(flags, "--output-len", low=1) or _int(flags, "--random-output-len", low=1)
    r_in, r_out = _range_ratio(flags.get("--random-range-ratio", DEFAULTS["--random-range-ratio"]))
    workload: dict[str, Any] = {"kind": "chat", "prompt": _around(in_len, r_in), "output": _around(out_len, r_out)}
    prefix = _int(flags, "--random-prefix-len", low=0)
    if prefix:
        workload["shared_prefixes"] = {"count": 1, "tokens": prefix}
    return workload


def _around(length: int, ratio: float) -> Any:
    """vLLM's uniform length in [floor(length x (1 - ratio)), ceil(length x (1 + ratio))] as a spec Dist."""
    if ratio == 0:
        return length
    return {"dist": "uniform", "min": max(1, math.floor(length * (1 - ratio))), "max": math.ceil(length * (1 + ratio))}


def _range_ratio(text: str) -> tuple[float, float]:
    """--random-range-ratio: one number for input and output, or JSON {"input": r, "output": r}; each in [0, 1)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict) and set(value) <= {"input", "output"}:
        pair = (value.get("input", 0.0), value.get("output", 0.0))
    elif type(value) in (int, float):
        pair = (value, value)
    else:
        pair = ()
    if len(pair) != 2 or not all(type(r) in (int, float) and 0 <= r < 1 for r in pair):
        raise _refused("--random-range-ratio", "must be a number in [0, 1), or JSON {\"input\": r, \"output\": r}",
                       "write --random-range-ratio 0.1")
    return float(pair[0]), float(pair[1])


def _prefix_repetition(flags: dict, prompts: int, out: ImportedWorkload) -> dict[str, Any]:
    groups = _int(flags, "--prefix-repetition-num-prefixes", low=1)
    if prompts < groups:
        raise _refused("--num-prompts", f"{prompts} prompts are fewer than the {groups} prefixes (vllm bench refuses "
                       "it too)", f"give at least --num-prompts {groups}")
    output = _int(flags, "--output-len", low=1) or _int(flags, "--prefix-repetition-output-len", low=1)
    if "--disable-shuffle" in flags:
        out.unmapped.append(("--disable-shuffle", "vllm bench then sends the prompts group by group; kvplan sends them "
                             "in a shuffled order"))
    per_group = prompts // groups
    return {"kind": "shared_prefix", "requests": groups * per_group,
            "shared_prefix": {"num_groups": groups, "num_prompts_per_group": per_group,
                              "system_prompt_len": _int(flags, "--prefix-repetition-prefix-len", low=1),
                              "question_len": _int(flags, "--prefix-repetition-suffix-len", low=1),
                              "output_len": output}}


def _arrivals(flags: dict, sent: int, out: ImportedWorkload) -> dict[str, Any]:
    """workload.requests (for the random dataset) and workload.arrivals from --request-rate, --burstiness and
    --max-concurrency."""
    rate = _float(flags, "--request-rate")
    burstiness = _float(flags, "--burstiness")
    limit = _int(flags, "--max-concurrency", low=1)
    if not rate > 0 or not burstiness > 0:
        raise _refused("--request-rate" if not rate > 0 else "--burstiness", "must be above 0", "give a value above 0")
    if math.isinf(rate):
        return {"requests": sent, "arrivals": {"concurrency": limit or sent}}
    if math.isinf(burstiness):
        arrivals: dict[str, Any] = {"process": "constant"}
    elif burstiness == 1:
        arrivals = {"process": "poisson"}
    else:
        cv = 1 / math.sqrt(burstiness)
        if not 0.001 <= cv <= 100:
            raise _refused("--burstiness", f"{burstiness:g} gives gaps with a cv of {cv:.3g}; kvplan draws 0.001 "
                           "to 100",
                           "give --burstiness between 1e-4 and 1e6")
        arrivals = {"process": "gamma", "cv": round(cv, 6)}
    arrivals["rate"] = f"{rate:g}/s"
    if limit is not None:
        out.unmapped.append((f"--max-concurrency {limit}", "a cap on requests in flight under a rate: kvplan's "
                             "arrivals are either open (a rate) or closed (a concurrency), so this run sends at the rate "
                             "with no cap"))
    if not math.isinf(burstiness):
        spread = 100 / math.sqrt(burstiness * sent)              # the cv of a sum of `sent` gamma gaps of shape b
        out.approximated.append((f"--request-rate {rate:g}", f"vllm bench rescales its gaps so that the last of the "
                                 f"{sent} requests leaves at {sent / rate:g} s; kvplan does not (its last arrival "
                                 f"varies by about {spread:.2g} %)"))
    return {"requests": sent, "arrivals": arrivals}


def _int(flags: dict, flag: str, low: int) -> int | None:
    """A whole-number flag's value, its default (DEFAULTS; None for none) when the command does not give it."""
    if flag not in flags:
        return DEFAULTS.get(flag)
    try:
        value = read_int(str(flags[flag]))
    except ValueError:
        value = None
    if value is None or value < low:
        raise _refused(flag, f"must be a whole number of at least {low}", f"write {flag} {max(low, 1)}")
    return value


def _float(flags: dict, flag: str) -> float:
    if flag not in flags:
        return DEFAULTS[flag]
    try:
        return float(str(flags[flag]))
    except ValueError:
        raise _refused(flag, "must be a number", f"write {flag} 2.5") from None


def _refused(flag: str, what: str, fix: str) -> SpecError:
    return SpecError([Problem(f"--vllm-bench: {flag}", what, fix=fix)])
