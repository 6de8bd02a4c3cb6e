#!/usr/bin/env bash
# Install kvplan into ./.venv from this checkout.
#   ./install.sh        kvplan and its core dependencies
#   ./install.sh test   the same plus the test tools
# On a fresh Debian 12, python3's venv module comes from the python3-venv package; it is
# installed with apt when missing (as root, or through sudo).
set -euo pipefail
cd "$(dirname "$0")"

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "kvplan needs Python >= 3.11 (found $(python3 --version 2>&1))" >&2; exit 1; }

if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
fi

case "${1:-}" in
  "") target="." ;;
  test) target=".[test]" ;;
  *) echo "usage: ./install.sh [test]" >&2; exit 2 ;;
esac

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "$target"
echo "kvplan installed in .venv ($(.venv/bin/kvplan --version))"
