#!/usr/bin/env bash
# hearth generate and the server are one path (the public API over the
# engine): for the same request on the default (demo) model they give the
# same tokens and text: greedy, seeded sampling, chat messages, stop strings
# and a JSON Schema.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
log=$(mktemp)
trap 'stop_servers; rm -f "$log"' EXIT
start_server "$log" --threads 2   # no --model: the default model
port=$SERVER_PORT
pass=0; fail=0

# check NAME ROUTE BODY GENERATE-ARGS...: the server's text and token ids
# equal generate's (no --model either)
check() {
    local name=$1 route=$2 body=$3; shift 3
    local want got
    want=$(curl -s "http://127.0.0.1:$port/v1/$route" -d "$body" | python3 -c '
import json, sys
c = json.load(sys.stdin)["choices"][0]
text = c["message"]["content"] if "message" in c else c["text"]
print(json.dumps([text or "", [e["id"] for e in c["logprobs"]["content"]]]))')
    got=$("$bin" generate --threads 2 --json "$@" | python3 -c '
import json, sys
o = json.load(sys.stdin)
print(json.dumps([o["text"], o["tokens"]]))')
    if [ "$got" = "$want" ]; then pass=$((pass+1)); else
        fail=$((fail+1)); echo "FAIL $name: generate $got != server $want"; fi
}

check greedy completions \
    '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0, "logprobs": true}' \
    --prompt "In the beginning" --max-tokens 24 --temp 0
check seeded completions \
    '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0.9, "top_p": 0.95, "seed": 11, "logprobs": true}' \
    --prompt "In the beginning" --max-tokens 24 --temp 0.9 --top-p 0.95 --seed 11
check penalties completions \
    '{"prompt": "a new law", "max_tokens": 20, "temperature": 0.7, "seed": 5, "repetition_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.2, "logprobs": true}' \
    --prompt "a new law" --max-tokens 20 --temp 0.7 --seed 5 --repetition-penalty 1.3 \
    --presence-penalty 0.5 --frequency-penalty 0.2
msgs='[{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Tell me a fortune."}]'
check chat-seeded chat/completions \
    "{\"messages\": $msgs, \"max_tokens\": 32, \"temperature\": 0.8, \"seed\": 3, \"logprobs\": true}" \
    --messages "$msgs" --max-tokens 32 --temp 0.8 --seed 3
check chat-greedy chat/completions \
    '{"messages": [{"role": "user", "content": "What does abate mean?"}], "max_tokens": 32, "temperature": 0, "logprobs": true}' \
    --chat "What does abate mean?" --max-tokens 32 --temp 0
check stop completions \
    '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0, "stop": ["day", "zzz"], "logprobs": true}' \
    --prompt "In the beginning" --max-tokens 24 --temp 0 --stop '["day", "zzz"]'
schema='{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}'
check schema chat/completions \
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Who are you?\"}], \"max_tokens\": 40, \"temperature\": 0.5, \"seed\": 2, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": $schema}}, \"logprobs\": true}" \
    --chat "Who are you?" --max-tokens 40 --temp 0.5 --seed 2 --json-schema "$schema"

# the stop string really cut the text
"$bin" generate --threads 2 --prompt "In the beginning" --max-tokens 24 --temp 0 --stop day \
    --json | python3 -c '
import json, sys
o = json.load(sys.stdin)
assert "day" not in o["text"] and o["text"].endswith("next ") and o["finish_reason"] == "stop", o' && pass=$((pass+1)) ||
    { fail=$((fail+1)); echo "FAIL: --stop day did not end the text"; }

# the prompt cache's SSD tier carries a prompt's KV from one run to the next
ssd=$(mktemp -d)
long=$(python3 -c 'print("In the beginning God created the heaven and the earth. " * 8)')
cached() { "$bin" generate --threads 2 --prompt "$long" --max-tokens 2 --ssd-cache "$ssd" --json |
           python3 -c 'import json, sys; print(json.load(sys.stdin)["usage"]["cached_tokens"])'; }
first=$(cached); second=$(cached)
rm -rf "$ssd"
[ "$first" = 0 ] && [ "$second" -ge 32 ] && pass=$((pass+1)) ||
    { fail=$((fail+1)); echo "FAIL: --ssd-cache: cached tokens $first then $second"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
