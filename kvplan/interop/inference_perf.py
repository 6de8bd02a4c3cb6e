"""An inference-perf configuration (its config.yaml) as a spec's workload: the prompts its data generator makes and the
load stages it sends them in; every key that does not map is listed with the reason.

Read from kubernetes-sigs/inference-perf at two commits: e8e0aa99c57f2ffa0912df7ba1fbd2a8a596a041, the version the
BLIS runs used (inference_perf/config.py: Config, DataConfig, SharedPrefix, Distribution, LoadConfig, LoadStage;
inference_perf/datagen/shared_prefix_datagen.py, random_datagen.py, synthetic_datagen.py; inference_perf/loadgen/
load_generator.py and load_timer.py), and 7de5ef2ed6f7934e0ecbc8297e593f79e68430c0, the newest read
(inference_perf/config/datagen/config.py: SharedPrefix with the aliases num_unique_system_prompts and
num_users_per_system_prompt, lengths that are a number or a Distribution, seed, enable_multi_turn_chat, multimodal;
inference_perf/config/common.py: Distribution with a `type`; inference_perf/config/loadgen/config.py: load types
concurrent, trace_replay and trace_session_replay; inference_perf/utils/numeric/distribution/utils.py:
sample_from_distribution).

What maps:

- data.type shared_prefix -> kind shared_prefix (kvplan.sim.shapes, which cites the generator): num_groups,
  num_prompts_per_group, system_prompt_len, question_len, output_len (a number, or a Distribution: see below; the
  legacy question_distribution and output_distribution where the length itself is a number), seed -> workload.seed.
- data.type random -> kind chat with neither sessions nor shared prefixes: unique prompts of input_distribution's
  lengths, output_distribution's outputs.
- A Distribution (min 10, max 1024, mean 512, std_dev 200, type normal unless it says) -> a kvplan Dist with the same
  bounds: normal and lognormal with cv = std_dev / mean, uniform, fixed (its mean). skew_normal is drawn as normal
  (its skew dropped) and poisson as normal with std_dev sqrt(mean): both listed as approximated.
- load.type constant or poisson with stages of rate and duration -> Poisson arrivals at the stage's rate: one stage
  as workload.arrivals.rate with requests (constant: exactly int(rate x duration), as inference-perf sends) or
  duration (poisson); several as workload.stages [{rate, duration}]. inference-perf's constant load draws exactly
  rate x duration exponential gaps rescaled to fill the stage, and waits for a stage's requests to finish, then
  load.interval seconds, before the next stage: both listed as approximated.
- load.type concurrent with stages of num_requests and concurrency_level -> closed-loop concurrency: one stage as
  workload.arrivals.concurrency with requests, several as workload.stages [{concurrency, requests}].

What does not: data types whose prompts come from a dataset, a corpus or a trace (shareGPT, synthetic, cnn_dailymail,
..., the trace replays) and load types that replay a trace's timing are refused (SpecError): a run's own per-request
log replays them exactly (kind: replay). The client's worker pool, timeouts, circuit breakers, where it sends requests
and what it records are listed as not imported.

An older inference-perf ignores keys it does not know (the BLIS runs' profile asked for num_unique_system_prompts 11
and got the default 10 groups): import the config inference-perf wrote into its report folder (results/config.yaml),
which is the configuration as the version that ran read it.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import Problem, SpecError
from .imported import ImportedWorkload

DISTRIBUTION_DEFAULTS = {"min": 10, "max": 1024, "mean": 512.0, "std_dev": 200.0, "type": "normal"}
"""inference-perf's Distribution fields where a config leaves them out."""
SHARED_PREFIX_DEFAULTS = {"num_groups": 10, "num_prompts_per_group": 10, "system_prompt_len": 100, "question_len": 50,
                          "output_len": 50}
"""inference-perf's SharedPrefix defaults (both commits)."""
ALIASES = {"num_unique_system_prompts": "num_groups", "num_users_per_system_prompt": "num_prompts_per_group"}
"""The newer names of two SharedPrefix fields."""
DATASETS = {"mock", "shareGPT", "synthetic", "cnn_dailymail", "infinity_instruct", "billsum_conversations",
            "otel_trace_replay", "weka_trace_replay", "conversation_replay", "visionarena"}
"""data.type values whose prompts come from a dataset, a text corpus or a trace, which kvplan cannot know."""
RECORDS = {"metrics": "the metrics inference-perf scrapes from the server", "report": "what inference-perf reports",
           "storage": "where inference-perf writes its report", "circuit_breakers": "when inference-perf stops a stage"}
