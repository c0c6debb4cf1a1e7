#!/usr/bin/env bash
# Tool calling through the official openai client for three template
# families (Qwen3/Hermes, Llama-3.2, Mistral-Nemo): the tiny model serves
# each real template; a guided grammar makes it write one call in the
# family's syntax, so the test checks the server's parsing and the OpenAI
# shapes (tests/e2e/tools_test.mjs), streaming and not; tool_choice
# required / named force calls by grammar.
set -euo pipefail
: "${HEARTH_BIN:?}" "${HEARTH_ROOT:?}"
. "$HEARTH_ROOT/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
tiny_chat_model "$tmp/tiny-chat"
status=0
for fam in hermes:Qwen-Qwen3-0.6B llama3:meta-llama-Llama-3.2-3B-Instruct mistral:mistralai-Mistral-Nemo-Instruct-2407; do
    name=${fam%%:*}; tmpl=$HEARTH_ROOT/tests/fixtures/chat/templates/${fam#*:}.jinja
    start_server "$tmp/$name.err" --model "$tmp/tiny-chat" --threads 1 --chat-template "$(cat "$tmpl")"
    node "$HEARTH_ROOT/tests/e2e/tools_test.mjs" "http://127.0.0.1:$SERVER_PORT" "$HEARTH_ROOT" "$name" || status=1
done
exit $status
