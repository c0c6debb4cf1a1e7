#!/usr/bin/env bash
# The default model served with no --model: a greedy chat answer equals
# transformers' greedy continuation (tests/fixtures/demo/golden.json) up to
# the end-of-turn token.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
log=$(mktemp)
trap 'stop_servers; rm -f "$log"' EXIT
start_server "$log" --threads 2   # no --model: the default model
port=$SERVER_PORT
pass=0; fail=0
for name in chat-abate chat-genesis chat-fortune-system chat-multiturn; do
    mapfile -t lines < <(python3 - "$root" "$name" <<'PY'
import json, sys
g = json.load(open(sys.argv[1] + "/tests/fixtures/demo/golden.json"))
p = next(p for p in g["prompts"] if p["name"] == sys.argv[2])
text = p["main"]["text"].split("<|im_end|>")[0]
print(json.dumps({"messages": p["messages"], "max_tokens": 32, "temperature": 0}))
print(json.dumps(text))
PY
)
    body=${lines[0]}; want=${lines[1]}
    got=$(curl -s "http://127.0.0.1:$port/v1/chat/completions" -d "$body" |
          python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["message"]["content"] or ""))')
    if [ "$got" = "$want" ]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL $name: $got != $want"; fi
    [ "$name" = chat-abate ] && echo "What does abate mean? -> $got"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
