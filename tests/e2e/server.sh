#!/usr/bin/env bash
# The server end to end: a tiny model with a real tokenizer and chat
# template, driven by the official `openai` npm client, curl, and a corpus of
# malformed requests (tests/e2e/server_test.mjs).
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
model=$tmp/tiny-chat
tiny_chat_model "$model"
start_server "$tmp/err" --model "$model" --threads 1 --max-body-mb 1
pid=$SERVER_PID; port=$SERVER_PORT
node "$root/tests/e2e/server_test.mjs" "http://127.0.0.1:$port" "$bin" "$model" "$root"
# graceful shutdown: SIGTERM ends the process with status 0
kill -TERM "$pid"
status=0; wait "$pid" || status=$?
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status after SIGTERM"; cat "$tmp/err"; exit 1; }
echo "server: clean exit on SIGTERM"