"""Top-level sections about the client's records, not the traffic."""
CLIENT = {"num_workers": "the client's worker processes",
          "worker_max_concurrency": "a cap on each worker's requests in flight: kvplan's open-loop arrivals have none",
          "worker_max_tcp_connections": "the client's connection pool", "circuit_breakers": "when the client stops",
          "request_timeout": "when the client gives up on a request", "base_seed": "the client's seed: kvplan draws "
          "from workload.seed", "lora_traffic_split": "LoRA adapters, which kvplan does not simulate"}
"""load keys about the client itself."""


def from_inference_perf(config: Any, source: str = "--inference-perf") -> ImportedWorkload:
    """The workload an inference-perf configuration (a parsed config.yaml) sends, and what did not map."""
    if not isinstance(config, dict):
        raise _refused(source, "", "an inference-perf config is a YAML mapping (api, data, load, server, ...)",
                       "give the config.yaml inference-perf runs with (or results/config.yaml of its report)")
    out = ImportedWorkload({})
    for key in config:
        if key in RECORDS and config[key] not in (None, [], {}):
            out.unmapped.append((key, f"{RECORDS[key]}: nothing to simulate"))
        elif key not in RECORDS and key not in ("api", "data", "load", "server", "tokenizer"):
            out.unmapped.append((key, "not a section of inference-perf's config that kvplan reads"))
    _api(_section(config, "api", source), out)
    _server(_section(config, "server", source), _section(config, "tokenizer", source), out)
    data = _data(_section(config, "data", source), source, out)
    load = _load(_section(config, "load", source), source, out)
    out.workload = {"kind": data.pop("kind"), **({"seed": data.pop("seed")} if "seed" in data else {}), **load, **data}
    return out


def _section(config: dict, key: str, source: str) -> dict:
    value = config.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refused(source, key, "is not a mapping", f"write {key}: as inference-perf's config has it")
    return value


def _api(api: dict, out: ImportedWorkload) -> None:
    if api.get("type", "completion") != "completion":
        out.unmapped.append((f"api.type {api['type']}", "chat completions wrap every prompt in the model's chat "
                             "template; kvplan simulates, and kvplan bench sends, completions of the prompt alone"))
    if api.get("streaming") is False:
        out.unmapped.append(("api.streaming false", "without streaming inference-perf measures no time to first token; "
                             "kvplan bench always streams"))
    if api.get("headers"):
        out.unmapped.append(("api.headers", "headers of each request: nothing to simulate"))
    for key in sorted(set(api) - {"type", "streaming", "headers"}):
        if api[key] not in (None, [], {}):
            out.unmapped.append((f"api.{key}", "kvplan has no setting for it"))


def _server(server: dict, tokenizer: dict, out: ImportedWorkload) -> None:
    out.model = server.get("model_name") or tokenizer.get("pretrained_model_name_or_path")
    if server.get("type", "vllm") != "vllm":
        out.unmapped.append((f"server.type {server['type']}", "kvplan simulates and deploys vLLM"))
    if "base_url" in server:
        out.unmapped.append(("server.base_url", "where inference-perf sends requests: kvplan bench --target"))
    if server.get("ignore_eos", True) is False:
        out.approximated.append(("server.ignore_eos false", "a reply may end before output_len, where the model ends "
                                 "it; kvplan generates every output token"))
    for key in ("api_key", "cert_path", "key_path"):
        if server.get(key):
            out.unmapped.append((f"server.{key}", "how inference-perf authenticates: kvplan bench --api-key"))
    read = {"type", "model_name", "base_url", "ignore_eos", "api_key", "cert_path", "key_path"}
    for key in sorted(set(server) - read):
        out.unmapped.append((f"server.{key}", "kvplan has no setting for it"))
    for key in sorted(set(tokenizer) - {"pretrained_model_name_or_path"}):
        if tokenizer[key] is not None:
            out.unmapped.append((f"tokenizer.{key}", "kvplan sends token ids, which need no tokenizer"))


