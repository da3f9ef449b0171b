#!/usr/bin/env bash
# GPU check on one NVIDIA GPU (cuda:0 unless asked), in at most 297 s (4.95 minutes) with its install,
# cold caches included, with nothing from the network. Sections, each with its own budget in seconds
# (BUDGET below, 297 in all; tests/project/test_gpu_check_budget.py adds them and fails past 300):
#   install    this checkout into the check's own folder (the interpreter, torch, Triton and GPUs said)
#   compile    hwbench compile --target local: every Triton and llvmlite kernel for this GPU, its
#              Triton builds written to the one cache folder every later section uses
#   figures    Triton and llvmlite bf16 GEMM 8192^3 (llvmlite's on mma.sync) beside cuBLAS, causal
#              bf16 attention B=1,H=32,S=4096,D=128 beside SDPA (32 heads: 1024 blocks of 128 queries,
#              near eight waves on an H200's 132 SMs, and a quarter of 128 heads' float64 reference);
#              every step --no-energy: its windows would not fit the budgets
#   simt       the llvmlite work-group kernels lowered to PTX, fp32 (TF32 off): GEMM 4096^3 beside
#              cuBLAS (1024 tiles of 128x128; an eighth of 8192^3's reference), attention
#              B=1,H=8,S=4096,D=64 beside SDPA
#   bandwidth  the stream and transfer kernels, in one process
#   lowprec    Triton fp8 GEMM 8192^3 beside torch._scaled_mm (cuBLASLt), per-tensor scales, fp32 out
#   report     validate the files, then print each figure's speed against its native
# A section's commands share its budget: each runs under what is left of it, and one still running
# then is interrupted (SIGINT: hwbench writes the finished cases, marked incomplete; SIGKILL GRACE
# seconds later), so no section outlasts its budget. No section ends later than the check's start
# plus the budgets up to it either, so the time between steps comes out of later sections and the
# whole check ends within its total (to the second). Exit status 0 when every step passed and the
# report found every figure measured, 1 otherwise, 2 for bad options or no usable Python.
#
# Usage: bash ci/gpu-check.sh [--dry-run] [--device cuda:N]... [--all-devices] [OUT_PREFIX]
#   --dry-run       print the sections, their budgets and their commands; run nothing; exit 0
#   --device D      the GPU to run on (repeatable; default cuda:0); or HWBENCH_GPU_CHECK_DEVICES="cuda:0 cuda:1"
#   --all-devices   every GPU of the node (HWBENCH_GPU_CHECK_DEVICES=all); the sections that run cases
#                   then take their budget once per GPU, beyond the 297 s of one
#   OUT_PREFIX      results files OUT_PREFIX-SECTION.json (default results/gpu-check-HOST-TIME)
#   PYTHON=...      interpreter with a CUDA build of torch and Triton (default: .venv/bin/python, then python3)
#   HWBENCH_GPU_CHECK_CACHE=...  the check's own folder (default results/.cache/gpu-check, kept between runs)
#   HWBENCH_GPU_CHECK_BUDGETS="figures=120 simt=60"  other budgets (seconds) for the sections named
#
# Offline install: the checkout is copied to $HWBENCH_GPU_CHECK_CACHE/src and installed with
#   pip install --no-index --no-deps --no-build-isolation --target $HWBENCH_GPU_CHECK_CACHE/site
# (setuptools, NumPy, torch and Triton come from the GPU machine's own stack; nothing else of the
# interpreter changes), unless the interpreter has this checkout installed already (editable). No wheel
# folder is needed: hwbench's only run-time dependencies are NumPy and ml_dtypes (fp8 on the host;
# the GPU machine has both; tomli too before Python 3.11), and it
# checks results files with its own validator (jsonschema serves the test suite alone).
# Triton's cache (TRITON_CACHE_DIR; CUDA's and CuPy's caches beside it) is one folder under the
# check's folder for the whole check and kept between runs: Triton builds its C launcher helper there
# once (that first time needs a C compiler and Python's headers), and later runs start warm.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

declare -A BUDGET=([install]=20 [compile]=45 [figures]=90 [simt]=40 [bandwidth]=45 [lowprec]=42 [report]=15)
SECTIONS=(install compile figures simt bandwidth lowprec report)
PER_DEVICE=" figures simt bandwidth lowprec "  # sections whose budget counts once per GPU
GRACE=5

usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "gpu-check: $*" >&2; exit 2; }

