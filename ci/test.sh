#!/usr/bin/env bash
# Set up (ci/setup.sh), check lint, format and types, then run the whole test suite; any
# failure, or no test at all, fails.
#   bash ci/test.sh          # everything (what .ci/run and CI run)
#   bash ci/test.sh --fast   # the edit-test loop: no cluster, gpu, opencl or slow tests
#                            # (tests/needs.py), on every core with pytest-xdist
# Further arguments go to pytest. The benchmark suite runs once per case as a smoke test
# (--benchmark-disable); to measure, run `pytest tests/benchmarks --benchmark-only`.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=()
if [[ "${1:-}" == "--fast" ]]; then
    shift
    fast=(-m "not slow and not cluster and not gpu and not opencl" -n auto --dist loadfile)
fi
bash ci/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python ci/typecheck.py
export TMPDIR="${TMPDIR:-/tmp}"
.venv/bin/python -m pytest tests -p no:cacheprovider --benchmark-disable --timeout 900 --durations=25 -q "${fast[@]}" "$@"
