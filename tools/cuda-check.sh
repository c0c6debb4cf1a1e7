#!/usr/bin/env bash
# Every GPU test and benchmark, in one call on the GPU machine (one H200):
# run from the repository root after tools/cuda-bundle.sh packed .device/
# here (docs/gpu.md). Prints each test's own lines and a closing summary;
# exits non-zero when a test fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dev=$root/.device
export LD_LIBRARY_PATH=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export HEARTH_ROOT=$root HEARTH_BIN=$dev/hearth
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
pass=0 fail=0
run() {
    echo "== $*"
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: $*"; fi
}
run "$dev/test_parity" --device cuda
run "$dev/test_engine" --device cuda
run "$dev/test_quant_parity" --device cuda
echo "cuda-check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