def _data(data: dict, source: str, out: ImportedWorkload) -> dict[str, Any]:
    """The workload's kind and prompts, from inference-perf's data section."""
    kind = data.get("type", "mock")
    if kind in DATASETS:
        raise _refused(source, "data.type", f"{kind}'s prompts come from a dataset, a text corpus or a trace that the "
                       "config only names, so kvplan cannot know what they share",
                       "replay the run's per-request log (kind: replay, docs/benchmarks.md), or describe the prompts "
                       "with kind shared_prefix or chat by hand")
    for key in sorted(set(data) - {"type", "shared_prefix", "input_distribution", "output_distribution"}):
        if data[key] not in (None, False, [], {}):
            out.unmapped.append((f"data.{key}", f"the {kind} generator does not read it, or kvplan has no setting "
                                                "for it"))
    if kind == "random":
        for key in ("input_distribution", "output_distribution"):
            if not isinstance(data.get(key), dict):
                raise _refused(source, f"data.{key}", "the random generator needs it",
                               f"give data.{key}: {{mean: ...}}")
        if data.get("shared_prefix") is not None:
            out.unmapped.append(("data.shared_prefix", "the random generator does not read it"))
        return {"kind": "chat", "prompt": _length(data["input_distribution"], "data.input_distribution", source, out),
                "output": _length(data["output_distribution"], "data.output_distribution", source, out)}
    if kind != "shared_prefix":
        raise _refused(source, "data.type", f"'{kind}' is not a data type kvplan knows",
                       "use shared_prefix or random (kvplan import reads inference-perf's own data types)")
    for key in ("input_distribution", "output_distribution"):
        if data.get(key) is not None:
            out.unmapped.append((f"data.{key}", "the shared_prefix generator does not read it (its lengths are "
                                                "data.shared_prefix's)"))
    shape = data.get("shared_prefix")
    if not isinstance(shape, dict):
        raise _refused(source, "data.shared_prefix", "data.type shared_prefix needs it",
                       "add data.shared_prefix: {num_groups: 10, num_prompts_per_group: 10, ...}")
    given = {ALIASES.get(k, k): v for k, v in shape.items()}
    section: dict[str, Any] = {}
    for key in ("num_groups", "num_prompts_per_group"):
        value = given.get(key, SHARED_PREFIX_DEFAULTS[key])
        if type(value) is not int or value < 1:
            raise _refused(source, f"data.shared_prefix.{key}", "must be a whole number of at least 1",
                           f"write {key}: 10")
        section[key] = value
    for key, legacy in (("system_prompt_len", None), ("question_len", "question_distribution"),
                        ("output_len", "output_distribution")):
        value = given.get(key, SHARED_PREFIX_DEFAULTS[key])
        where = f"data.shared_prefix.{key}"
        if not isinstance(value, dict) and legacy is not None and isinstance(given.get(legacy), dict):
            value, where = given[legacy], f"data.shared_prefix.{legacy}"
        section[key] = _length(value, where, source, out)
    result: dict[str, Any] = {"kind": "shared_prefix", "shared_prefix": section}
    if given.get("seed") is not None:
        if type(given["seed"]) is not int or given["seed"] < 0:
            raise _refused(source, "data.shared_prefix.seed", "must be a whole number of at least 0", "write seed: 42")
        result["seed"] = given["seed"]
    if given.get("enable_multi_turn_chat"):
        out.unmapped.append(("data.shared_prefix.enable_multi_turn_chat", "each group's prompts as the turns of one "
                             "conversation: kvplan's shared_prefix sends each prompt on its own (kind chat with "
                             "sessions draws conversations)"))
    if given.get("multimodal") is not None:
        out.unmapped.append(("data.shared_prefix.multimodal", "kvplan simulates text prompts"))
    known = {*SHARED_PREFIX_DEFAULTS, "seed", "enable_multi_turn_chat", "multimodal", "question_distribution",
             "output_distribution"}
    for key in sorted(set(given) - known):
        out.unmapped.append((f"data.shared_prefix.{key}", "not a key of inference-perf's shared_prefix"))
    return result


def _length(value: Any, where: str, source: str, out: ImportedWorkload) -> Any:
    """A length in tokens (a number or an inference-perf Distribution) as a spec Dist: a bare number, or a mapping."""
    if type(value) is int:
        if value < 1:
            raise _refused(source, where, f"is {value}: kvplan's prompts and outputs are at least 1 token",
                           "give at least 1 token")
        return value
    if not isinstance(value, dict):
        raise _refused(source, where, "is neither a whole number nor a distribution",
                       "write a number of tokens, or {type: normal, mean: ..., std_dev: ..., min: ..., max: ...}")
    d = {**DISTRIBUTION_DEFAULTS, **value}
    for key in sorted(set(value) - {*DISTRIBUTION_DEFAULTS, "variance", "skew", "total_count"}):
        out.unmapped.append((f"{where}.{key}", "not a field of inference-perf's Distribution"))
    try:
        low, high, mean = int(d["min"]), int(d["max"]), float(d["mean"])
        std = math.sqrt(float(d["variance"])) if d.get("variance") is not None else float(d["std_dev"])
    except (TypeError, ValueError):
        raise _refused(source, where, "has a min, max, mean, std_dev or variance that is not a number",
                       "write them as numbers") from None
    if not 0 <= low <= high or high < 1:
        raise _refused(source, where, "needs 0 <= min <= max and max >= 1", "fix min and max")
    kind = d["type"]
    if kind == "fixed":
        return _length(int(mean), where, source, out)
    if kind == "uniform":
        return {"dist": "uniform", "min": low, "max": high}
    if kind not in ("normal", "lognormal", "skew_normal", "poisson"):
        raise _refused(source, f"{where}.type", f"'{kind}' is not a distribution inference-perf draws",
                       "use normal, lognormal, uniform, fixed, skew_normal or poisson")
    if mean <= 0:
        raise _refused(source, where, "has a mean of 0 or less", "give a mean above 0")
    if kind == "skew_normal" and d.get("skew"):
        out.approximated.append((f"{where} skew_normal", f"drawn as a normal distribution: kvplan has no skew "
                                 f"(skew {d['skew']} dropped)"))
    if kind == "poisson":
        std = math.sqrt(mean)
        out.approximated.append((f"{where} poisson", f"drawn as a normal distribution with the same mean and std_dev "
                                 f"sqrt(mean) = {std:.3g}"))
    cv = std / mean
    if cv > 10:
        raise _refused(source, where, f"spreads more (std_dev / mean = {cv:.3g}) than kvplan draws (10)",
                       "give a std_dev of at most 10 x the mean")
    return {"dist": "lognormal" if kind == "lognormal" else "normal", "mean": mean, "cv": round(cv, 6),
            "min": low, "max": high}


