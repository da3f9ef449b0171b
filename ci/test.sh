#!/usr/bin/env bash
# Set up (ci/setup.sh), check lint, format and types, then run the whole test suite; any
# failure, or no test at all, fails.
#   bash ci/test.sh          # everything (what .ci/run and CI run), in three passes:
#                            #   1. all but the cluster and serial tests, two at a time (pytest-xdist)
#                            #   2. the cluster and serial tests (tests/needs.py), one at a time
#                            #   3. the fast tier again in a venv with only the cpu and test extras
#                            #      (.venv-minimal: no torch, OpenCL, Triton or MPI), which proves
#                            #      every test of an optional extra skips, saying why, without it
#   bash ci/test.sh --fast   # the edit-test loop: no cluster, gpu, opencl, serial or slow tests
#                            # (tests/needs.py), on every core with pytest-xdist
# Further arguments go to pytest (every pass). The benchmark suite runs once per case as a smoke
# test (--benchmark-disable); to measure, run `pytest tests/benchmarks --benchmark-only`.
set -euo pipefail
cd "$(dirname "$0")/.."
FAST="not slow and not cluster and not gpu and not opencl and not serial"
fast=0
if [[ "${1:-}" == "--fast" ]]; then
    shift
    fast=1
fi
bash ci/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python ci/typecheck.py
export TMPDIR="${TMPDIR:-/tmp}"
pytest=(-m pytest tests -p no:cacheprovider --benchmark-disable --timeout 900 --durations=15 -q)
if [[ $fast == 1 ]]; then
    exec .venv/bin/python "${pytest[@]}" -m "$FAST" -n auto --dist loadfile "$@"
fi
failed=()
.venv/bin/python "${pytest[@]}" -m "not cluster and not serial" -n 2 --dist loadfile "$@" || failed+=("parallel pass: $?")
.venv/bin/python "${pytest[@]}" -m "cluster or serial" "$@" || failed+=("serial pass: $?")
HWBENCH_VENV=.venv-minimal HWBENCH_TORCH=none HWBENCH_EXTRAS=cpu,test bash ci/setup.sh
.venv-minimal/bin/python "${pytest[@]}" -m "$FAST" -n auto --dist loadfile "$@" || failed+=("extras-free pass: $?")
if [[ ${#failed[@]} -gt 0 ]]; then
    printf 'ci/test.sh: %s\n' "${failed[@]}" >&2
    exit 1
fi