DRY=0 PREFIX="" DEVICES=()
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=1 ;;
    --device) [ $# -ge 2 ] || die "--device needs a device such as cuda:1"; DEVICES+=("$2"); shift ;;
    --device=*) DEVICES+=("${1#--device=}") ;;
    --all-devices) DEVICES=(all) ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [ -z "$PREFIX" ] || die "give one OUT_PREFIX, not '$PREFIX' and '$1'"; PREFIX=$1 ;;
  esac
  shift
done
if [ ${#DEVICES[@]} = 0 ]; then read -r -a DEVICES <<<"${HWBENCH_GPU_CHECK_DEVICES:-cuda:0}"; fi
for device in "${DEVICES[@]}"; do
  [[ $device =~ ^cuda:[0-9]+$ || ( $device = all && ${#DEVICES[@]} = 1 ) ]] \
    || die "device '$device' is not cuda:INDEX (or 'all' alone): e.g. --device cuda:1"
done

for pair in ${HWBENCH_GPU_CHECK_BUDGETS:-}; do  # e.g. "figures=150 simt=80" for a slower machine
  name=${pair%%=*} value=${pair#*=}
  [[ $name =~ ^[a-z]+$ && -n ${BUDGET[$name]+set} && $value =~ ^[0-9]+$ ]] \
    || die "HWBENCH_GPU_CHECK_BUDGETS: '$pair' is not SECTION=SECONDS with SECTION one of ${SECTIONS[*]}"
  BUDGET[$name]=$value
done

host=$(uname -n)
PREFIX=${PREFIX:-results/gpu-check-${host%%.*}-$(date +%Y%m%d-%H%M%S)}
CACHE=${HWBENCH_GPU_CHECK_CACHE:-results/.cache/gpu-check}
[[ $CACHE = /* ]] || CACHE="$PWD/$CACHE"
export PIP_NO_INDEX=1  # nothing from the network, whatever pip is asked
# Every step runs in the checkout's root, whose hwbench/ folder (no kernels or backends in it) would
# come first on sys.path for -m, -c and stdin and hide the hwbench installed below: Python 3.11 and
# newer leave the current folder off sys.path with this set (older ones are refused after the install).
export PYTHONSAFEPATH=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$CACHE/triton}
export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-$CACHE/cuda}
export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-$CACHE/cupy}
export TRITON_DEFAULT_FP_FUSION=${TRITON_DEFAULT_FP_FUSION:-1}
export CUDA_DEVICE_ORDER=${CUDA_DEVICE_ORDER:-PCI_BUS_ID}  # cuda:N is then nvidia-smi's GPU N

status=0
started=$(date +%s)
say() { echo "gpu-check: $*" >&2; }

torch_info() {  # PY: one line on the interpreter, torch, Triton and the GPUs; fails unless a CUDA torch sees one
  "$1" - 2>/dev/null <<'EOF'
import sys

import torch

if not (torch.version.cuda and torch.cuda.is_available()):
    sys.exit(1)
try:
    import triton

    stack = f"triton {triton.__version__}"
except ImportError:
    stack = "no triton"
gpus = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
names = ", ".join(f"cuda:{i} {p.name} (sm_{p.major}{p.minor})" for i, p in enumerate(gpus))
print(f"{sys.executable}: torch {torch.__version__}, {stack}; {names}")
EOF
}

find_python() {  # any|cuda: the first interpreter there is (any), or whose torch is a CUDA build that sees a GPU
  local py info
  for py in "${PYTHON:-}" .venv/bin/python python3; do
    if [ -z "$py" ] || ! command -v "$py" >/dev/null; then continue; fi
    if [ "$1" = cuda ]; then
      info=$(torch_info "$py") || continue
      say "$info"
    fi
    echo "$py"
    return 0
  done
  return 1
}

copies_checkout() {  # whether $PY has this checkout installed (editable), not only its folder in the current one
  "$PY" -c 'import sys; sys.path[:] = [p for p in sys.path if p not in ("", ".")]; import os, hwbench, hwbench.kernels
sys.exit(os.path.realpath(os.path.dirname(hwbench.__file__)) != os.path.realpath("hwbench"))' 2>/dev/null
}

imports_installed() {  # whether the steps' "$PY -m hwbench", run here, gets all of the hwbench installed
  "$PY" -c 'import hwbench.kernels, hwbench.backends' 2>/dev/null
}

scale() {  # the factor a section's budget takes: the number of GPUs for those that run cases
  if [[ $PER_DEVICE = *" $1 "* ]]; then echo "$NGPU"; else echo 1; fi
}

DEADLINE=$started  # the end of the last section begun on the check's own clock: its start plus the budgets so far
begin() {  # NAME [START]: a section starts (or started at START, in seconds); its steps share its budget
  SECTION=$1
  local budget=$((BUDGET[$1] * $(scale "$1")))
  DEADLINE=$((DEADLINE + budget))  # what ran between steps (or a slow step's tail) comes out of later sections
  SECTION_END=$((${2:-$(date +%s)} + budget))
  [ "$SECTION_END" -le "$DEADLINE" ] || SECTION_END=$DEADLINE
  if [ "$DRY" = 1 ]; then echo "section $1 $budget s"; else say "section $1, budget $budget s (t=$(($(date +%s) - started)) s)"; fi
}

step() {  # COMMAND...: run it within what is left of the section's budget
  if [ "$DRY" = 1 ]; then
    local word line="  step:"
    for word in "$@"; do
      if [[ $word =~ ^[][A-Za-z0-9_./:=,+*@%-]+$ ]]; then line+=" $word"; else line+=" $(printf '%q' "$word")"; fi
    done
    echo "$line"
    return 0
  fi
  local left=$((SECTION_END - $(date +%s) - GRACE)) rc
  if [ "$left" -lt 5 ]; then
    say "$SECTION: no time left in its budget for: $*"
    status=1
    return 1
  fi
  timeout -s INT -k "$GRACE" "$left" "$@"
  rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    say "$SECTION: stopped at the end of its budget (finished cases kept, marked incomplete): $*"
  fi
  [ "$rc" = 0 ] || status=1
  return "$rc"
}

skip() {  # WHY: a step this hwbench cannot run yet
  if [ "$DRY" = 1 ]; then echo "  skip: $*"; else say "$SECTION: skipped: $*"; fi
}

SOURCES=(pyproject.toml setup.py README.md hwbench kernels backends)
PIP_INSTALL=(-m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-build-isolation)
stage() {  # a fresh copy of the checkout's package sources, for pip to install into the check's folder
  rm -rf "$CACHE/src" "$CACHE/site" && mkdir -p "$CACHE/src" && cp -R "${SOURCES[@]}" "$CACHE/src/"
}

capabilities() {  # the kernels this hwbench has, then the GEMM's dtypes (empty when it cannot say)
  "$PY" - <<'EOF' 2>/dev/null
from hwbench.core.kernel import get_kernel, kernel_targets

print(" ".join(kernel_targets()))
print(" ".join(get_kernel("gemm").dtypes))
EOF
}
has_kernel() { [ -z "$KERNELS" ] || [[ " $KERNELS " = *" $1 "* ]]; }
has_gemm_dtype() { [ -z "$GEMM_DTYPES" ] || [[ " $GEMM_DTYPES " = *" $1 "* ]]; }

check_compiler() {  # Triton builds its launcher helper with a C compiler against Python's headers
  local cc
  cc=$(command -v "${CC:-cc}" || command -v gcc || command -v clang) || cc=""
  if [ -z "$cc" ] || ! "$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    say "warning: no C compiler or no Python.h for $PY: Triton cannot build its launcher helper unless $TRITON_CACHE_DIR holds it already"
  fi
}

# --- install -------------------------------------------------------------------------------------
if [ "$DRY" = 1 ]; then
  PY=$(find_python any) || PY=python3
else
  command -v timeout >/dev/null || die "needs timeout (GNU coreutils) to keep each section within its budget"
  PY=$(find_python cuda) || die "no Python with a CUDA build of torch that sees a GPU (set PYTHON=...)"
fi
NGPU=1  # the install counts once
begin install "$started"
if copies_checkout; then
  [ "$DRY" = 1 ] && echo "  note: $PY has this checkout installed (editable): nothing to install"
else
  if [ "$DRY" = 1 ]; then
    echo "  note: ${SOURCES[*]} copied to $CACHE/src"
  else
    stage || die "copying this checkout to $CACHE/src failed"
  fi
  step "$PY" "${PIP_INSTALL[@]}" --target "$CACHE/site" "$CACHE/src" \
    || die "installing this checkout for $PY into $CACHE/site failed (see pip's lines above)"
  export PYTHONPATH="$CACHE/site${PYTHONPATH:+:$PYTHONPATH}"
fi
[ "$DRY" = 1 ] || imports_installed \
  || die "$PY imports the checkout's hwbench/ folder ahead of the one installed in $CACHE/site (Python 3.11 or newer needed)"
{ read -r KERNELS; read -r GEMM_DTYPES; } < <(capabilities; echo; echo) || true
[ -n "$KERNELS" ] || say "hwbench's kernels could not be listed with $PY: every section is tried"
if [ "${DEVICES[0]}" = all ]; then
  if [ "$DRY" = 1 ]; then NGPU=1; else NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())'); fi
  DEVICE_ARGS=()
  for ((i = 0; i < NGPU; i++)); do DEVICE_ARGS+=(--device "cuda:$i"); done
else
  NGPU=${#DEVICES[@]}
  DEVICE_ARGS=()
  for device in "${DEVICES[@]}"; do DEVICE_ARGS+=(--device "$device"); done
fi
HB=("$PY" -m hwbench)
RUN=("${HB[@]}" run --backend cuda "${DEVICE_ARGS[@]}" --quiet)
if [ "$DRY" = 1 ]; then
  echo "  note: devices ${DEVICES[*]}; Triton cache $TRITON_CACHE_DIR; results $PREFIX-*.json"
else
  mkdir -p "$(dirname "$PREFIX")" "$TRITON_CACHE_DIR"
  check_compiler
fi

# --- compile -------------------------------------------------------------------------------------
begin compile
step "${HB[@]}" compile --target local --out "$PREFIX-compile.json" --quiet

# --- figures -------------------------------------------------------------------------------------
begin figures
step "${RUN[@]}" --kernel gemm,attention --dtype bf16 --impl torch_matmul,torch_sdpa,triton,llvm \
  --shape gemm:M=8192,N=8192,K=8192 --shape attention:B=1,H=32,S=4096,D=128,causal=1 \
  --budget 0.5 --no-energy --timeout 60 --out "$PREFIX-figures.json"

# --- simt: the llvmlite work-group kernels -------------------------------------------------------
begin simt
step "${RUN[@]}" --kernel gemm,attention --dtype fp32 --impl torch_matmul,torch_sdpa,llvm \
  --shape gemm:M=4096,N=4096,K=4096 --shape attention:B=1,H=8,S=4096,D=64,causal=0 \
  --budget 0.5 --no-energy --timeout 30 --out "$PREFIX-simt.json"

# --- bandwidth and transfers: one process for both ----------------------------------------------
begin bandwidth
BANDWIDTH=() SHAPES=()
if has_kernel stream; then
  BANDWIDTH+=(stream) SHAPES+=(--shape 'stream:op=3,n=33554432')
else
  skip "no stream kernel in this hwbench yet (hwbench list)"
fi
if has_kernel transfer; then
  BANDWIDTH+=(transfer)
  SHAPES+=(--shape 'transfer:dir=0,bytes=33554432' --shape 'transfer:dir=1,bytes=33554432' --shape 'transfer:dir=0,bytes=4')
else
  skip "no transfer kernel in this hwbench yet (hwbench list)"
fi
if [ ${#BANDWIDTH[@]} -gt 0 ]; then
  kernels=$(IFS=,; echo "${BANDWIDTH[*]}")
  step "${RUN[@]}" --kernel "$kernels" --dtype fp32 "${SHAPES[@]}" --budget 0.2 --no-energy --timeout 30 \
    --out "$PREFIX-bandwidth.json"
fi

# --- low precision -------------------------------------------------------------------------------
begin lowprec
if has_gemm_dtype fp8; then
  step "${RUN[@]}" --kernel gemm --dtype fp8 --impl torch_scaled_mm,triton --shape gemm:M=8192,N=8192,K=8192 \
    --budget 0.5 --no-energy --timeout 35 --out "$PREFIX-lowprec.json"
else
  skip "the GEMM has no fp8 dtype in this hwbench yet (hwbench list)"
fi

# --- report --------------------------------------------------------------------------------------
begin report
if [ "$DRY" = 1 ]; then
  files=("$PREFIX-*.json")
else
  shopt -s nullglob
  files=("$PREFIX"-*.json)
  shopt -u nullglob
fi
if [ ${#files[@]} = 0 ]; then
  say "report: no results file was written"
  status=1
else
  step "${HB[@]}" validate "${files[@]}"
  step "$PY" ci/gpu_check_report.py "${files[@]}"
fi

total=0
for name in "${SECTIONS[@]}"; do total=$((total + BUDGET[$name] * $(scale "$name"))); done
if [ "$DRY" = 1 ]; then
  echo "total $total s"
  exit 0
fi
say "done in $(($(date +%s) - started)) s of $total s: $PREFIX-*.json (status $status)"
exit $status
