#!/usr/bin/env bash
# Speculative decoding through the server and generate (docs/speculative.md):
# --draft-model with the demo's draft gives the same tokens and logprobs as
# plain decoding, greedy and seeded, with prompt lookup too; usage and /stats
# count drafted and accepted tokens; bad fields are 400s naming the field; a
# draft model whose tokenizer differs is refused at start, naming the token.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
log=$(mktemp); tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$log" "$tmp"' EXIT
start_server "$log" --threads 2 --draft-model "$root/models/hearth-demo-draft" --batch 4
port=$SERVER_PORT
pass=0; fail=0
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL $*"; }

# post ROUTE BODY -> [text, ids, logprobs, usage] of the first choice
post() {
    curl -s "http://127.0.0.1:$port/v1/$1" -d "$2" | python3 -c '
import json, sys
o = json.load(sys.stdin)
c = o["choices"][0]
text = c["message"]["content"] if "message" in c else c["text"]
lp = c["logprobs"]["content"]
print(json.dumps([text, [e["id"] for e in lp], [e["logprob"] for e in lp], o["usage"]]))'
}
same() { # NAME A B: text, ids and logprobs equal
    if python3 -c 'import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); sys.exit(a[:3]!=b[:3])' "$2" "$3"
    then ok; else bad "$1: $3 != $2"; fi
}

p='"prompt": "the word is light, the verse is dark, the word is light, the verse is", "max_tokens": 40, "logprobs": true'
c='"messages": [{"role": "user", "content": "What does abate mean?"}], "max_tokens": 48, "logprobs": true'
for body in "$p, \"temperature\": 0" "$p, \"temperature\": 0.9, \"seed\": 7" \
            "$c, \"temperature\": 0" "$c, \"temperature\": 0.8, \"top_p\": 0.9, \"seed\": 3"; do
    route=completions; case $body in *messages*) route=chat/completions;; esac
    plain=$(post $route "{$body, \"num_draft_tokens\": 0}")
    draft=$(post $route "{$body}")
    ngram=$(post $route "{$body, \"spec\": \"ngram\", \"num_draft_tokens\": 5}")
    same "draft: $body" "$plain" "$draft"
    same "ngram: $body" "$plain" "$ngram"
done

# usage: predicted-output counts with speculation, none without
draft=$(post chat/completions "{$c, \"temperature\": 0, \"draft_model\": \"default_model\"}")
python3 -c '
import json, sys
u = json.loads(sys.argv[1])[3]["completion_tokens_details"]
assert u["accepted_prediction_tokens"] > 0 and u["rejected_prediction_tokens"] >= 0, u' "$draft" \
    && ok || bad "usage: $draft"
plain=$(post completions "{$p, \"spec\": \"off\"}")
python3 -c 'import json, sys; assert "completion_tokens_details" not in json.loads(sys.argv[1])[3]' \
    "$plain" && ok || bad "usage without speculation: $plain"

# /stats and /metrics
curl -s "http://127.0.0.1:$port/stats" | python3 -c '
import json, sys
s = json.load(sys.stdin)["speculative"]
assert s["draft_model"] is True and s["accepted_tokens"] > 0 and s["drafted_tokens"] >= s["accepted_tokens"], s' \
    && ok || bad "/stats"
m=$(curl -s "http://127.0.0.1:$port/metrics")
grep -q '^hearth_spec_accepted_tokens_total{model="[^"]*"} [1-9]' <<<"$m" \
    && ok || bad "/metrics: $(grep spec_accepted <<<"$m")"

# bad fields: 400 naming the field
expect400() { # BODY PARAM
    local out
    out=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$port/v1/completions" -d "$1")
    case $out in *'"param": "'"$2"'"'*' 400'|*'"param":"'"$2"'"'*' 400') ok;; *) bad "400 $2: $out";; esac
}
expect400 '{"prompt": "a", "num_draft_tokens": 99}' num_draft_tokens
expect400 '{"prompt": "a", "num_draft_tokens": "3"}' num_draft_tokens
expect400 '{"prompt": "a", "spec": "medusa"}' spec
expect400 '{"prompt": "a", "spec": 1}' spec
expect400 '{"prompt": "a", "draft_model": "some/other-model"}' draft_model

# generate takes the same flags and gives the same tokens
g_plain=$("$bin" generate --threads 2 --json --prompt "In the beginning" --max-tokens 30 --temp 0)
g_draft=$("$bin" generate --threads 2 --json --prompt "In the beginning" --max-tokens 30 --temp 0 \
          --draft-model "$root/models/hearth-demo-draft" --num-draft-tokens 4)
g_ngram=$("$bin" generate --threads 2 --json --prompt "In the beginning" --max-tokens 30 --temp 0 \
          --spec ngram)
tok() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokens"])' "$1"; }
[ "$(tok "$g_plain")" = "$(tok "$g_draft")" ] && ok || bad "generate --draft-model"
[ "$(tok "$g_plain")" = "$(tok "$g_ngram")" ] && ok || bad "generate --spec ngram"

# refusals at start, one line, non-zero
if "$bin" generate --prompt x --spec draft 2>"$tmp/e"; then bad "--spec draft without a draft"; \
    else grep -q -- "--draft-model" "$tmp/e" && ok || bad "--spec draft: $(cat "$tmp/e")"; fi
if "$bin" generate --prompt x --num-draft-tokens 0 2>"$tmp/e"; then bad "--num-draft-tokens 0"; \
    else ok; fi
mkdir -p "$tmp/draft"
cp "$root/models/hearth-demo-draft/"* "$tmp/draft/"
python3 - "$tmp/draft/tokenizer.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
v = t["model"]["vocab"]
a = next(k for k, i in v.items() if i == 300); b = next(k for k, i in v.items() if i == 301)
v[a], v[b] = 301, 300
json.dump(t, open(sys.argv[1], "w"))
EOF
if "$bin" serve --port 0 --draft-model "$tmp/draft" 2>"$tmp/e"; then bad "a draft with another tokenizer"; \
    else grep -q "token 300" "$tmp/e" && ok || bad "tokenizer mismatch: $(cat "$tmp/e")"; fi

echo "spec: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