def _load(load: dict, source: str, out: ImportedWorkload) -> dict[str, Any]:
    """The arrivals, stages and end of the workload, from inference-perf's load section."""
    kind = load.get("type", "constant")
    stages = load.get("stages") or []
    if not isinstance(stages, list) or not all(isinstance(s, dict) for s in stages):
        raise _refused(source, "load.stages", "is not a list of stages", "write stages: [{rate: 5, duration: 600}]")
    if load.get("sweep") is not None:
        if not stages:
            raise _refused(source, "load.sweep", "inference-perf finds the stages at run time, by probing the server's "
                           "saturation: the config does not hold them", "write the stages the run printed into "
                           "load.stages: [{rate: ..., duration: ...}]")
        out.unmapped.append(("load.sweep", "stages found at run time; the given load.stages are imported"))
    for key in sorted(set(load) - {"type", "stages", "sweep", "interval", "trace"}):
        if load[key] not in (None, [], {}):
            why = CLIENT.get(key, "not a key of inference-perf's load section")
            out.unmapped.append((f"load.{key} {load[key]}" if key in ("num_workers", "worker_max_concurrency") else
                                 f"load.{key}", why))
    if kind in ("trace_replay", "trace_session_replay"):
        raise _refused(source, "load.type", f"{kind} takes its timing from a trace file the config only names",
                       "replay the run's per-request log (kind: replay), or the trace itself (kind: trace)")
    if not stages:
        raise _refused(source, "load.stages", "there are no stages: nothing is sent",
                       "give load.stages: [{rate: 5, duration: 600}]")
    if kind == "concurrent":
        pairs = [(_number(s, "concurrency_level", i, source, whole=True),
                  _number(s, "num_requests", i, source, whole=True)) for i, s in enumerate(stages)]
        if len(pairs) == 1:
            return {"requests": pairs[0][1], "arrivals": {"concurrency": pairs[0][0]}}
        return {"stages": [{"concurrency": c, "requests": n} for c, n in pairs]}
    if kind not in ("constant", "poisson"):
        raise _refused(source, "load.type", f"'{kind}' is not a load type kvplan knows",
                       "use constant, poisson or concurrent")
    pairs = [(_number(s, "rate", i, source), _number(s, "duration", i, source)) for i, s in enumerate(stages)]
    if kind == "constant":
        kept = " (requests keeps the count)" if len(pairs) == 1 else ""
        out.approximated.append(("load.type constant", "inference-perf sends exactly rate x duration requests per "
                                 "stage, its exponential gaps rescaled to fill the stage; kvplan draws Poisson "
                                 f"arrivals at the same rate{kept}"))
    if len(pairs) == 1:
        rate, duration = pairs[0]
        end = {"requests": int(rate * duration)} if kind == "constant" else {"duration": f"{duration:g}s"}
        return {**end, "arrivals": {"process": "poisson", "rate": f"{rate:g}/s"}}
    out.approximated.append((f"load.interval {load.get('interval', 1.0):g}", "inference-perf waits until a stage's "
                             "requests have finished, then interval seconds, before it starts the next; kvplan's "
                             "stages follow each other"))
    return {"arrivals": {"process": "poisson"},
            "stages": [{"rate": f"{rate:g}/s", "duration": f"{duration:g}s"} for rate, duration in pairs]}


def _number(stage: dict, key: str, i: int, source: str, whole: bool = False) -> Any:
    value = stage.get(key)
    ok = type(value) is int if whole else type(value) in (int, float) and math.isfinite(value)
    if not ok or value <= 0:
        raise _refused(source, f"load.stages[{i}].{key}", f"must be a {'whole ' if whole else ''}number above 0",
                       f"write {key}: {'10' if whole else '5'}")
    return value


def _refused(source: str, key: str, what: str, fix: str) -> SpecError:
    where = f"{source}: {key}" if key else source
    return SpecError([Problem(where, what, fix=fix)])
