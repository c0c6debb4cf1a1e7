#!/usr/bin/env bash
# The server end to end: a tiny model with a real tokenizer and chat
# template, driven by the official `openai` npm client, curl, and a corpus of
# malformed requests (tests/e2e/server_test.mjs).
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
tmp=$(mktemp -d)
model=$tmp/tiny-chat
mkdir -p "$model"
cp "$root/tests/fixtures/models/llama/config.json" "$root/tests/fixtures/models/llama/model.safetensors" \
   "$root/tests/fixtures/serve/tokenizer.json" "$root/tests/fixtures/serve/tokenizer_config.json" "$model/"
# <|im_end|> (370 in the tiny tokenizer) ends generation
sed -i 's/"eos_token_id": 2/"eos_token_id": 370/' "$model/config.json"
: >"$tmp/err"
"$bin" serve --model "$model" --port 0 --threads 1 --max-body-mb 1 >"$tmp/out" 2>"$tmp/err" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
port=
for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/err")
    [ -n "$port" ] && break
    sleep 0.05
done
[ -n "$port" ] || { echo "server did not start:"; cat "$tmp/err"; exit 1; }
node "$root/tests/e2e/server_test.mjs" "http://127.0.0.1:$port" "$bin" "$model" "$root"
# graceful shutdown: SIGTERM ends the process with status 0
kill -TERM "$pid"
status=0; wait "$pid" || status=$?
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status after SIGTERM"; cat "$tmp/err"; exit 1; }
echo "server: clean exit on SIGTERM"
