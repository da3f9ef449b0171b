#!/usr/bin/env bash
# Set up hwbench on a fresh Debian/Ubuntu machine: system packages, a virtual environment
# in .venv, torch (CPU build where the machine provides one) and hwbench with its extras.
#   HWBENCH_TORCH=none   skip torch (attention then compares against a NumPy baseline)
#   HWBENCH_EXTRAS=...   extras to install (default: cpu,test)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

if ! "$PYTHON" -c "import venv, ensurepip" 2>/dev/null; then
  echo "setup: installing python3-venv from the distribution" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv python3-pip >/dev/null
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

if [ "${HWBENCH_TORCH:-2.13.0}" != none ]; then
  # First and pinned: this exact version is the CPU build where the machine provides one;
  # another version would pull a multi-GB CUDA build.
  "${PIP[@]}" "torch==${HWBENCH_TORCH:-2.13.0}"
fi
"${PIP[@]}" -e ".[${HWBENCH_EXTRAS:-cpu,test}]"
echo "setup: done ($(.venv/bin/hwbench --version))" >&2
