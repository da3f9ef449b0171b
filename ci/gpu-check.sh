#!/usr/bin/env bash
# GPU check on one NVIDIA GPU, in under 8 minutes, installing nothing from the network:
#   1. hwbench compile --target local (every Triton and llvmlite kernel for this GPU's arch)
#   2. the CUDA backend at the standard profile (natives, Triton, llvmlite PTX)
#   3. the figure shapes: bf16 GEMM 8192^3, causal bf16 attention B=4,H=32,S=4096,D=128,
#      fp32 GEMM 8192^3 and fp32 attention B=1,H=8,S=4096,D=64 (the llvmlite work-group
#      kernels beside cuBLAS / SDPA, TF32 off)
# then validates the files and prints the ratios. Usage: bash ci/gpu-check.sh [OUT_PREFIX]
#   PYTHON=...   interpreter with torch (CUDA build), triton and hwbench (default: .venv, then python3)
set -uo pipefail
cd "$(dirname "$0")/.."
export PIP_NO_INDEX=1  # nothing from the network, whatever pip is asked below
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$(mktemp -d -t hwbench-triton-XXXXXX)}"
export TRITON_DEFAULT_FP_FUSION="${TRITON_DEFAULT_FP_FUSION:-1}"

pick_python() {
  for py in "${PYTHON:-}" .venv/bin/python python3; do
    [ -n "$py" ] && command -v "$py" >/dev/null || continue
    if "$py" -c "import torch, sys; sys.exit(0 if torch.version.cuda and torch.cuda.is_available() else 1)" 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  return 1
}
PY=$(pick_python) || { echo "gpu-check: no Python with a CUDA build of torch that sees a GPU" >&2; exit 2; }
if ! "$PY" -c "import hwbench.kernels" 2>/dev/null; then
  "$PY" -m pip install --quiet --no-index --no-deps --no-build-isolation -e . || {
    echo "gpu-check: hwbench is not installed for $PY and a local install failed" >&2; exit 2; }
fi
HB=("$PY" -m hwbench)
OUT=${1:-results/gpu-check-$(hostname -s)-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$(dirname "$OUT")"
status=0
started=$(date +%s)
step() { echo "gpu-check: $* (t=$(( $(date +%s) - started )) s)" >&2; }

step "devices"
"${HB[@]}" list --backend cuda || status=1

step "compile for the local architecture"
timeout -s INT 90 "${HB[@]}" compile --target local --out "$OUT-compile.json" --quiet || status=1

# SIGINT on a time-out: hwbench writes the finished cases, marked incomplete.
step "cuda backend, standard profile"
timeout -s INT 240 "${HB[@]}" run --backend cuda --kernel gemm,attention --profile standard --budget 0.5 \
  --timeout 120 --out "$OUT-standard.json" --quiet || status=1

step "figure shapes"
timeout -s INT 150 "${HB[@]}" run --backend cuda --kernel gemm,attention --dtype bf16 --impl torch_matmul,torch_sdpa,triton \
  --shape gemm:M=8192,N=8192,K=8192 --shape attention:B=4,H=32,S=4096,D=128,causal=1 --budget 1 --timeout 120 \
  --out "$OUT-figures-bf16.json" --quiet || status=1
timeout -s INT 90 "${HB[@]}" run --backend cuda --kernel gemm,attention --dtype fp32 \
  --impl torch_matmul,torch_sdpa,triton,llvm --shape gemm:M=8192,N=8192,K=8192 \
  --shape attention:B=1,H=8,S=4096,D=64,causal=0 --budget 1 --timeout 50 --out "$OUT-figures-fp32.json" --quiet || status=1

step "validate"
"${HB[@]}" validate "$OUT"-*.json || status=1
"$PY" - "$OUT" <<'EOF' || status=1
import json, sys, glob
prefix = sys.argv[1]
recs = [r for path in glob.glob(prefix + "-figures-*.json") for r in json.load(open(path))["records"]]
def t(kernel, impl, dtype):
    return next((r["timing"]["median_s"] for r in recs if r["kernel"] == kernel and r["impl"] == impl
                 and r["dtype"] == dtype and r["status"] == "ok"), None)
for label, kernel, port, native, dtype, goal in [
        ("Triton bf16 GEMM 8192^3 / cuBLAS", "gemm", "triton", "torch_matmul", "bf16", 0.9),
        ("Triton attention bf16 causal / SDPA", "attention", "triton", "torch_sdpa", "bf16", 0.8),
        ("llvmlite SIMT fp32 GEMM 8192^3 (PTX) / cuBLAS fp32", "gemm", "llvm", "torch_matmul", "fp32", 0.5),
        ("llvmlite SIMT fp32 attention (PTX) / SDPA fp32", "attention", "llvm", "torch_sdpa", "fp32", 0.5)]:
    tp, tn = t(kernel, port, dtype), t(kernel, native, dtype)
    ratio = f"{tn / tp:.2f}x" if tp and tn else "not measured"
    print(f"{label:<52} {ratio:>12}  (goal >= {goal}x)")
compile_doc = glob.glob(prefix + "-compile.json")
if compile_doc:
    bad = [r for r in json.load(open(compile_doc[0]))["compile"] if r["status"] != "ok" or r["spilled"]]
    for r in bad:
        print(f"compile: {r['target']} {r['impl']} {r['variant']}: {r['status']}"
              f"{' (spills)' if r.get('spilled') else ''} {r['reason'][:120]}")
EOF
step "done: $OUT-*.json (status $status)"
exit $status
