#!/usr/bin/env bash
# Set up hwbench on a fresh Debian/Ubuntu machine: system packages, a virtual environment
# in .venv, torch (CPU build where the machine provides one) and hwbench with its extras.
#   HWBENCH_VENV=DIR     the virtual environment's folder (default .venv)
#   HWBENCH_TORCH=none   skip torch (attention then compares against a NumPy baseline)
#   HWBENCH_EXTRAS=...   extras to install (default: cpu,test,opencl,gpu-compile; intel-opencl, clblast and mpi
#                        are tried after them)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

# Distribution packages: ci/apt-packages.txt, one a line (# comments); only missing ones are installed.
wanted=$(sed -e 's/#.*//' ci/apt-packages.txt | tr -s ' \n' '\n' | sed '/^$/d')
"$PYTHON" -c "import venv, ensurepip" 2>/dev/null || wanted="$wanted python3-venv python3-pip"
missing=()
for pkg in $wanted; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    echo "setup: installing ${missing[*]} from the distribution" >&2
    $SUDO apt-get update -qq
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
      # One package the distribution lacks (e.g. Ubuntu's snap-only chromium) must not stop the rest:
      # what it serves is then skipped, with the reason, by the tests and the backends.
      for pkg in "${missing[@]}"; do
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null \
          || echo "setup: could not install $pkg; what needs it will be skipped" >&2
      done
    fi
  else
    echo "setup: not a Debian/Ubuntu machine; install these yourself: ${missing[*]}" >&2
  fi
fi

VENV=${HWBENCH_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

if [ "${HWBENCH_TORCH:-2.13.0}" != none ]; then
  # First and pinned: this exact version is the CPU build where the machine provides one;
  # another version would pull a multi-GB CUDA build.
  "${PIP[@]}" "torch==${HWBENCH_TORCH:-2.13.0}"
fi
"${PIP[@]}" -e ".[${HWBENCH_EXTRAS:-cpu,test,opencl,gpu-compile}]"
if [ -z "${HWBENCH_EXTRAS:-}" ]; then
  # Intel's OpenCL CPU runtime (x86_64 Linux wheels only; nothing is installed elsewhere): without it the
  # opencl backend has PoCL alone, which takes no SPIR-V, and `hwbench list` says how to add it.
  "${PIP[@]}" -e ".[intel-opencl]" \
    || echo "setup: Intel's OpenCL CPU runtime did not install; opencl llvm (SPIR-V) cases will be skipped" >&2
  # CLBlast's bindings build from source; without them the opencl backend skips its native GEMM, saying why.
  "${PIP[@]}" -e ".[clblast]" || echo "setup: pyclblast did not build; opencl clblast cases will be skipped" >&2
  # mpi4py builds against the system MPI; without it the AllReduce mpi cases are skipped, saying why.
  "${PIP[@]}" -e ".[mpi]" || echo "setup: mpi4py did not build; AllReduce mpi cases will be skipped" >&2
fi
echo "setup: done in $VENV ($("$VENV/bin/hwbench" --version))" >&2
