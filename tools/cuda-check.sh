#!/usr/bin/env bash
# Every GPU test and benchmark, in one call on the GPU machine (one H200):
# run from the repository root after tools/cuda-bundle.sh packed .device/
# here (docs/gpu.md). Prints each test's own lines and a closing summary;
# exits non-zero when a test fails. With --bench, then the decode/prefill
# benchmark on random weights at real shapes (hearth synth), bf16 and the
# GGUF types, each printed with the HBM roofline measured in the same run.
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
if [ "${1:-}" = "--bench" ]; then
    tmp=${TMPDIR:-/tmp}/hearth-cuda-bench
    mkdir -p "$tmp"
    for shape in ${BENCH_SHAPES:-llama-3.2-1b llama-3.1-8b}; do
        [ -d "$tmp/$shape" ] || "$dev/hearth" synth --shape "$shape" --out "$tmp/$shape" >/dev/null
        echo "== bench $shape bf16"
        "$dev/hearth" bench --model "$tmp/$shape" --device cuda --prompt-len 512 --gen-len 128 --repeats 3
        for q in ${BENCH_GGUF:-Q8_0 Q4_0}; do
            f=$tmp/$shape-$q.gguf
            [ -f "$f" ] || "$dev/hearth" convert --model "$tmp/$shape" --out "$f" --gguf "$q" >/dev/null
            echo "== bench $shape $q"
            "$dev/hearth" bench --model "$f" --device cuda --prompt-len 512 --gen-len 128 --repeats 3
        done
    done
fi
[ "$fail" -eq 0 ]
