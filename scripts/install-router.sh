#!/usr/bin/env bash
# Install vllm-router (vllm-project's router, the PyPI package) into its own venv: the router
# kvplan deploys in front of the vLLM instances (templates/roles/router). Idempotent: a venv that
# already holds the pinned version is left as it is.
#
#   scripts/install-router.sh [VENV]        (default /opt/kvplan/router-venv)
#
# One 24 MB wheel (a Rust binary) and a few pure-Python dependencies; no torch, no vLLM.
set -euo pipefail
VENV=${1:-/opt/kvplan/router-venv}
VERSION=0.1.17
PY=${PYTHON:-python3}

if [ -x "$VENV/bin/vllm-router" ] && "$VENV/bin/python" -c "import sys; from importlib.metadata import version; sys.exit(version('vllm-router') != '$VERSION')" 2>/dev/null; then
    echo "vllm-router $VERSION already in $VENV"
    exit 0
fi
mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "vllm-router==$VERSION"
"$VENV/bin/vllm-router" --help >/dev/null
echo "vllm-router $VERSION installed in $VENV"
