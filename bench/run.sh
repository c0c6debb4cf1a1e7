#!/usr/bin/env bash
# make bench: hearth bench on the synthesized Llama-3.2-1B shape (bf16),
# 2 threads. Prints prefill/decode tokens/s and decode as % of the memory
# roofline measured in the same run.
set -euo pipefail
bin=$1
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}
mkdir -p "$dir"
[ -f "$dir/llama-3.2-1b/config.json" ] || "$bin" synth --shape llama-3.2-1b --out "$dir/llama-3.2-1b" --dtype bf16
"$bin" bench --model "$dir/llama-3.2-1b" --threads 2 --prompt-len "${PROMPT_LEN:-128}" --gen-len "${GEN_LEN:-64}" --repeats "${REPEATS:-5}"
