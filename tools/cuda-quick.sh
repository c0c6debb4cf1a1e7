#!/usr/bin/env bash
# The GPU checks that fit one short device call (where starts are scarce):
# the products' checks and speed (bench_cuda_mv, decode and prefill), the
# model-level GPU tests of the "tests" file set (test_quant_parity,
# test_engine, test_backend_attn), then the 8B shape as Q4_0 through
# `hearth bench` (OLD_BIN beside it, alternating, when given), then a
# per-kernel ncu profile of a few decode steps if time is left. Every step
# is cut to what remains of END seconds (default 540).
#   there, after tools/cuda-stage.sh out tests (docs/gpu.md):
#   tar -xJf .devpack/device.tar.xz && bash tools/cuda-quick.sh [OLD_BIN]
# Logs go to $OUT (the device tool's returned folder) or /tmp/hearth-quick.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
dev=$root/.device old=${1:-}
export LD_LIBRARY_PATH=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} HEARTH_ROOT=$root
out=${OUT:-/tmp/hearth-quick} d=${DIR:-/tmp/hearth-cuda-bench} end=${END:-540}
mkdir -p "$out" "$d"
left() { echo $((end - SECONDS)); }
cap() { local l; l=$(left); echo $((l < $1 ? (l > 1 ? l : 1) : $1)); } # min(N, what is left)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
m=$d/llama-3.1-8b-Q4_0.gguf
( [ -f "$d/llama-3.1-8b/config.json" ] || "$dev/hearth" synth --shape llama-3.1-8b --out "$d/llama-3.1-8b" --dtype bf16 >/dev/null
  [ -f "$m" ] || "$dev/hearth" convert --model "$d/llama-3.1-8b" --out "$m" --gguf Q4_0 >/dev/null 2>&1 ) &
step() { # NAME SECONDS GREP COMMAND...: its exit status, its lines matching GREP (failed: its last ones)
    local name=$1 t=$2 pat=$3 rc
    shift 3
    [ "$(left)" -gt 5 ] || { echo "== $name: no time left"; return; }
    timeout "$(cap "$t")" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "== $name rc=$rc at ${SECONDS}s"
    if [ $rc -eq 0 ]; then grep -E "$pat" "$out/$name.log" | tail -12; else tail -5 "$out/$name.log"; fi
}
step mv 150 "copy|Q8_0|Q4_0|Q4_K|Q5_K|Q6_K|rror" "$dev/bench_cuda_mv"
step quant_parity 100 "FAIL|PASS|passed|failed|skipped" "$dev/test_quant_parity" --device cuda
step mv_prefill 70 "prefill|rror" "$dev/bench_cuda_mv" prefill 512
step engine 80 "FAIL|PASS|passed|failed|skipped" "$dev/test_engine" --device cuda
step attn 30 "FAIL|PASS|passed|failed|skipped" "$dev/test_backend_attn" --device cuda
wait
for b in ${old:+"$old"} "$dev/hearth" ${old:+"$old"} "$dev/hearth"; do
    if [ "$(left)" -le 40 ] || [ ! -f "$m" ]; then break; fi
    echo "== $b"
    timeout 40 "$b" bench --model "$m" --device cuda --prompt-len 512 --gen-len 32 --repeats 3 2>&1 |
        grep -E '^prefill|^decode  '
done
[ "$(left)" -gt 30 ] && step ncu "$(left)" "k_|Sum|Average" ncu --graph-profiling node --clock-control none \
    --metrics gpu__time_duration.sum --print-summary per-kernel -c 900 \
    "$dev/hearth" generate --model "$m" --device cuda --prompt "a b c" --max-tokens 2 --temp 0
echo "cuda-quick: done at ${SECONDS}s"
