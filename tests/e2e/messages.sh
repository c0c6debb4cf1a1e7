#!/usr/bin/env bash
# POST /v1/messages (Anthropic's Messages API) end to end: the official
# @anthropic-ai/sdk client and raw bytes against the tiny model serving
# Qwen3's chat template (Hermes tool calls): shapes, usage, stop
# sequences, the exact event order of a stream, a forced tool_use and its
# tool_result round trip, and Anthropic's error shape for bad bodies
# (tests/e2e/messages_test.mjs).
set -euo pipefail
: "${HEARTH_BIN:?}" "${HEARTH_ROOT:?}"
. "$HEARTH_ROOT/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
tiny_chat_model "$tmp/tiny-chat"
tmpl=$HEARTH_ROOT/tests/fixtures/chat/templates/Qwen-Qwen3-0.6B.jinja
start_server "$tmp/err" --model "$tmp/tiny-chat" --threads 1 --max-body-mb 1 --chat-template "$(cat "$tmpl")"
node "$HEARTH_ROOT/tests/e2e/messages_test.mjs" "http://127.0.0.1:$SERVER_PORT" "$HEARTH_ROOT"
