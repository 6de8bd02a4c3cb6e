"""Import: a kvplan spec from the configs a team already runs, and a list of what did not map.

- a `vllm serve ...` command line (`kvplan import --vllm "..."`): the model and every serving flag
  kvplan simulates and deploys (`VLLM_FLAGS`), and the LMCache connector of --kv-transfer-config;
- an LMCache engine config, the YAML that LMCACHE_CONFIG_FILE names (`--lmcache FILE`): chunk size,
  the CPU (ddr) and local-disk (nvme) tiers with their sizes and policy, and the save/retrieve
  settings (in-process mode);
- an `lmcache server ...` command line (`--lmcache-server "..."`, MP mode): the L1 (ddr) tier, the
  file-system L2 adapter (nvme), the chunk size, port and policies;
- vllm-project/production-stack Helm values (`--helm-values FILE`): one `modelSpec` entry's
  vllmConfig and extraArgs (read as the chart's template turns them into vLLM flags), replicas,
  lmcacheConfig and LMCACHE_* variables, and the router's routing logic.

The workload comes from the benchmark a team runs: an inference-perf config (`--inference-perf FILE`: its data
generator and load stages) or a `vllm bench serve ...` command line (`--vllm-bench "..."`: its dataset, prompt count,
request rate and concurrency), each listing what did not map and what mapped with a difference.

It is the inverse of the deployment: what `kvplan.deploy.vllm_command.vllm_args` and `kvplan.deploy.stack.inprocess_config`
write for a spec, imported again, gives that spec's serving and LMCache settings back (the
tests check it on every shipped example). A vLLM command does not say which accelerator it
runs on, nor what traffic it serves: `--gpu` names the accelerator, and the workload is a
placeholder the spec says to replace unless a benchmark's configuration gives it. Every flag or
key without a kvplan setting is listed with the reason, never dropped; what kvplan sets by itself
(the served model name, --enforce-eager on CPUs) is listed as such.
"""

from __future__ import annotations

from .helm import from_helm_values
from .imported import Imported, ImportedWorkload, check_workload, spec_of
from .inference_perf import from_inference_perf
from .lmcache import add_lmcache_config, add_lmcache_server
from .vllm import ENV_SET_BY_KVPLAN, from_vllm_command
from .vllm_bench import from_vllm_bench

__all__ = ["ENV_SET_BY_KVPLAN", "Imported", "ImportedWorkload", "add_lmcache_config", "add_lmcache_server",
           "check_workload", "from_helm_values", "from_inference_perf", "from_vllm_bench", "from_vllm_command",
           "spec_of"]
