#!/usr/bin/env bash
# Structured output end to end: constrained generation with a tiny
# random-weight model (adversarial: it tries everything) through the server;
# every output validates with ajv (tests/e2e/structured_test.mjs).
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
tmp=$(mktemp -d)
model=$tmp/tiny-chat
mkdir -p "$model"
cp "$root/tests/fixtures/models/llama/config.json" "$root/tests/fixtures/models/llama/model.safetensors" \
   "$root/tests/fixtures/serve/tokenizer.json" "$root/tests/fixtures/serve/tokenizer_config.json" "$model/"
sed -i 's/"eos_token_id": 2/"eos_token_id": 370/' "$model/config.json"
: >"$tmp/err"
"$bin" serve --model "$model" --port 0 --threads 1 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
port=
for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/err")
    [ -n "$port" ] && break; sleep 0.05
done
[ -n "$port" ] || { cat "$tmp/err"; exit 1; }
node "$root/tests/e2e/structured_test.mjs" "http://127.0.0.1:$port" "$root"
