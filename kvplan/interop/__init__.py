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

It is the inverse of the deployment: what `kvplan.deploy.stack.vllm_args` and `inprocess_config`
write for a spec, imported again, gives that spec's serving and LMCache settings back (the
tests check it on every shipped example). A vLLM command does not say which accelerator it
runs on, nor what traffic it serves: `--gpu` names the accelerator, and the workload is a
placeholder the spec says to replace. Every flag or key without a kvplan setting is listed with
the reason, never dropped; what kvplan sets by itself (the served model name, --enforce-eager on
CPUs) is listed as such.
"""

from __future__ import annotations

from .helm import from_helm_values
from .imported import Imported
from .lmcache import add_lmcache_config, add_lmcache_server
from .vllm import ENV_SET_BY_KVPLAN, from_vllm_command

__all__ = ["ENV_SET_BY_KVPLAN", "Imported", "add_lmcache_config", "add_lmcache_server", "from_helm_values",
           "from_vllm_command"]
