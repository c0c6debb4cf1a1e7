#!/usr/bin/env bash
# Structured output end to end: constrained generation with a tiny
# random-weight model (adversarial: it tries everything) through the server;
# every output validates with ajv (tests/e2e/structured_test.mjs).
set -euo pipefail
: "${HEARTH_BIN:?}" "${HEARTH_ROOT:?}"
. "$HEARTH_ROOT/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
tiny_chat_model "$tmp/tiny-chat"
start_server "$tmp/err" --model "$tmp/tiny-chat" --threads 1
node "$HEARTH_ROOT/tests/e2e/structured_test.mjs" "http://127.0.0.1:$SERVER_PORT" "$HEARTH_ROOT"
