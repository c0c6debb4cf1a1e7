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

# keep-alive: a stream queued behind a long generation (--batch 1) gets SSE
# comments before message_start (whose usage waits for the first token),
# then Anthropic's events through message_stop
HEARTH_SSE_KEEPALIVE=0.05 start_server "$tmp/ka" --model "$tmp/tiny-chat" --threads 1 --batch 1
port=$SERVER_PORT
# three long generations (about 0.5 s each on an idle machine) queue one
# behind another (queue_long)
queue_long "$port" '{"prompt": "a", "max_tokens": 3500, "logit_bias": {"370": -100}}'
curl -sfN "http://127.0.0.1:$port/v1/messages" -H 'Content-Type: application/json' \
    -d '{"max_tokens": 2, "stream": true, "messages": [{"role": "user", "content": "b"}]}' >"$tmp/ka.out"
wait "${LONG_PIDS[@]}"
first=$(grep -v '^$' "$tmp/ka.out" | head -1)
[ "$first" = ": keepalive" ] || { echo "FAIL: no keepalive comment first"; cat "$tmp/ka.out"; exit 1; }
[ "$(grep -c '^event: message_start$' "$tmp/ka.out")" = 1 ] && tail -3 "$tmp/ka.out" | grep '^event: message_stop$' >/dev/null ||
    { echo "FAIL: events after the keepalives"; cat "$tmp/ka.out"; exit 1; }
echo "messages: keepalive comments while queued ($(grep -c '^: keepalive' "$tmp/ka.out")), then the events"
