#!/usr/bin/env bash
# The KV cache formats' KL per decode step on the random Llama-3.2-1B shape
# (hearth synth, bf16; head_dim 64, 8 KV heads): bench_kvkl's table, KL(f32
# KV || format) after PROMPT random tokens over STEPS teacher-forced steps,
# beside the formats' KV bytes per token (docs/kv-quant.md).
#   bench/kvkl.sh build/hearth      env: PROMPT (1024) STEPS (32) THREADS (2)
#        SHAPE (llama-3.2-1b) HEARTH_BENCH_DIR (/tmp/hearth-bench)
set -euo pipefail
bin=${1:?usage: bench/kvkl.sh build/hearth}
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}/${SHAPE:-llama-3.2-1b}
[ -f "$dir/config.json" ] || "$bin" synth --shape "${SHAPE:-llama-3.2-1b}" --out "$dir" --dtype bf16 >/dev/null
"$(dirname "$bin")/bench_kvkl" "$dir" "${PROMPT:-1024}" "${STEPS:-32}" "${THREADS:-2}"
