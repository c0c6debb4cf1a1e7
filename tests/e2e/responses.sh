#!/usr/bin/env bash
# POST /v1/responses (OpenAI's Responses API) end to end with the official
# openai client and raw bytes: shapes, usage, the streaming events and their
# sequence numbers, function calls and their outputs, text.format
# json_schema by grammar, stored responses (previous_response_id, retrieve,
# delete) and bad bodies (tests/e2e/responses_test.mjs).
set -euo pipefail
: "${HEARTH_BIN:?}" "${HEARTH_ROOT:?}"
. "$HEARTH_ROOT/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
tiny_chat_model "$tmp/tiny-chat"
tmpl=$HEARTH_ROOT/tests/fixtures/chat/templates/Qwen-Qwen3-0.6B.jinja
start_server "$tmp/err" --model "$tmp/tiny-chat" --threads 1 --chat-template "$(cat "$tmpl")"
node "$HEARTH_ROOT/tests/e2e/responses_test.mjs" "http://127.0.0.1:$SERVER_PORT" "$HEARTH_ROOT"
