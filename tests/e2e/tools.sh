#!/usr/bin/env bash
# Tool calling through the official openai client for three template
# families (Qwen3/Hermes, Llama-3.2, Mistral-Nemo): the tiny model serves
# each real template; a guided grammar makes it write one call in the
# family's syntax, so the test checks the server's parsing and the OpenAI
# shapes (tests/e2e/tools_test.mjs), streaming and not.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
tmp=$(mktemp -d)
model=$tmp/tiny-chat
mkdir -p "$model"
cp "$root/tests/fixtures/models/llama/config.json" "$root/tests/fixtures/models/llama/model.safetensors" \
   "$root/tests/fixtures/serve/tokenizer.json" "$root/tests/fixtures/serve/tokenizer_config.json" "$model/"
sed -i 's/"eos_token_id": 2/"eos_token_id": 370/' "$model/config.json"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
status=0
for fam in hermes:Qwen-Qwen3-0.6B llama3:meta-llama-Llama-3.2-3B-Instruct mistral:mistralai-Mistral-Nemo-Instruct-2407; do
    name=${fam%%:*}; tmpl=$root/tests/fixtures/chat/templates/${fam#*:}.jinja
    : >"$tmp/$name.err"
    "$bin" serve --model "$model" --port 0 --threads 1 --chat-template "$(cat "$tmpl")" 2>"$tmp/$name.err" &
    pids+=($!)
    port=
    for _ in $(seq 100); do
        port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/$name.err")
        [ -n "$port" ] && break; sleep 0.05
    done
    [ -n "$port" ] || { cat "$tmp/$name.err"; exit 1; }
    node "$root/tests/e2e/tools_test.mjs" "http://127.0.0.1:$port" "$root" "$name" || status=1
done
exit $status
